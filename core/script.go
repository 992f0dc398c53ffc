package core

import (
	"context"
	"embed"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

//go:embed lua/*.lua
var luaFiles embed.FS

// scriptFiles are concatenated in this order into the script of every
// algorithm: what all share (prelude.lua); the start of the policy driver
// (head.lua), preceded by keysLine; the algorithms' lone loops (the
// *_lone.lua files), each preceded by loneLine; the shared functions
// (helpers.lua); each algorithm's files in the order of algorithmTable (a
// file shared by several, meter.lua, once); then the rest of the driver,
// policy.lua, preceded by the dispatch table algorithmDispatch writes.
// The script of one algorithm (see scriptFor) leaves the others' files
// out.
//
// A lone loop comes before every function because each call makes anew
// every function the script defines, up to where it returns: a call the
// loop decides whole returns before any is made.
var scriptFiles = scriptFileOrder(algorithmTable[:])

func scriptFileOrder(specs []algorithmSpec) []string {
	files := []string{"prelude.lua", "head.lua"}
	add := func(f string) {
		if f != "" && !slices.Contains(files, f) {
			files = append(files, f)
		}
	}
	for i := range specs {
		add(specs[i].lone)
	}
	add("helpers.lua")
	for i := range specs {
		for _, f := range specs[i].lua {
			add(f)
		}
	}
	return append(files, "policy.lua")
}

// loneLine returns the Lua line before the lone loop file that sets lone:
// whether the call is of one rule whose algorithm, among specs, is one
// that file decides (compared by code, a string of ARGV: no table made).
func loneLine(file string, specs []algorithmSpec) string {
	var codes []string
	for i := range specs {
		if specs[i].lone == file {
			code := strconv.Itoa(specs[i].code())
			codes = append(codes, "ARGV[off + 2] == '"+code+"'")
		}
	}
	return "local lone = R == 1 and (" + strings.Join(codes, " or ") + ") -- generated from core/algorithms.go\n"
}

// algorithmDispatch returns the Lua line policy.lua dispatches by: the
// algorithms' functions, each at its code (see algorithmTable), so that
// the Go table is the only list of the codes.
func algorithmDispatch() string {
	var b strings.Builder
	b.WriteString("local algorithms = { -- generated from core/algorithms.go: code i is entry i\n ")
	for i := range algorithmTable {
		b.WriteString(" ")
		b.WriteString(string(algorithmTable[i].name))
		b.WriteString(",")
	}
	b.WriteString("\n}\n")
	return b.String()
}

// luaScript is one assembly of the script, as command arguments boxed
// once (a string put in an interface at each call would be copied to the
// heap each time): the SHA-1 and source of its plain form, and of its
// node form, for a call whose requests lie in several slots of one Redis
// Cluster master, which declares the allow-cross-slot-keys flag (Redis 7)
// and reads every key from ARGV (see keysLine).
type luaScript struct {
	hash, src, nodeHash, nodeSrc interface{}
}

func newLuaScript(specs []algorithmSpec) *luaScript {
	plain, node := scriptSource(false, specs), scriptSource(true, specs)
	return &luaScript{hash: redis.NewScript(plain).Hash(), src: plain,
		nodeHash: redis.NewScript(node).Hash(), nodeSrc: node}
}

// allScript is the script of every algorithm, which a policy of several
// algorithms runs; see lua/policy.lua.
var allScript = newLuaScript(algorithmTable[:])

// ownScripts holds the script of each algorithm alone, at its index in
// algorithmTable, each made when first needed.
var ownScripts [len(algorithmTable)]struct {
	once   sync.Once
	script *luaScript
}

// scriptFor returns the script a limiter of rules runs: its algorithm's
// own when they are all of one algorithm, as a limiter of one rule is,
// and otherwise the script of every algorithm.
//
// Every script call runs the script anew, making every function it
// defines up to where it returns: in the script of every algorithm, a
// decision would make the other algorithms' functions too, work that its
// own algorithm's script spares. So only a policy of several algorithms,
// hence of several rules, runs the script of every algorithm. That script
// carries the lone loops too, but they decide only calls of one rule:
// only tests run it with one rule. The codes are the same in every script
// (an algorithm left out is nil in the dispatch).
func scriptFor(rules []compiledRule) *luaScript {
	spec := rules[0].spec
	for i := range rules {
		if rules[i].spec != spec {
			return allScript
		}
	}
	for i := range algorithmTable {
		if spec == &algorithmTable[i] {
			own := &ownScripts[i]
			own.once.Do(func() { own.script = newLuaScript(algorithmTable[i : i+1]) })
			return own.script
		}
	}
	return allScript
}

// keysLine is the Lua line before head.lua that sets the script's KEYS and off
// (see the top of lua/policy.lua): Redis's own, or, for the node form,
// every request's keys, read from the head of ARGV (it declares none).
func keysLine(node bool) string {
	if !node {
		return "local KEYS, off = KEYS, 0\n"
	}
	return `local KEYS, off = (function()
  local keys, m = {}, ARGV[1] + 0
  for i = 1, m do keys[i] = ARGV[1 + i] end
  return keys, 1 + m
end)()
`
}

// luaDefinition matches a top-level definition of an embedded file: a
// local function, or a list of locals ("local a, b = ..."), whose names
// are its first group.
var luaDefinition = regexp.MustCompile(`(?m)^local (?:function )?(\w+(?:\s*,\s*\w+)*)`)

// luaDefinitions returns the names src defines at its top level.
func luaDefinitions(src []byte) []string {
	var names []string
	for _, m := range luaDefinition.FindAllSubmatch(src, -1) {
		for _, name := range strings.Split(string(m[1]), ",") {
			names = append(names, strings.TrimSpace(name))
		}
	}
	return names
}

// scriptSource assembles the script of the algorithms of specs (see
// scriptFiles), in its plain or node form. The names defined by the files
// it leaves out are declared after helpers.lua, as nil locals: the
// dispatch and policy.lua name them (policy.lua compares a rule's function
// with fixed_window and sliding_window_counter to choose fw_take or
// swc_take), and Redis refuses a script that reads a global it does not
// know.
func scriptSource(node bool, specs []algorithmSpec) string {
	files := scriptFileOrder(specs)
	var absent []string
	for _, name := range scriptFiles {
		if slices.Contains(files, name) {
			continue
		}
		absent = append(absent, luaDefinitions(mustReadLua(name))...)
	}
	var b strings.Builder
	if node {
		b.WriteString("#!lua flags=allow-cross-slot-keys\n")
	}
	for _, name := range files {
		switch {
		case name == "head.lua":
			b.WriteString(keysLine(node))
		case name == "policy.lua":
			b.WriteString(algorithmDispatch())
		case slices.ContainsFunc(specs, func(s algorithmSpec) bool { return s.lone == name }):
			b.WriteString(loneLine(name, specs))
		}
		b.Write(mustReadLua(name))
		b.WriteByte('\n')
		if name == "helpers.lua" && len(absent) > 0 {
			b.WriteString("local " + strings.Join(absent, ", ") + " -- the algorithms left out\n")
		}
	}
	return b.String()
}

// mustReadLua returns the embedded file lua/name.
func mustReadLua(name string) []byte {
	src, err := luaFiles.ReadFile("lua/" + name)
	if err != nil {
		panic("sluice: missing embedded script " + name) // a build defect, caught by every test
	}
	return src
}

// costArgs holds small costs already boxed as script arguments, so the hot
// path does not allocate to pass n.
var costArgs = func() (a [65]interface{}) {
	for i := range a {
		a[i] = strconv.Itoa(i)
	}
	return a
}()

// peekArg is Peek's script argument, boxed once.
var peekArg interface{} = "-1"

// appendArgs appends a request's own script argument to dst: its cost n to
// consume it (AllowN), or -n to only look (Peek).
func appendArgs(dst []interface{}, consume bool, n int) []interface{} {
	if !consume {
		if n == 1 {
			return append(dst, peekArg)
		}
		return append(dst, strconv.Itoa(-n))
	}
	return append(dst, countArg(n))
}

// ruleArgs returns the script arguments every request of the limiter
// shares: the number of rules, then each rule's parameters.
func ruleArgs(rules []compiledRule) []interface{} {
	args := []interface{}{strconv.Itoa(len(rules))}
	for i := range rules {
		args = append(args, rules[i].args...)
	}
	return args
}

// run decides key by the script, in the limiter's batcher, within the
// limiter's timeout. It returns the breaker the decision counts against:
// on a cluster, that of the master it was sent to (see masterHealth).
func (l *Limiter) run(ctx context.Context, key string, consume bool, n int) (Result, *health, error) {
	c := getCall(callScript)
	stored := storedKey(key)
	c.keys = l.appendKeys(c.keys, stored)
	c.args = appendArgs(c.args, consume, n)
	c.unit = consume && n == 1
	if l.batch.grouping == groupNode {
		c.slot = clusterSlot(stored)
	}
	answered, err := l.batch.do(ctx, l.opts.timeout, c)
	h := &l.health
	if node := c.node.Load(); node != nil && l.masters != nil {
		if m := l.masters.of(node); m != nil {
			if err != nil {
				m.slot.Store(int32(c.slot)) // for its probe
			}
			h = &m.health
		}
	}
	if !answered {
		return Result{}, h, err // c may still be in a pipeline: not reused
	}
	defer putCall(c) // after the Result is built: c.res is reused
	if err != nil {
		return Result{}, h, err
	}
	if len(c.res) != 1+5*len(l.rules) {
		return Result{}, h, fmt.Errorf("sluice: unexpected script reply of %d values", len(c.res))
	}
	return buildResult(l.rules, c.res), h, nil
}
