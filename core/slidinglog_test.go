package core

import (
	"testing"
	"time"
)

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
