package core

import (
	"testing"
	"time"
)

// After Redis's clock steps back into an earlier window, a
// SlidingWindowCounter key holds a later window's counts: the script
// decides as at that window's start, and counts every duration (the TTL,
// ResetAfter, RetryAfter) from now, so the count weighs for its two whole
// periods, as in the twin. (It used to count the TTL two periods from now,
// which ended before the later window's next one: the count was forgotten
// early, and the script and its twin then disagreed.)
func TestSlidingCounterClockStepBackMatchesTwin(t *testing.T) {
	clk, lim, twin := withTwin(t, Rule{Name: "swc", Algorithm: SlidingWindowCounter, Limit: PerSecond(997)})
	W := start.Truncate(time.Second).Add(time.Hour) // a window's start
	step := stepTwin(t, clk, lim, twin, "k")
	step(W.Add(500*time.Millisecond), 800, "W+0.5s, 800 events")
	step(W.Add(-300*time.Millisecond), 1, "the clock steps back to W-0.3s")
	// In the next window, the 801 events of window W still weigh 0.2 of
	// their count: 997 - 160.2, less the one taken, is 835.
	if r := step(W.Add(1800*time.Millisecond), 1, "W+1.8s"); r.Remaining != 835 {
		t.Errorf("W+1.8s: Remaining %d; want 835, window W's count still weighing", r.Remaining)
	}
}

// After Redis's clock steps back into an earlier window, a FixedWindow key
// holds a later window's count (its tag one ahead): the script keeps
// counting in that later window, taking with INCRBY and giving back what
// it denies, as the twin does; the next window starts over.
func TestFixedWindowClockStepBackMatchesTwin(t *testing.T) {
	clk, lim, twin := withTwin(t, Rule{Name: "fw", Algorithm: FixedWindow, Limit: PerSecond(10)})
	W := start.Truncate(time.Second).Add(time.Hour) // a window's start
	step := stepTwin(t, clk, lim, twin, "k")
	step(W.Add(500*time.Millisecond), 8, "W+0.5s, 8 events")
	if r := step(W.Add(-300*time.Millisecond), 1, "the clock steps back to W-0.3s"); !r.Allowed || r.Remaining != 1 {
		t.Errorf("W-0.3s: %+v; want admitted in window W, 1 left", r)
	}
	if r := step(W.Add(-200*time.Millisecond), 2, "W-0.2s, 2 events"); r.Allowed || r.Remaining != 1 {
		t.Errorf("W-0.2s: %+v; want denied in window W, 1 left", r)
	}
	step(W.Add(-100*time.Millisecond), 1, "W-0.1s, the last event of window W")
	if r := step(W.Add(1100*time.Millisecond), 1, "W+1.1s"); !r.Allowed || r.Remaining != 9 {
		t.Errorf("W+1.1s: %+v; want the next window started over, 9 left", r)
	}
}

// After Redis's clock steps back behind a meter's state, the meter counts
// the step as time still to run before it refills (or drains): a
// denial's RetryAfter and ResetAfter count from now, and a key written
// meanwhile keeps its state as long as that state needs (it used to
// expire as much earlier as the clock had stepped back, forgetting a
// debt). Script and twin agree throughout.
func TestBucketsAcrossClockStepBack(t *testing.T) {
	for _, alg := range []Algorithm{TokenBucket, LeakyBucket, GCRA} {
		t.Run(string(alg), func(t *testing.T) {
			clk, lim, twin := withTwin(t, Rule{Name: "b", Algorithm: alg, Limit: PerSecond(10)})
			T := start.Truncate(time.Second).Add(time.Hour)
			empty, half := stepTwin(t, clk, lim, twin, "empty"), stepTwin(t, clk, lim, twin, "half")
			// Emptied at T, then the clock steps back 5s: nothing comes back
			// before T + 100ms, 5.1s from then.
			empty(T, 10, "T, the whole burst")
			if r := empty(T.Add(-5*time.Second), 1, "T-5s"); r.Allowed || r.RetryAfter != 5100*time.Millisecond {
				t.Errorf("T-5s: %+v; want denied, RetryAfter 5.1s", r)
			}
			if r := empty(T.Add(100*time.Millisecond), 1, "T+100ms"); !r.Allowed {
				t.Errorf("T+100ms: %+v; want one event admitted", r)
			}
			// Half used at T, back to untouched at T + 500ms; 5s before T the
			// meter holds 5.5s of debt: one event fits 4.6s on, at
			// T - 400ms, and the meter is back to untouched 5.5s on.
			half(T, 5, "T, half the burst")
			if r := half(T.Add(-5*time.Second), 1, "T-5s"); r.Allowed || r.RetryAfter != 4600*time.Millisecond || r.ResetAfter != 5500*time.Millisecond {
				t.Errorf("T-5s: %+v; want denied, RetryAfter 4.6s, ResetAfter 5.5s", r)
			}
			if r := half(T.Add(-400*time.Millisecond), 1, "T-400ms"); !r.Allowed || r.Remaining != 0 {
				t.Errorf("T-400ms: %+v; want one event admitted, none left", r)
			}
		})
	}
}
