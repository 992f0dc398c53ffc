package core

import (
	"context"
	"fmt"
	"math/rand"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// A request's work in Redis does not grow with its cost: AllowN(n) on a
// SlidingWindowLog stores one member, whatever n, and the log still
// decides exactly (the weight in the window, RetryAfter the time until
// enough weight has left).
func TestSlidingLogStoresOneMemberPerRequest(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	lim := newOn(t, c, SlidingWindowLog, PerHour(200000))
	key := lim.keys("k")[0]
	c.Del(ctx, key)
	r, err := lim.AllowN(ctx, "k", 200000)
	if err != nil || !r.Allowed || r.Remaining != 0 {
		t.Fatalf("AllowN(200000): %+v %v", r, err)
	}
	if n := c.ZCard(ctx, key).Val(); n != 1 {
		t.Fatalf("AllowN(200000) stored %d members, want 1", n)
	}
	r, err = lim.Allow(ctx, "k")
	if err != nil || r.Allowed || r.RetryAfter <= time.Hour-time.Minute || r.RetryAfter > time.Hour {
		t.Fatalf("Allow after the window is full: %+v %v", r, err)
	}
	if ttl := c.PTTL(ctx, key).Val(); ttl <= 0 || ttl > 2*time.Hour {
		t.Fatalf("TTL %s", ttl)
	}
}

// Requests of several costs, against the twin at chosen times: the weight
// in every trailing window, Remaining after each, and RetryAfter as the time
// until enough of the oldest weight has left.
func TestSlidingLogWeightedSequence(t *testing.T) {
	clk, lim, twin := withTwin(t, Rule{Name: "log", Algorithm: SlidingWindowLog, Limit: PerSecond(10)})
	step := stepTwin(t, clk, lim, twin, "k")
	T := start.Add(time.Hour)
	check := func(r Result, allowed bool, remaining int, retry time.Duration, what string) {
		t.Helper()
		if r.Allowed != allowed || r.Remaining != remaining || r.RetryAfter != retry {
			t.Fatalf("%s: %+v, want allowed %v, remaining %d, retry %s", what, r, allowed, remaining, retry)
		}
	}
	check(step(T, 3, "3 at T"), true, 7, 0, "3 at T")
	check(step(T.Add(100*ms), 1, "1 at T+100ms"), true, 6, 0, "1 at T+100ms")
	check(step(T.Add(200*ms), 4, "4 at T+200ms"), true, 2, 0, "4 at T+200ms")
	check(step(T.Add(200*ms), 2, "2 more at T+200ms"), true, 0, 0, "2 more at T+200ms")
	// 10 in the window: a cost of 3 waits until the 3 of T leave; 4 until
	// the 1 of T+100ms leaves too; 5 until the 4 of T+200ms leave.
	check(step(T.Add(500*ms), 3, "3 at T+500ms"), false, 0, 500*ms, "3 at T+500ms")
	check(step(T.Add(500*ms), 4, "4 at T+500ms"), false, 0, 600*ms, "4 at T+500ms")
	check(step(T.Add(500*ms), 5, "5 at T+500ms"), false, 0, 700*ms, "5 at T+500ms")
	check(step(T.Add(time.Second), 3, "3 at T+1s"), true, 0, 0, "3 at T+1s")
	check(step(T.Add(1100*ms), 2, "2 at T+1.1s"), false, 1, 100*ms, "2 at T+1.1s")
	check(step(T.Add(1100*ms), 1, "1 at T+1.1s"), true, 0, 0, "1 at T+1.1s")
	// 3 of T+1s and 1 of T+1.1s remain: 10 more wait until both have left.
	check(step(T.Add(1200*ms), 10, "10 at T+1.2s"), false, 6, 900*ms, "10 at T+1.2s")
	members, err := clk.m.ZMembers(lim.keys("k")[0])
	if err != nil || len(members) > 6 {
		t.Fatalf("%d members for 6 admitted requests: %v", len(members), err)
	}
}

// The log is exact in every trailing window at limits whose meters count
// in milliseconds: Rate events at a whole millisecond + 900µs, and one
// more 500µs less than a Period later, is denied.
func TestSlidingLogExactAtLargeLimits(t *testing.T) {
	for _, l := range []Limit{PerDay(13033), PerDay(100001), PerHour(400009)} {
		t.Run(l.String(), func(t *testing.T) {
			clk, lim, twin := withTwin(t, Rule{Name: "log", Algorithm: SlidingWindowLog, Limit: l})
			t0 := start.Truncate(time.Millisecond).Add(time.Hour + 900*time.Microsecond)
			step := stepTwin(t, clk, lim, twin, "k")
			if r := step(t0, l.Rate, "Rate at t0"); !r.Allowed {
				t.Fatalf("Rate at t0: %+v", r)
			}
			r := step(t0.Add(l.Period-500*time.Microsecond), 1, "one more at t0 + Period - 500µs")
			if r.Allowed {
				t.Fatalf("%s admitted %d events within %s: %+v", l, l.Rate+1, l.Period-500*time.Microsecond, r)
			}
			if r.RetryAfter != 500*time.Microsecond {
				t.Fatalf("RetryAfter %s, want 500µs", r.RetryAfter)
			}
			if r := step(t0.Add(l.Period), 1, "one more at t0 + Period"); !r.Allowed {
				t.Fatalf("at t0 + Period: %+v", r)
			}
		})
	}
}

// Only the meters and SlidingWindowCounter, whose arithmetic needs it,
// count in milliseconds at large limits, and exactly when the Limit doc
// says so.
func TestMillisecondTicks(t *testing.T) {
	for _, tc := range []struct {
		l    Limit
		alg  Algorithm
		tick int64
	}{
		{PerDay(13033), SlidingWindowLog, 1},
		{PerDay(13033), FixedWindow, 1},
		{PerDay(13033), GCRA, 1000},
		{PerDay(13033), SlidingWindowCounter, 1000},
		{PerDay(6515), SlidingWindowCounter, 1},
		{PerDay(6516), SlidingWindowCounter, 1000},
		{PerDay(1 << 20), TokenBucket, 1}, // gcd 2^13: 2^20 × 86.4e9/2^13 < 2^50
		{PerHour(400009), LeakyBucket, 1000},
		{Limit{Rate: 1 << 49, Period: time.Hour}, SlidingWindowLog, 1},
		{Limit{Rate: 3, Period: 1 << 48 * time.Microsecond}, SlidingWindowLog, 1},
	} {
		c, err := compileRule(Rule{Name: "r", Algorithm: tc.alg, Limit: tc.l})
		if err != nil {
			t.Fatalf("%s %s: %v", tc.alg, tc.l, err)
		}
		if c.tick != tc.tick {
			t.Errorf("%s %s: tick %dµs, want %dµs", tc.alg, tc.l, c.tick, tc.tick)
		}
		want := int64(1)
		switch {
		case tc.alg == FixedWindow || tc.alg == SlidingWindowLog:
		case tc.alg == SlidingWindowCounter:
			if 2*int64(tc.l.Rate)*int64(tc.l.Period/time.Microsecond) > maxExact {
				want = 1000
			}
		default:
			p := int64(tc.l.Period / time.Microsecond)
			if int64(tc.l.Rate) > maxExact/(p/gcd(int64(tc.l.Rate), p)) {
				want = 1000
			}
		}
		if want != tc.tick {
			t.Errorf("%s %s: the documented rule says %dµs ticks, the table %dµs", tc.alg, tc.l, want, tc.tick)
		}
	}
}

// A log whose weights have summed to 4×10^15 since its key was created
// renumbers its members (one request's work grows with the requests in its
// window, once in 4×10^15 events): decisions go on exact.
func TestSlidingLogRenumbers(t *testing.T) {
	clk, lim, twin := withTwin(t, Rule{Name: "log", Algorithm: SlidingWindowLog, Limit: PerSecond(10)})
	key := lim.keys("k")[0]
	T := start.Add(time.Hour)
	// The state three requests of costs 2, 3 and 4 leave, the first at
	// T - 2s (gone), the others at T - 500ms and T - 400ms, numbered just
	// below 4×10^15.
	const top = 4e15
	at := func(d time.Duration) float64 { return float64(T.Add(d).UnixMicro()) }
	name := func(x int64) string { return fmt.Sprint(5e15 + x) }
	clk.m.ZAdd(key, at(-2*time.Second), name(top-8))
	clk.m.ZAdd(key, at(-500*ms), name(top-5))
	clk.m.ZAdd(key, at(-400*ms), name(top-1))
	clk.m.SetTTL(key, time.Hour)
	for _, e := range []struct {
		d time.Duration
		n int
	}{{-2 * time.Second, 2}, {-500 * ms, 3}, {-400 * ms, 4}} {
		clk.now = T.Add(e.d)
		if _, err := twin.AllowN(clk.now, "k", e.n); err != nil {
			t.Fatal(err)
		}
	}
	clk.now = T.Add(-400 * ms)
	clk.m.SetTime(clk.now)
	step := stepTwin(t, clk, lim, twin, "k")
	if r := step(T, 2, "2 at T, past 4×10^15"); !r.Allowed || r.Remaining != 1 {
		t.Fatalf("2 at T: %+v", r)
	}
	members, _ := clk.m.ZMembers(key)
	if !reflect.DeepEqual(members, []string{"5000000000000003", "5000000000000007", "5000000000000009"}) {
		t.Fatalf("members after renumbering: %q", members)
	}
	if ttl := clk.m.TTL(key); ttl <= 0 || ttl > 2*time.Second {
		t.Fatalf("TTL %s after renumbering", ttl)
	}
	step(T.Add(100*ms), 2, "2 at T+100ms")
	step(T.Add(500*ms), 3, "3 at T+500ms")
	step(T.Add(600*ms), 4, "4 at T+600ms")
	step(T.Add(700*ms), 6, "6 at T+700ms")
}

// The log against its twin on random sequences of weighted requests, with
// the clock stepping back now and then: decision by decision, alone and
// in a policy of two logs. (The clock steps back no further than the
// twin's expiry of a state it has dropped: the twin forgets a state at the
// instant it is untouched, Redis at the end of its cell, and a step back
// behind a state forgotten by one and not the other is not the log's
// arithmetic.)
func TestSlidingLogMatchesTwinWithClockSteps(t *testing.T) {
	for seed := int64(1); seed <= 12; seed++ {
		rng := rand.New(rand.NewSource(seed))
		l := randomLimit(rng, SlidingWindowLog)
		rules := []Rule{{Name: "log", Algorithm: SlidingWindowLog, Limit: l}}
		if seed%3 == 0 {
			rules = append(rules, Rule{Name: "second", Algorithm: SlidingWindowLog, Limit: PerSecond(1000)})
		}
		t.Run(fmt.Sprintf("seed%d %s", seed, l), func(t *testing.T) {
			clk, lim, twin := withTwin(t, rules...)
			step := stepTwin(t, clk, lim, twin, "k")
			now, last, newest := clk.now, clk.now, time.Time{} // newest: the newest request admitted
			admitted, denied := 0, 0
			for i := 0; i < 300 && !t.Failed(); i++ {
				d := randomStep(rng, l)
				if rng.Intn(15) == 0 {
					d = -time.Duration(rng.Int63n(int64(l.Period))).Truncate(time.Microsecond)
				}
				now = now.Add(d)
				for _, r := range rules {
					if gone := newest.Add(r.Limit.Period); !newest.IsZero() && !last.Before(gone) && now.Before(gone) {
						now = gone
					}
				}
				n := 1
				if rng.Intn(2) == 0 {
					n = 1 + rng.Intn(l.Rate)
				}
				if step(now, n, fmt.Sprintf("step %d, %d at t+%s", i, n, now.Sub(start))).Allowed {
					admitted++
					if now.After(newest) {
						newest = now
					}
				} else {
					denied++
				}
				if now.After(last) {
					last = now
				}
			}
			if admitted < 20 || denied < 5 {
				t.Errorf("too few decisions of each kind: %d admitted, %d denied", admitted, denied)
			}
		})
	}
}

// At the largest valid limits the log's numbers, times and durations stay
// exact: in Redis's own Lua, and against the twin through a renumbering.
func TestSlidingLogExtremeLimits(t *testing.T) {
	limits := []Limit{
		{Rate: 1 << 50, Period: time.Millisecond},
		{Rate: 1 << 50, Period: 1 << 49 * time.Microsecond},
		{Rate: 3, Period: 1 << 49 * time.Microsecond},
	}
	c := redistest.Client(t)
	ctx := context.Background()
	for _, l := range limits {
		lim := newOn(t, c, SlidingWindowLog, l)
		// Peek must deny while the window holds the Rate events: when the
		// machine stalls the pair for a whole Period (1ms for the first
		// limit), the window has passed and the pair is tried again.
		for attempt := 1; ; attempt++ {
			c.Del(ctx, lim.keys("k")...)
			start := time.Now()
			if r, err := lim.AllowN(ctx, "k", l.Rate); err != nil || !r.Allowed || r.Remaining != 0 {
				t.Fatalf("%s: AllowN(Rate): %+v %v", l, r, err)
			}
			r, err := lim.Peek(ctx, "k")
			if err == nil && r.Allowed && time.Since(start) >= l.Period && attempt < 50 {
				continue
			}
			if err != nil || r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > l.Period {
				t.Fatalf("%s: Peek after Rate: %+v %v", l, r, err)
			}
			break
		}
	}
	for _, l := range limits {
		clk, lim, twin := withTwin(t, Rule{Name: "log", Algorithm: SlidingWindowLog, Limit: l})
		step := stepTwin(t, clk, lim, twin, "k")
		now := clk.now
		for i := 0; i < 12 && !t.Failed(); i++ { // 4×10^15 events: one renumbering at least
			step(now, l.Rate/2, fmt.Sprintf("%s: Rate/2 at step %d", l, i))
			step(now, l.Rate/2+1, fmt.Sprintf("%s: Rate/2+1 at step %d", l, i))
			now = now.Add(l.Period / 3)
		}
	}
}

// A regression guard: the log once named its members "<time>:<c+i>", c the
// events in the window, trusting that c only grows while the time stays
// the same. After the clock stepped back to a time that already had
// members, c could be smaller than it was there, the new member's name
// existed already, ZADD added nothing, and the event was not recorded:
// Redis admitted where its twin (and the limit) denied. Members are now
// numbered by the running total of admitted events, which never repeats.
func TestSlidingLogClockStepBack(t *testing.T) {
	clk, lim, twin := withTwin(t, Rule{Name: "log", Algorithm: SlidingWindowLog, Limit: PerSecond(3)})
	ctx := context.Background()
	T := start.Add(time.Hour)
	step := func(tm time.Time, what string) (Result, Result) {
		clk.advance(tm.Sub(clk.now)) // TTLs move with the clock, as Redis's expiry times do
		got, err := lim.Allow(ctx, "k")
		if err != nil {
			t.Fatal(err)
		}
		want, _ := twin.AllowN(tm, "k", 1)
		return got, want
	}
	step(T.Add(-20*time.Microsecond), "T-20µs")
	step(T.Add(-10*time.Microsecond), "T-10µs")
	step(T, "T")
	// Later: the two oldest have left; one more event.
	step(T.Add(-10*time.Microsecond+time.Second), "T-10µs+1s")
	// The clock steps back to T: the window holds T's event and the later
	// one, where the old naming made T's member name again.
	for i := 0; i < 3; i++ {
		got, want := step(T, "T again")
		if got.Allowed != want.Allowed || got.Remaining != want.Remaining {
			t.Fatalf("request %d after the clock stepped back: script %+v\ntwin %+v", i, got, want)
		}
	}
}
