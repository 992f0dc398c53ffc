package core

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestAlgorithmTable checks what the algorithm table (algorithms.go)
// cannot say by itself: that each entry's Lua file defines the function
// the generated dispatch names, that the script carries the dispatch in
// the table's order and policy.lua no list of its own, and that the
// derived views agree with the table.
func TestAlgorithmTable(t *testing.T) {
	algs := Algorithms()
	if len(algs) != len(algorithmTable) {
		t.Fatalf("Algorithms() has %d, the table %d", len(algs), len(algorithmTable))
	}
	seen := map[Algorithm]bool{}
	for i, a := range algs {
		spec := &algorithmTable[i]
		if seen[a] {
			t.Errorf("%s is in the table twice", a)
		}
		seen[a] = true
		if !a.valid() || a.spec() != spec {
			t.Errorf("%s: not found at its own entry", a)
		}
		if spec.kind != windowed && spec.kind != metered {
			t.Errorf("%s: kind %d", a, spec.kind)
		}
		if spec.params == nil || spec.decide == nil || len(spec.lua) == 0 {
			t.Fatalf("%s: entry without params, decide or Lua file", a)
		}
		if !regexp.MustCompile(`^[a-z][a-z0-9_]*$`).MatchString(string(a)) {
			t.Errorf("%q cannot name a Lua local", a)
		}
		own := spec.lua[len(spec.lua)-1]
		src, err := luaFiles.ReadFile("lua/" + own)
		if err != nil {
			t.Fatalf("%s: %v", a, err)
		}
		defines := regexp.MustCompile(`(?m)^local (function )?` + string(a) + `\b`)
		if !defines.Match(src) {
			t.Errorf("%s: lua/%s does not define `local %s`", a, own, a)
		}
		for _, f := range spec.lua {
			if !slices.Contains(scriptFiles, f) {
				t.Errorf("%s: %s is not assembled into the script", a, f)
			}
		}
		rules, err := compileRules([]Rule{{Name: "r", Algorithm: a, Limit: PerSecond(10)}})
		if err != nil {
			t.Fatal(err)
		}
		if code := rules[0].args[0]; code != strconv.Itoa(i+1) {
			t.Errorf("%s: code %v, want %d", a, code, i+1)
		}
	}
	for _, bad := range []Algorithm{"", "meter", "FixedWindow", "fixed_window "} {
		if bad.valid() || bad.windowed() {
			t.Errorf("%q is valid", bad)
		}
	}

	// The dispatch, generated in the table's order, comes before
	// policy.lua, which lists no algorithm itself.
	want := "local algorithms = { -- generated from core/algorithms.go: code i is entry i\n  " +
		strings.Join(stringsOf(algs), ", ") + ",\n}\n"
	if got := algorithmDispatch(); got != want {
		t.Errorf("dispatch %q, want %q", got, want)
	}
	policy, _ := luaFiles.ReadFile("lua/policy.lua")
	if regexp.MustCompile(`(?m)^local algorithms\b`).Match(policy) {
		t.Error("policy.lua defines its own algorithms table")
	}
	at := strings.Index(scriptSrc, algorithmDispatch())
	if at < 0 || at > strings.Index(scriptSrc, string(policy)) {
		t.Error("the script does not carry the dispatch before policy.lua")
	}
	if scriptFiles[0] != "prelude.lua" || scriptFiles[len(scriptFiles)-1] != "policy.lua" {
		t.Errorf("script files %q: prelude first, policy last", scriptFiles)
	}
}

func stringsOf(algs []Algorithm) []string {
	out := make([]string, len(algs))
	for i, a := range algs {
		out[i] = string(a)
	}
	return out
}

// A limiter whose rules are all of one algorithm runs that algorithm's own
// script, without the other algorithms' files; any other policy runs the
// script of every algorithm. Either keeps the codes of the dispatch.
func TestScriptOfOneAlgorithm(t *testing.T) {
	rulesOf := func(algs ...Algorithm) []compiledRule {
		var rules []Rule
		for i, a := range algs {
			rules = append(rules, Rule{Name: fmt.Sprintf("r%d", i), Algorithm: a, Limit: PerSecond(10)})
		}
		compiled, err := compileRules(rules)
		if err != nil {
			t.Fatal(err)
		}
		return compiled
	}
	for i := range algorithmTable {
		spec := &algorithmTable[i]
		own := scriptFor(rulesOf(spec.name))
		if own == allScript || scriptFor(rulesOf(spec.name, spec.name)) != own {
			t.Errorf("%s: a limiter of its rules alone does not run its own script", spec.name)
		}
		src := own.src.(string)
		for _, f := range scriptFiles {
			body, _ := luaFiles.ReadFile("lua/" + f)
			if got, want := strings.Contains(src, string(body)), slices.Contains(scriptFileOrder(algorithmTable[i:i+1]), f); got != want {
				t.Errorf("%s: its script carries %s: %v, want %v", spec.name, f, got, want)
			}
		}
		if !strings.Contains(src, algorithmDispatch()) || !strings.HasPrefix(own.nodeSrc.(string), "#!lua flags=allow-cross-slot-keys\n") {
			t.Errorf("%s: its script lacks the dispatch, or its node form the flag", spec.name)
		}
	}
	if scriptFor(rulesOf(GCRA, FixedWindow)) != allScript {
		t.Error("a policy of two algorithms does not run the script of every algorithm")
	}
}

// An algorithm's script declares every name the files it leaves out
// define at their top level, each name of a list too: the dispatch and
// policy.lua may name any of them, and Redis refuses a script that reads a
// global it does not know.
func TestLuaDefinitionsSeeEveryTopLevelName(t *testing.T) {
	src := "local function fw_a(x)\nlocal fw_b, TAGS2 = 1, 2\nlocal swc = meter\n  local inner = 3\nlocal function f()\n"
	want := []string{"fw_a", "fw_b", "TAGS2", "swc", "f"}
	if got := luaDefinitions([]byte(src)); !slices.Equal(got, want) {
		t.Errorf("luaDefinitions found %q; the file defines %q", got, want)
	}
}

// An algorithm's code is its entry's position, from 1, for a copy of the
// entry too: the generated lone line compares it (see loneLine), and a
// code of 0 would silently shut the lone loop.
func TestAlgorithmCodeOfACopy(t *testing.T) {
	for i := range algorithmTable {
		spec := algorithmTable[i]
		if got := spec.code(); got != i+1 {
			t.Errorf("%s: code %d, want %d", spec.name, got, i+1)
		}
		if spec.lone != "" && !strings.Contains(loneLine(spec.lone, []algorithmSpec{spec}), fmt.Sprintf("'%d'", i+1)) {
			t.Errorf("%s: %q names not its code", spec.name, loneLine(spec.lone, []algorithmSpec{spec}))
		}
	}
}
