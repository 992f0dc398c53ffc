package core

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

func TestShadowAndObserver(t *testing.T) {
	_, client := newClock(t)
	var events []Event
	lim := newOn(t, client, FixedWindow, PerHour(2), WithShadow(), WithObserver(func(e Event) { events = append(events, e) }))
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		r, err := lim.Allow(ctx, "secret-key")
		if err != nil || !r.Allowed || r.ShadowDenied != (i == 2) || r.RetryAfter != 0 {
			t.Errorf("call %d: %+v %v", i, r, err)
		}
	}
	if len(events) != 3 {
		t.Fatalf("%d events", len(events))
	}
	want := []Outcome{OutcomeAllowed, OutcomeAllowed, OutcomeDenied}
	for i, e := range events {
		if e.Outcome != want[i] || e.Shadow != (i == 2) || !e.Allowed || e.Rule != "fixed_window" || e.N != 1 || e.KeyHash != processHashKey.sum("secret-key") || e.Latency <= 0 {
			t.Errorf("event %d: %+v", i, e)
		}
	}
	// The shadow limit counted for real: the state says 0 left.
	if r, _ := lim.Peek(ctx, "secret-key"); r.Remaining != 0 {
		t.Errorf("shadow mode did not count: %+v", r)
	}
	// In shadow mode Wait never waits.
	if err := lim.Wait(ctx, "secret-key"); err != nil {
		t.Error(err)
	}

	var errs []Event
	dead := newOn(t, redistest.RefusedClient(t), GCRA, PerSecond(1), WithFailureMode(FailLocal), WithObserver(func(e Event) { errs = append(errs, e) }))
	dead.Allow(ctx, "k")
	if len(errs) != 1 || errs[0].Outcome != OutcomeFallback || errs[0].Err == nil {
		t.Errorf("fallback event: %+v", errs)
	}
}

