package core

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"reflect"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// start is a time with microseconds, so no test relies on round clocks.
var start = time.UnixMicro(1763722495123457)

// clock drives miniredis's time (TIME and TTLs) in step with the twin's.
type clock struct {
	m   *miniredis.Miniredis
	now time.Time
}

func newClock(t testing.TB) (*clock, *redis.Client) {
	m := miniredis.RunT(t)
	m.SetTime(start)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	return &clock{m: m, now: start}, c
}

func (c *clock) advance(d time.Duration) {
	c.now = c.now.Add(d)
	c.m.SetTime(c.now)
	c.m.FastForward(d)
}

// randomLimit returns a limit that exercises exact arithmetic: odd rates,
// sub-second periods, emission intervals that are not whole microseconds.
func randomLimit(rng *rand.Rand, alg Algorithm) Limit {
	periods := []time.Duration{time.Millisecond, 7 * time.Millisecond, 100 * time.Millisecond,
		500 * time.Millisecond, time.Second, 3 * time.Second, time.Minute, time.Hour, 24 * time.Hour}
	rates := []int{1, 2, 3, 5, 7, 10, 13, 60, 100, 997}
	l := Limit{Rate: rates[rng.Intn(len(rates))], Period: periods[rng.Intn(len(periods))]}
	if !alg.windowed() && rng.Intn(2) == 0 {
		l.Burst = 1 + rng.Intn(3*l.Rate)
	}
	if alg == SlidingWindowLog && l.Rate > 100 {
		l.Rate = 100 // keep the sets small; exactness does not depend on size
	}
	return l
}

// randomStep returns a time step at the scale of the limit's emission
// interval, with some zero steps and some long idle gaps.
func randomStep(rng *rand.Rand, l Limit) time.Duration {
	unit := l.Period / time.Duration(l.Rate)
	switch rng.Intn(10) {
	case 0, 1:
		return 0
	case 2:
		return time.Duration(rng.Intn(1000)) * time.Microsecond
	case 3:
		return 2 * l.Period * time.Duration(rng.Intn(3))
	default:
		return time.Duration(rng.Int63n(int64(3*unit) + 1)).Truncate(time.Microsecond)
	}
}

func TestTwinMatchesScripts(t *testing.T) {
	seeds := 60
	steps := 300
	if testing.Short() {
		seeds, steps = 12, 150
	}
	stats := map[Algorithm]int{} // decisions seen per first rule's algorithm and outcome
	algs := Algorithms()
	for seed := 1; seed <= seeds; seed++ {
		rng := rand.New(rand.NewSource(int64(seed)))
		var rules []Rule
		for i := 0; i < 1+rng.Intn(3); i++ {
			alg := algs[rng.Intn(len(algs))]
			if i == 0 && seed <= 2*len(algs) {
				alg = algs[seed%len(algs)] // every algorithm alone, twice at least
			}
			rules = append(rules, Rule{Name: fmt.Sprintf("r%d", i), Algorithm: alg, Limit: randomLimit(rng, alg)})
		}
		var opts []Option
		if rng.Intn(3) == 0 { // bound LeakyBucket delays, at the scale of the first rule
			l := rules[0].Limit
			opts = append(opts, WithMaxDelay(time.Duration(rng.Int63n(int64(2*l.Period)+1))))
		}
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			compareTwin(t, rng, rules, opts, steps, stats)
		})
	}
	// The comparison means little unless both outcomes were exercised.
	for _, alg := range Algorithms() {
		if stats[alg+"/allowed"] < 20 || stats[alg+"/denied"] < 5 {
			t.Errorf("%s: too few decisions compared: %v", alg, stats)
		}
	}
}

