package core

import (
	"context"
	"fmt"
	"math/rand"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"
)

// loneGuards open the lone loops (lua/*_lone.lua): each is the start of
// the line core/script.go writes before a loop (see loneLine).
var loneGuards = []string{"local lone = R == 1 and"}

// shutLoneLoops returns src with its lone loops shut, and whether it had
// any.
func shutLoneLoops(src string) (string, bool) {
	shut := false
	for _, g := range loneGuards {
		if strings.Contains(src, g) {
			src = strings.ReplaceAll(src, g, strings.Replace(g, " and", " and false and", 1))
			shut = true
		}
	}
	return src, shut
}

// The lone loops decide a call of one rule, of one request or a batch, as
// the general path does (they may stop at any request and leave the rest
// to it): run side by side on two sets of keys, one script as it is and
// one with the lone loops shut, every reply, error, stored value and TTL
// is the same, whatever the costs (Peek included), the clock's steps
// (back too) and what a key holds (values of other forms, written from
// outside, of another type).
func TestLoneLoopsDecideAsTheGeneralPath(t *testing.T) {
	ctx := context.Background()
	var algs []Algorithm // those with a lone loop
	for i := range algorithmTable {
		if algorithmTable[i].lone != "" {
			algs = append(algs, algorithmTable[i].name)
		}
	}
	seeds, steps := 25, 250
	if testing.Short() || raceEnabled { // many script runs, no goroutines
		seeds, steps = 10, 150
	}
	for seed := 1; seed <= seeds; seed++ {
		rng := rand.New(rand.NewSource(int64(seed)))
		alg := algs[seed%len(algs)]
		l := randomLimit(rng, alg)
		var opts []Option
		if alg == LeakyBucket && rng.Intn(3) == 0 {
			opts = append(opts, WithMaxDelay(time.Duration(rng.Int63n(int64(2*l.Period)+1))))
		}
		t.Run(fmt.Sprintf("seed%d-%s", seed, alg), func(t *testing.T) {
			clk, c := newClock(t)
			lim, err := New(c, alg, l, opts...)
			if err != nil {
				t.Fatal(err)
			}
			lone := lim.batch.script.src.(string)
			general, ok := shutLoneLoops(lone)
			if !ok {
				t.Fatal("the script has no lone loop")
			}
			// three keys a side; a call of one request on one of them, or
			// of a batch of several on any, the same key again included
			var keys [2][3]string
			for j := range keys[0] {
				k := lim.keys(fmt.Sprint("k", j))[0]
				keys[0][j], keys[1][j] = "lone:"+k, "general:"+k
			}
			capacity := lim.rules[0].capacity
			var list [3]bool // the keys holding a list
			for step := 0; step < steps; step++ {
				if rng.Intn(12) == 0 {
					clk.now = clk.now.Add(-time.Duration(rng.Int63n(int64(l.Period) + 1)))
					clk.m.SetTime(clk.now)
				} else {
					clk.advance(randomStep(rng, l))
				}
				if rng.Intn(25) == 0 { // the same value from outside in both
					v := []string{"123:4", "0123", "abc", "1e300", "-5", "12.5", "4503599627370496", "", "list"}[rng.Intn(9)]
					ttl := time.Duration(rng.Intn(2)) * time.Second // 0: none
					j := rng.Intn(3)
					list[j] = v == "list"
					for _, side := range keys {
						c.Del(ctx, side[j])
						if v == "list" {
							c.RPush(ctx, side[j], "x")
						} else {
							c.Set(ctx, side[j], v, ttl)
						}
					}
				}
				size := 1
				// (not while a key holds a list: on miniredis, once a
				// redis.call in a script failed, every later one fails
				// alike, so the general path would fail the rest of the
				// batch; Redis fails only the one request)
				if rng.Intn(4) == 0 && !slices.Contains(list[:], true) {
					size = 2 + rng.Intn(4)
				}
				var costs []int
				var on []int
				unit := rng.Intn(2) == 0
				for range size {
					n := 1
					switch rng.Intn(6) {
					case 0:
						n = -1
					case 1:
						n = 1 + rng.Intn(capacity+2)
					case 2:
						n = -(1 + rng.Intn(capacity+2))
					}
					unit = unit && n == 1
					costs = append(costs, n)
					on = append(on, rng.Intn(3))
				}
				var got [2]string
				for i, src := range [2]string{lone, general} {
					args := []interface{}{"eval", src, size}
					for _, j := range on {
						args = append(args, keys[i][j])
					}
					args = append(args, lim.batch.ruleArgs...)
					if !unit {
						for _, n := range costs {
							args = append(args, fmt.Sprint(n))
						}
					}
					reply, err := c.Do(ctx, args...).Result()
					got[i] = fmt.Sprintf("reply %v, error %v", readableReply(t, reply), err)
					for _, k := range keys[i] {
						typ, _ := c.Type(ctx, k).Result()
						val, _ := c.Get(ctx, k).Result()
						ttl, _ := c.PTTL(ctx, k).Result()
						got[i] += fmt.Sprintf("; key %s %q, TTL %v", typ, val, ttl)
					}
				}
				if !reflect.DeepEqual(got[0], got[1]) {
					t.Fatalf("step %d, costs %v on keys %v, %v: the lone loop answered %s; the general path %s", step, costs, on, l, got[0], got[1])
				}
			}
		})
	}
}

// luaPosition is the place miniredis's Lua puts before the message of an
// error that redis.call raises (":345: WRONGTYPE ..."), which redis.pcall's
// error table has not; Redis's own Lua puts none in either.
var luaPosition = regexp.MustCompile(`^[^ ]*:\d+: `)

// readableReply returns reply, a script's for a policy of one rule, as
// each request's answer: its integers, or its error message without
// luaPosition.
func readableReply(t *testing.T, reply interface{}) interface{} {
	a, ok := reply.([]interface{})
	if !ok {
		return reply
	}
	ints := make([]int64, len(a))
	for i, v := range a {
		if ints[i], ok = v.(int64); !ok {
			return reply
		}
	}
	var out []string
	for len(ints) > 0 {
		if ints[0] < 0 {
			msg, rest, err := scriptErrorIn(ints)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("error %q", luaPosition.ReplaceAllString(string(msg), "")))
			ints = rest
			continue
		}
		n := 2 + int(ints[0]&1)
		if len(ints) < n {
			t.Fatalf("a reply cut short: %v", ints)
		}
		out = append(out, fmt.Sprint(ints[:n]))
		ints = ints[n:]
	}
	return out
}
