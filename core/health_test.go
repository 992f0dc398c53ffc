package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// deadRedis returns a client of a loopback port nobody listens on.
func deadRedis(t *testing.T) *redis.Client {
	port, err := redistest.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), MaxRetries: -1})
	t.Cleanup(func() { c.Close() })
	return c
}

func TestFailureModes(t *testing.T) {
	ctx := context.Background()
	c := deadRedis(t)
	cases := []struct {
		mode    FailureMode
		allowed []bool // three calls on one key, limit 2
	}{
		{FailOpen, []bool{true, true, true}},
		{FailClosed, []bool{false, false, false}},
		{FailLocal, []bool{true, true, false}},
	}
	for _, tc := range cases {
		t.Run(tc.mode.String(), func(t *testing.T) {
			lim := newOn(t, c, TokenBucket, PerMinute(2), WithFailureMode(tc.mode), WithHealthCheck(0, 0))
			for i, want := range tc.allowed {
				r, err := lim.Allow(ctx, "k")
				if err == nil || r.Allowed != want {
					t.Errorf("call %d: allowed=%v err=%v; want allowed=%v and the error", i, r.Allowed, err, want)
				}
			}
			if tc.mode == FailLocal {
				if r, err := lim.Peek(ctx, "k"); err == nil || r.Remaining != 0 || len(r.Rules) != 1 {
					t.Errorf("peek on the twin: %+v %v", r, err)
				}
			}
		})
	}
	if _, err := New(c, GCRA, PerSecond(1), WithFailureMode(FailureMode(7))); !errors.Is(err, ErrInvalidLimit) {
		t.Errorf("unknown failure mode: %v", err)
	}
}

func TestTimeoutBoundsADecision(t *testing.T) {
	// A server that accepts connections and never answers: the decision
	// must come back with a timeout error, decided by the failure mode.
	stuck := redistest.StuckServer(t)
	c := redis.NewClient(&redis.Options{Addr: stuck, MaxRetries: -1, ReadTimeout: time.Minute})
	defer c.Close()
	lim := newOn(t, c, GCRA, PerSecond(1), WithTimeout(50*time.Millisecond), WithFailureMode(FailClosed))
	r, err := lim.Allow(context.Background(), "k")
	if !errors.Is(err, context.DeadlineExceeded) || r.Allowed {
		t.Errorf("got %+v, %v; want a denial with DeadlineExceeded", r, err)
	}
}

func TestHealthBreakerOpensAndRecovers(t *testing.T) {
	srv, err := redistest.Start(nil)
	if err != nil {
		if redistest.Required() {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	defer srv.Stop()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer c.Close()
	var mu sync.Mutex
	var changes []Health
	changed := make(chan Health, 10)
	lim := newOn(t, c, TokenBucket, PerMinute(5), WithHealthCheck(2, 100*time.Millisecond),
		WithHealthHook(func(h Health, err error) {
			mu.Lock()
			changes = append(changes, h)
			mu.Unlock()
			changed <- h
		}))
	ctx := context.Background()
	if r, err := lim.Allow(ctx, "k"); err != nil || r.Remaining != 4 {
		t.Fatalf("%+v %v", r, err)
	}
	srv.Stop()
	for i := 0; i < 2; i++ {
		if r, err := lim.Allow(ctx, "k"); err == nil || !r.Allowed {
			t.Fatalf("Redis down, call %d: %+v %v; want fail open with the error", i, r, err)
		}
	}
	if h := <-changed; h != Unhealthy || lim.Health() != Unhealthy {
		t.Fatalf("after 2 failures: %v", h)
	}
	// While unhealthy, decisions do not go to Redis.
	if _, err := lim.Allow(ctx, "k"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("while unhealthy: %v, want ErrUnavailable", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	select {
	case h := <-changed:
		if h != Healthy {
			t.Fatalf("after restart: %v", h)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the probe never found Redis again")
	}
	// Limiting resumes on the restarted, empty Redis, scripts reloaded.
	for i := 4; i >= 0; i-- {
		if r, err := lim.Allow(ctx, "k"); err != nil || r.Remaining != i {
			t.Fatalf("after recovery: %+v %v; want Remaining %d", r, err, i)
		}
	}
	if r, _ := lim.Allow(ctx, "k"); r.Allowed {
		t.Error("over-admitted after recovery")
	}
	mu.Lock()
	defer mu.Unlock()
	if fmt.Sprint(changes) != "[unhealthy healthy]" {
		t.Errorf("health changes %v", changes)
	}
}

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
		if e.Outcome != want[i] || e.Shadow != (i == 2) || !e.Allowed || e.Rule != "fixed_window" || e.N != 1 || e.KeyHash != keyHash("secret-key") || e.Latency <= 0 {
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
	dead := newOn(t, deadRedis(t), GCRA, PerSecond(1), WithFailureMode(FailLocal), WithObserver(func(e Event) { errs = append(errs, e) }))
	dead.Allow(ctx, "k")
	if len(errs) != 1 || errs[0].Outcome != OutcomeFallback || errs[0].Err == nil {
		t.Errorf("fallback event: %+v", errs)
	}
}

func TestWaitWithFailLocal(t *testing.T) {
	lim := newOn(t, deadRedis(t), TokenBucket, Limit{Rate: 1, Period: 20 * time.Millisecond}, WithFailureMode(FailLocal))
	for i := 0; i < 3; i++ {
		if err := lim.Wait(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
	}
	open := newOn(t, deadRedis(t), TokenBucket, PerSecond(1))
	if err := open.Wait(context.Background(), "k"); err == nil {
		t.Error("Wait on a dead Redis without FailLocal returned nil")
	}
}