// Shadow mode never denies nor makes wait: a LeakyBucket's Delay is 0, so
// WaitN returns at once; and with Redis unreachable the request is
// admitted whatever the failure mode, with the error.
func TestShadowNeverDeniesNorWaits(t *testing.T) {
	ctx := context.Background()
	leaky := newOn(t, redistest.Client(t), LeakyBucket, Limit{Rate: 1, Period: time.Minute, Burst: 5}, WithShadow(),
		WithPrefix(fmt.Sprintf("shadow-wait-%d", time.Now().UnixNano())))
	if err := leaky.Wait(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	soon, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := leaky.Wait(soon, "k"); err != nil {
		t.Errorf("second Wait, its turn a minute away: %v; want nil at once in shadow mode", err)
	}
	if r, err := leaky.Allow(ctx, "k"); err != nil || !r.Allowed || r.Delay != 0 {
		t.Errorf("Allow in shadow mode: %+v %v; want admitted with no Delay", r, err)
	}
	for _, mode := range []FailureMode{FailClosed, FailLocal} {
		lim := newOn(t, redistest.RefusedClient(t), TokenBucket, PerMinute(1), WithShadow(), WithFailureMode(mode), WithHealthCheck(0, 0))
		for i := 0; i < 3; i++ {
			if r, err := lim.Allow(ctx, "k"); err == nil || !r.Allowed {
				t.Errorf("%s, Redis unreachable, call %d: %+v %v; want admitted, with the error", mode, i, r, err)
			}
		}
	}
}

// In shadow mode with FailLocal, Redis unreachable: a request the twin
// would deny is served, and its event says so (Shadow set), as for one
// Redis would deny; the twin's admissions are not Shadow.
func TestShadowTwinDenialIsObserved(t *testing.T) {
	var events []Event
	lim := newOn(t, redistest.RefusedClient(t), GCRA, PerMinute(1), WithShadow(), WithFailureMode(FailLocal),
		WithHealthCheck(0, 0), WithObserver(func(e Event) { events = append(events, e) }))
	ctx := context.Background()
	for i := range 2 {
		r, err := lim.Allow(ctx, "k")
		if err == nil || !r.Allowed || r.ShadowDenied != (i == 1) {
			t.Errorf("call %d: %+v, %v; want served with the error, ShadowDenied %v", i, r, err, i == 1)
		}
	}
	if len(events) != 2 {
		t.Fatalf("%d events; want 2", len(events))
	}
	for i, e := range events {
		if e.Outcome != OutcomeFallback || !e.Allowed || e.Shadow != (i == 1) || e.Err == nil {
			t.Errorf("event %d: %+v; want fallback, allowed, Shadow %v, with the error", i, e, i == 1)
		}
	}
}

// Peek reports what Allow would decide: in shadow mode, an admission
// (ShadowDenied when the rules would deny) with no Delay. It reported the
// enforced denial, and a LeakyBucket's wait.
func TestShadowPeekAnswersAsAllow(t *testing.T) {
	ctx := context.Background()
	c := redistest.Client(t)
	lim := newOn(t, c, FixedWindow, PerHour(1), WithShadow(), WithPrefix(fmt.Sprintf("shadow-peek-%d", time.Now().UnixNano())))
	if p, err := lim.Peek(ctx, "k"); err != nil || !p.Allowed || p.ShadowDenied {
		t.Errorf("Peek of a fresh key: %+v %v", p, err)
	}
	lim.Allow(ctx, "k")
	p, err := lim.Peek(ctx, "k")
	a, _ := lim.Allow(ctx, "k")
	if err != nil || !p.Allowed || !p.ShadowDenied || p.RetryAfter != 0 || p.Remaining != 0 {
		t.Errorf("Peek of a spent key in shadow mode: %+v %v; want admitted, ShadowDenied, Remaining 0", p, err)
	}
	if p.Allowed != a.Allowed || p.ShadowDenied != a.ShadowDenied {
		t.Errorf("Peek said %+v, the Allow after it %+v", p, a)
	}
	leaky := newOn(t, c, LeakyBucket, Limit{Rate: 1, Period: time.Minute, Burst: 5}, WithShadow(),
		WithPrefix(fmt.Sprintf("shadow-peek-leaky-%d", time.Now().UnixNano())))
	leaky.Allow(ctx, "k")
	if p, err := leaky.Peek(ctx, "k"); err != nil || !p.Allowed || p.Delay != 0 {
		t.Errorf("Peek of a LeakyBucket in shadow mode: %+v %v; want admitted with no Delay", p, err)
	}
}

// A shadow limiter never denies, a cost no rule can ever admit included:
// admitted, marked, with the error, which the observer sees too.
func TestShadowAdmitsACostOverTheLimit(t *testing.T) {
	var events []Event
	lim := newOn(t, redistest.RefusedClient(t), GCRA, PerSecond(2), WithShadow(), WithObserver(func(e Event) { events = append(events, e) }))
	res, err := lim.AllowN(context.Background(), "k", 3)
	if !errors.Is(err, ErrCostExceedsLimit) || !res.Allowed || !res.ShadowDenied {
		t.Errorf("AllowN(3) of 2 a second, shadow: %+v %v; want admitted, ShadowDenied, ErrCostExceedsLimit", res, err)
	}
	if len(events) != 1 || events[0].Outcome != OutcomeError || !events[0].Allowed || !events[0].Shadow {
		t.Errorf("events %+v; want one error event, Allowed and Shadow", events)
	}
}

// The rule a shadow limiter names for a cost it can never admit is the
// one that cannot, as the error names it: not the policy's first.
func TestShadowCostNamesTheRuleItExceeds(t *testing.T) {
	lim, err := NewPolicy(redistest.RefusedClient(t), []Rule{
		{Name: "hour", Algorithm: GCRA, Limit: PerHour(1000)},
		{Name: "second", Algorithm: GCRA, Limit: PerSecond(2)},
	}, WithShadow())
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	res, err := lim.AllowN(context.Background(), "k", 5)
	if !errors.Is(err, ErrCostExceedsLimit) || !res.Allowed || !res.ShadowDenied || res.Rule != "second" || res.Limit.Rate != 2 {
		t.Errorf("AllowN(5), shadow: %+v %v; want admitted, ShadowDenied, naming rule second", res, err)
	}
}