func compareTwin(t *testing.T, rng *rand.Rand, rules []Rule, opts []Option, steps int, stats map[Algorithm]int) {
	clk, client := newClock(t)
	lim, err := NewPolicy(client, rules, opts...)
	if err != nil {
		t.Fatal(err)
	}
	twin, err := NewLocal(rules, opts...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	capacity := lim.rules[0].capacity
	for _, r := range lim.rules {
		capacity = min(capacity, r.capacity)
	}
	keys := []string{"a", "b", "a much longer key that will be hashed because it runs past the sixty-four byte bound"}
	for step := 0; step < steps; step++ {
		clk.advance(randomStep(rng, rules[rng.Intn(len(rules))].Limit))
		key := keys[rng.Intn(len(keys))]
		var got, want Result
		var gotErr, wantErr error
		op := rng.Intn(20)
		switch {
		case op == 0:
			if err := lim.Reset(ctx, key); err != nil {
				t.Fatal(err)
			}
			twin.Reset(key)
			continue
		case op < 4:
			got, gotErr = lim.Peek(ctx, key)
			want = twin.Peek(clk.now, key)
		default:
			n := 1
			if rng.Intn(3) == 0 {
				n = 1 + rng.Intn(capacity+1) // sometimes one past capacity
			}
			got, gotErr = lim.AllowN(ctx, key, n)
			want, wantErr = twin.AllowN(clk.now, key, n)
			if errors.Is(wantErr, ErrCostExceedsLimit) != errors.Is(gotErr, ErrCostExceedsLimit) {
				t.Fatalf("step %d: AllowN(%d) errors differ: script %v, twin %v", step, n, gotErr, wantErr)
			}
			if wantErr != nil {
				continue
			}
		}
		if gotErr != nil {
			t.Fatalf("step %d: %v", step, gotErr)
		}
		if got.Allowed {
			stats[rules[0].Algorithm+"/allowed"]++
		} else {
			stats[rules[0].Algorithm+"/denied"]++
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("step %d (op %d, key %q, t+%s): rules %v\nscript %+v\ntwin   %+v", step, op, key, clk.now.Sub(start), rules, got, want)
		}
	}
}

// Several requests in one script call, as the batcher sends them (the same
// key more than once, Allow, AllowN and Peek mixed, with and without a
// cost argument each), are decided in order at one instant: each answer
// equals the twin's, fed the same requests one after another.
func TestTwinMatchesBatchedScriptCalls(t *testing.T) {
	seeds, batches := 24, 60
	if testing.Short() {
		seeds, batches = 8, 30
	}
	ctx := context.Background()
	stats := map[Algorithm]int{} // answers per first rule's algorithm and outcome
	algs := Algorithms()
	for seed := 1; seed <= seeds; seed++ {
		rng := rand.New(rand.NewSource(int64(1000 + seed)))
		var rules []Rule
		for i := 0; i < 1+rng.Intn(2); i++ {
			alg := algs[(seed+i)%len(algs)]
			rules = append(rules, Rule{Name: fmt.Sprintf("r%d", i), Algorithm: alg, Limit: randomLimit(rng, alg)})
		}
		t.Run(fmt.Sprintf("seed%d", seed), func(t *testing.T) {
			clk, lim, twin := withTwin(t, rules...)
			client := lim.batch.client
			loadScript(t, client)
			capacity := lim.rules[0].capacity
			for _, r := range lim.rules {
				capacity = min(capacity, r.capacity)
			}
			nrules := len(lim.rules)
			for b := 0; b < batches; b++ {
				clk.advance(randomStep(rng, rules[0].Limit))
				type request struct {
					key     string
					consume bool
					n       int
				}
				var reqs []request
				g := &scriptGroup{}
				for i := 0; i < 1+rng.Intn(6); i++ {
					r := request{key: []string{"a", "b", "c"}[rng.Intn(3)], consume: rng.Intn(4) > 0, n: 1}
					if r.consume && rng.Intn(3) == 0 {
						r.n = 1 + rng.Intn(capacity)
					}
					reqs = append(reqs, r)
					c := &call{keys: lim.appendKeys(nil, storedKey(r.key)), args: appendArgs(nil, r.consume, r.n), unit: r.consume && r.n == 1}
					g.calls = append(g.calls, c)
				}
				g.build(ctx, lim.batch.script, lim.batch.ruleArgs)
				reply, err := client.Do(ctx, g.args...).Int64Slice()
				if err != nil {
					t.Fatalf("batch %d: %v", b, err)
				}
				for i, r := range reqs {
					var v []int64
					if v, reply, err = parseReply(reply, nrules, nil); err != nil {
						t.Fatalf("batch %d, request %d: %v", b, i, err)
					}
					got := buildResult(lim.rules, v)
					var want Result
					if r.consume {
						want, _ = twin.AllowN(clk.now, r.key, r.n)
					} else {
						want = twin.Peek(clk.now, r.key)
					}
					if !reflect.DeepEqual(got, want) {
						t.Fatalf("batch %d (t+%s), request %d of %d %+v: rules %v\nscript %+v\ntwin   %+v",
							b, clk.now.Sub(start), i, len(reqs), r, rules, got, want)
					}
					if got.Allowed {
						stats[rules[0].Algorithm+"/allowed"]++
					} else {
						stats[rules[0].Algorithm+"/denied"]++
					}
				}
			}
		})
	}
	for _, alg := range Algorithms() {
		if stats[alg+"/allowed"] < 20 || stats[alg+"/denied"] < 5 {
			t.Errorf("%s: too few answers compared: %v", alg, stats)
		}
	}
}
