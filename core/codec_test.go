package core

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A request's error travels in the script's reply as integers (put_error in
// lua/policy.lua) and comes out as the message Redis gave, whole: for every
// length around the six bytes an integer holds, and cut at maxScriptError.
// The script's own put_error runs here, on its own, in a real Redis.
func TestScriptErrorsTravelAsIntegers(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	at := strings.Index(scriptSrc, "local function put_error")
	indent := scriptSrc[strings.LastIndexByte(scriptSrc[:at], '\n')+1 : at] // it is made inside a block
	src := scriptSrc[at:]
	src = src[:strings.Index(src, "\n"+indent+"end\n")+len(indent)+5]
	harness := "local replies, top = {}, 0\n" + src + "\nput_error(ARGV[1])\nreplies[top + 1] = 7\nreturn replies"
	for _, n := range []int{0, 1, 5, 6, 7, 11, 12, 13, 66, maxScriptError - 1, maxScriptError, maxScriptError + 1, 2000} {
		msg := make([]byte, n)
		for i := range msg {
			msg[i] = byte(1 + (i*37)%255) // every byte but 0
		}
		reply, err := c.Eval(ctx, harness, nil, string(msg)).Int64Slice()
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		_, rest, err := parseReply(reply, 1, nil)
		want := string(msg[:min(n, maxScriptError)])
		var se scriptError
		if !errors.As(err, &se) || string(se) != want {
			t.Errorf("%d bytes: got %q, want the message's first %d bytes", n, err, len(want))
		}
		if len(rest) != 1 || rest[0] != 7 {
			t.Errorf("%d bytes: the next answer should follow the error, got %v", n, rest)
		}
	}
	// A reply cut short is an error of its own, not a message read out of
	// bounds.
	if _, _, err := parseReply([]int64{-20, 1}, 1, nil); err == nil || errors.As(err, new(scriptError)) {
		t.Errorf("truncated error: %v", err)
	}
}

// parseReply expands the script's short answers (two or three integers a
// rule) into the form buildResult reads, and refuses an answer cut short.
func TestParseReplyExpandsShortAnswers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply []int64
		rules int
		want  []int64
		rest  int
	}{
		{"admitted", []int64{9*4 + 2, 500, 77}, 1, []int64{1, 1, 9, 0, 500, 0}, 1},
		{"admitted with delay", []int64{3*4 + 3, 500, 40}, 1, []int64{1, 1, 3, 0, 500, 40}, 0},
		{"denied with retry", []int64{0*4 + 1, 900, 250}, 1, []int64{0, 0, 0, 250, 900, 0}, 0},
		{"denied by the second rule", []int64{5*4 + 2, 10, 0*4 + 1, 20, 30}, 2, []int64{0, 1, 5, 0, 10, 0, 0, 0, 30, 20, 0}, 0},
	} {
		got, rest, err := parseReply(tc.reply, tc.rules, nil)
		if err != nil || !slices.Equal(got, tc.want) || len(rest) != tc.rest {
			t.Errorf("%s: got %v, rest %v, %v; want %v", tc.name, got, rest, err, tc.want)
		}
	}
	for _, cut := range [][]int64{{}, {9*4 + 2}, {3*4 + 3, 500}, {5*4 + 2, 10, 0*4 + 1}} {
		if _, _, err := parseReply(cut, 2, nil); err == nil {
			t.Errorf("%v: parsed as a whole answer of two rules", cut)
		}
	}
}

// burstAndDaily returns a two-rule policy on c, GCRA 10/s and
// FixedWindow 1000/day, under a prefix of its own.
func burstAndDaily(t *testing.T, c redis.UniversalClient, prefix string) *Limiter {
	t.Helper()
	lim, err := NewPolicy(c, []Rule{
		{Name: "burst", Algorithm: GCRA, Limit: PerSecond(10)},
		{Name: "daily", Algorithm: FixedWindow, Limit: PerDay(1000)},
	}, WithPrefix(fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// In one script call of a policy, a request that fails after its first
// rule was decided (the second rule's key has the wrong type) answers with
// its error alone: the answers around it keep their places, and nothing of
// its partial answer is left in the reply, wherever it stands in the call.
func TestPolicyErrorMidRequestLeavesNoPartialAnswer(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	lim := burstAndDaily(t, c, "partial")
	if err := c.HSet(ctx, lim.keys("poisoned")[1], "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	nrules := len(lim.rules)
	for _, order := range [][]string{
		{"a", "poisoned", "b"},
		{"c", "poisoned"},
		{"poisoned"},
		{"poisoned", "poisoned", "d"},
	} {
		var keys []string
		args := append([]interface{}{}, lim.batch.ruleArgs...)
		for _, k := range order {
			keys = append(keys, lim.keys(k)...)
			args = appendArgs(args, true, 1)
		}
		reply, err := redis.NewScript(scriptSrc).Run(ctx, c, keys, args...).Int64Slice()
		if err != nil {
			t.Fatalf("%v: %v", order, err)
		}
		for _, k := range order {
			var res []int64
			res, reply, err = parseReply(reply, nrules, nil)
			if k == "poisoned" {
				if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
					t.Errorf("%v: the poisoned request answered %v, %v", order, res, err)
				}
				continue
			}
			if err != nil || res[0] != 1 || res[1] != 1 || res[6] != 1 {
				t.Errorf("%v: %s answered %v, %v; want admitted by both rules", order, k, res, err)
			}
		}
		if len(reply) != 0 {
			t.Errorf("%v: %d values left after the last answer: %v", order, len(reply), reply)
		}
	}
}

// A script call whose requests all consume 1 (Allow) carries their keys
// and no argument per request; one with any other request (AllowN, Peek)
// carries one per request. Redis decides both alike, a two-rule policy too.
func TestUnitRequestsSendOnlyTheirKeys(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	lim := burstAndDaily(t, c, "unit")
	loadScript(t, c)
	R := len(lim.rules)
	req := func(key string, consume bool, n int) *call {
		c := &call{keys: lim.appendKeys(nil, storedKey(key))}
		c.args = appendArgs(nil, consume, n)
		c.unit = consume && n == 1
		return c
	}
	for _, tc := range []struct {
		name  string
		calls []*call
		want  []int // remaining by the first rule, per request
	}{
		{"allows", []*call{req("a", true, 1), req("b", true, 1), req("a", true, 1)}, []int{9, 9, 8}},
		{"mixed", []*call{req("c", true, 1), req("c", true, 3), req("c", false, 1), req("d", true, 1)}, []int{9, 6, 6, 9}},
	} {
		g := &scriptGroup{calls: tc.calls}
		g.build(ctx, lim.batch.script, lim.batch.ruleArgs)
		keys := len(tc.calls) * R
		perRequest := len(g.args) - 3 - keys - len(lim.batch.ruleArgs)
		if unit := allUnit(tc.calls); unit && perRequest != 0 || !unit && perRequest != len(tc.calls) {
			t.Fatalf("%s: %d script arguments per request in %v", tc.name, perRequest, g.args)
		}
		reply, err := c.Do(ctx, g.args...).Int64Slice()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for i, want := range tc.want {
			var res []int64
			if res, reply, err = parseReply(reply, R, nil); err != nil || res[0] != 1 || res[2] != int64(want) {
				t.Errorf("%s: request %d answered %v, %v; want admitted with %d remaining", tc.name, i, res, err, want)
			}
		}
		if len(reply) != 0 {
			t.Errorf("%s: %d values left after the last answer", tc.name, len(reply))
		}
	}
}
