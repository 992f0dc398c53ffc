package core

import (
	"context"
	"fmt"
	"math/rand"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fastPathGuard opens the lone fast path of lua/policy.lua.
const fastPathGuard = "if #KEYS == 1 and ARGV[off + 1] == '1'"

// The lone fast path at the top of the script decides a call of one
// request as the general path does: run side by side on two keys, one
// script as it is and one with the fast path shut, every reply, error,
// stored value and TTL is the same, whatever the cost (Peek included),
// the clock's steps (back too) and what the key holds (values of other
// forms, written from outside, of another type).
func TestLoneFastPathDecidesAsTheLoop(t *testing.T) {
	ctx := context.Background()
	algs := Algorithms()
	seeds, steps := 24, 250
	if testing.Short() || raceEnabled { // many script runs, no goroutines
		seeds, steps = 12, 150
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
			fast := lim.batch.script.src.(string)
			if !strings.Contains(fast, fastPathGuard) {
				t.Fatal("the script has no fast path")
			}
			general := strings.Replace(fast, fastPathGuard, "if false and "+fastPathGuard[len("if "):], 1)
			key := lim.keys("k")[0]
			keys := [2]string{"fast:" + key, "general:" + key}
			capacity := lim.rules[0].capacity
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
					for _, k := range keys {
						c.Del(ctx, k)
						if v == "list" {
							c.RPush(ctx, k, "x")
						} else {
							c.Set(ctx, k, v, ttl)
						}
					}
				}
				n := 1
				switch rng.Intn(6) {
				case 0:
					n = -1
				case 1:
					n = 1 + rng.Intn(capacity+2)
				case 2:
					n = -(1 + rng.Intn(capacity+2))
				}
				unit := n == 1 && rng.Intn(2) == 0
				var got [2]string
				for i, src := range [2]string{fast, general} {
					args := append([]interface{}{"eval", src, 1, keys[i]}, lim.batch.ruleArgs...)
					if !unit {
						args = append(args, fmt.Sprint(n))
					}
					reply, err := c.Do(ctx, args...).Result()
					typ, _ := c.Type(ctx, keys[i]).Result()
					val, _ := c.Get(ctx, keys[i]).Result()
					ttl, _ := c.PTTL(ctx, keys[i]).Result()
					got[i] = fmt.Sprintf("reply %v, error %v; key %s %q, TTL %v", reply, err, typ, val, ttl)
				}
				if !reflect.DeepEqual(got[0], got[1]) {
					t.Fatalf("step %d, n=%d, %v: the fast path answered %s; the general path %s", step, n, l, got[0], got[1])
				}
			}
		})
	}
}
