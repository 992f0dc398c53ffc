package core

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestAllocBudget holds the decision path to its allocation budget beyond
// what go-redis allocates for the same script call in a pipeline (a lone
// decision goes as a plain command, which allocates less): the Result's
// Rules and, when a batch starts from idle, the flusher goroutine (amortized
// away under load), whatever the number of rules. The Redis keys are built
// in the pooled call's buffers and passed by pointer, and the reply is read
// as integers, so neither allocates per decision.
// Allocation counts mean nothing under the race detector; make test runs
// this test a second time without it.
func TestAllocBudget(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	c := redistest.Client(t)
	ctx := context.Background()
	for _, tc := range []struct {
		name  string
		rules []Rule
	}{
		{"one rule", []Rule{{Name: "r", Algorithm: GCRA, Limit: PerHour(1 << 30)}}},
		{"three rules", []Rule{
			{Name: "a", Algorithm: TokenBucket, Limit: PerSecond(1 << 20)},
			{Name: "b", Algorithm: FixedWindow, Limit: PerHour(1 << 30)},
			{Name: "c", Algorithm: SlidingWindowCounter, Limit: PerDay(1 << 20)},
		}},
	} {
		lim, err := NewPolicy(c, tc.rules, WithPrefix("alloc"), WithTimeout(time.Minute))
		if err != nil {
			t.Fatal(err)
		}
		args := baselineArgs(lim, "k")
		lim.Allow(ctx, "k")
		base := testing.AllocsPerRun(200, func() { goRedisBaseline(ctx, c, args) })
		got := testing.AllocsPerRun(200, func() { lim.Allow(ctx, "k") })
		const budget = 2
		if got-base > budget+0.5 {
			t.Errorf("%s: %.1f allocations per decision, %.1f beyond go-redis's %.1f; budget %d", tc.name, got, got-base, base, budget)
		}
		t.Logf("%s: %.1f allocations per decision, %.1f beyond go-redis's own", tc.name, got, got-base)
	}
}

// TestAllocObserverUnset: without an observer nothing is measured or
// built, so a decision allocates no more than with one.
func TestAllocObserverUnset(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	c := redistest.Client(t)
	ctx := context.Background()
	rules := []Rule{{Name: "r", Algorithm: GCRA, Limit: PerHour(1 << 30)}}
	without, _ := NewPolicy(c, rules, WithPrefix("obs-alloc"), WithTimeout(time.Minute))
	with, _ := NewPolicy(c, rules, WithPrefix("obs-alloc"), WithTimeout(time.Minute), WithObserver(func(Event) {}))
	without.Allow(ctx, "k")
	a := testing.AllocsPerRun(200, func() { without.Allow(ctx, "k") })
	b := testing.AllocsPerRun(200, func() { with.Allow(ctx, "k") })
	if a > b+0.5 {
		t.Errorf("without an observer %.1f allocations per decision, with one %.1f", a, b)
	}
}
