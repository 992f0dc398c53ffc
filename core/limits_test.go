package core

import (
	"context"
	"testing"
	"time"
)

// How limits compute: refills polled faster than one interval, sub-second
// periods, a leaky bucket's stored level, fractional intervals. Each test
// is a defect of the write-ups this project grew from.

// A token bucket that stamps its refill time on every call, dropping the
// fraction of a token earned, never refills a key polled faster than one
// token's interval.
func TestRegressionTokenBucketPolledFasterThanRefill(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, GCRA, LeakyBucket} {
		clk, client := newClock(t)
		lim := newOn(t, client, alg, PerSecond(10)) // one token per 100ms
		ctx := context.Background()
		lim.AllowN(ctx, "k", 10)
		admitted := 0
		for i := 0; i < 100; i++ { // poll every 60ms for 6s
			clk.advance(60 * ms)
			if r, _ := lim.Allow(ctx, "k"); r.Allowed {
				admitted++
			}
		}
		if admitted != 60 {
			t.Errorf("%s: polled every 60ms for 6s, admitted %d, want 60 (one per 100ms)", alg, admitted)
		}
	}
}

// Whole-second arithmetic breaks sub-second periods, and a TTL computed in
// whole seconds becomes EXPIRE 0, which deletes the key at once.
func TestRegressionSubSecondPeriods(t *testing.T) {
	for _, alg := range Algorithms() {
		clk, client := newClock(t)
		lim := newOn(t, client, alg, Limit{Rate: 5, Period: 500 * ms})
		ctx := context.Background()
		for i := 0; i < 5; i++ {
			if r, _ := lim.Allow(ctx, "k"); !r.Allowed || r.Remaining != 4-i {
				t.Fatalf("%s: event %d: %+v", alg, i, r)
			}
		}
		r, _ := lim.Allow(ctx, "k")
		if r.Allowed || r.RetryAfter <= 0 || r.RetryAfter > 600*ms {
			t.Errorf("%s: sixth event in 500ms: %+v", alg, r)
		}
		for _, k := range clk.m.Keys() {
			if ttl := clk.m.TTL(k); ttl <= 0 || ttl > time.Second {
				t.Errorf("%s: TTL %s for a 500ms period", alg, ttl)
			}
		}
		clk.advance(time.Second)
		if r, _ := lim.Allow(ctx, "k"); !r.Allowed {
			t.Errorf("%s: not admitted after the period: %+v", alg, r)
		}
	}
}

// A leaky bucket that read a Lua table at index 0 (Lua tables start at 1)
// never saw its stored level: every request found an empty bucket.
func TestRegressionLeakyBucketReadsItsState(t *testing.T) {
	clk, client := newClock(t)
	lim := newOn(t, client, LeakyBucket, PerMinute(2))
	ctx := context.Background()
	lim.Allow(ctx, "k")
	clk.advance(time.Second)
	r, _ := lim.Allow(ctx, "k")
	if !r.Allowed || r.Delay != 29*time.Second || r.Remaining != 0 {
		t.Errorf("second request: %+v, want admitted with Delay 29s", r)
	}
	if r, _ := lim.Allow(ctx, "k"); r.Allowed {
		t.Errorf("third request admitted into a full bucket: %+v", r)
	}
}

// Remaining off by one from float truncation: covered for every algorithm by
// TestRemainingAfterFirstEvent; here the fractional interval case.
func TestRegressionRemainingExact(t *testing.T) {
	clk, client := newClock(t)
	ctx := context.Background()
	for _, alg := range []Algorithm{TokenBucket, GCRA, LeakyBucket} {
		lim := newOn(t, client, alg, PerSecond(3))
		lim.AllowN(ctx, "k", 3)
		clk.advance(time.Second) // exactly three intervals of 1/3 s
		if r, _ := lim.Peek(ctx, "k"); r.Remaining != 3 {
			t.Errorf("%s: three 1/3-second intervals refilled %d, want 3", alg, r.Remaining)
		}
	}
}
