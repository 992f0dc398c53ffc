package core

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestFailureModes(t *testing.T) {
	ctx := context.Background()
	c := redistest.RefusedClient(t)
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
	if _, err := New(c, GCRA, PerSecond(1), WithFailureMode(FailureMode(7))); !errors.Is(err, ErrInvalidConfig) {
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
	srv := redistest.StartT(t)
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
	restartUntilHealthy(t, srv, changed)
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
	dead := newOn(t, redistest.RefusedClient(t), GCRA, PerSecond(1), WithFailureMode(FailLocal), WithObserver(func(e Event) { errs = append(errs, e) }))
	dead.Allow(ctx, "k")
	if len(errs) != 1 || errs[0].Outcome != OutcomeFallback || errs[0].Err == nil {
		t.Errorf("fallback event: %+v", errs)
	}
}

func TestWaitWithFailLocal(t *testing.T) {
	lim := newOn(t, redistest.RefusedClient(t), TokenBucket, Limit{Rate: 1, Period: 20 * time.Millisecond}, WithFailureMode(FailLocal))
	for i := 0; i < 3; i++ {
		if err := lim.Wait(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
	}
	open := newOn(t, redistest.RefusedClient(t), TokenBucket, PerSecond(1))
	if err := open.Wait(context.Background(), "k"); err == nil {
		t.Error("Wait on a dead Redis without FailLocal returned nil")
	}
}

// The health hook sees the changes one at a time, in order: a caller that
// reopens the breaker while the hook is told Healthy reports Unhealthy
// after it, not before (a gauge fed by the hook would otherwise end on
// healthy while the breaker is open).
func TestHealthHookInOrder(t *testing.T) {
	var mu sync.Mutex
	var seen []Health
	entered := make(chan struct{}, 10)
	release := make(chan struct{})
	h := &health{threshold: 1, probe: func(context.Context) error { return nil }}
	h.hook = func(s Health, _ error) {
		if s == Healthy {
			entered <- struct{}{}
			<-release // the hook of Healthy, held back at its start
		}
		mu.Lock()
		seen = append(seen, s)
		mu.Unlock()
	}
	h.failure(errors.New("down")) // opens; the probe answers and closes
	<-entered
	reopened := make(chan struct{})
	go func() { h.failure(errors.New("down again")); close(reopened) }()
	for !h.unhealthy() { // reopened; its hook comes next
		runtime.Gosched()
	}
	time.Sleep(20 * time.Millisecond) // time for that hook to run, if nothing holds it
	close(release)
	<-reopened
	var got string
	for deadline := time.Now().Add(5 * time.Second); got == "" && time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		mu.Lock()
		if len(seen) >= 3 {
			got = fmt.Sprint(seen[:3])
		}
		mu.Unlock()
	}
	if got != "[unhealthy healthy unhealthy]" {
		t.Errorf("the hook saw %s; want [unhealthy healthy unhealthy]", got)
	}
}

// With FailLocal, the in-process twin decides while Redis is down and keeps
// what it admitted once Redis is back, until it expires: Redis failing
// again must not hand the budget out afresh (see faillocal_test.go). A
// caller that gave up takes nothing from it.
func TestFailLocalTwinAcrossAnOutage(t *testing.T) {
	srv := redistest.StartT(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer c.Close()
	changed := make(chan Health, 10)
	lim := newOn(t, c, TokenBucket, PerMinute(5), WithFailureMode(FailLocal), WithHealthCheck(2, 100*time.Millisecond),
		WithHealthHook(func(h Health, _ error) { changed <- h }))
	twinKeys := func() int {
		lim.local.mu.Lock()
		defer lim.local.mu.Unlock()
		return len(lim.local.keys)
	}
	ctx := context.Background()
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := lim.Allow(canceled, "gone"); err == nil || twinKeys() != 0 {
		t.Errorf("a canceled caller: %v, %d key(s) in the twin; want its error and nothing taken", err, twinKeys())
	}
	srv.Stop()
	for i := 0; i < 2; i++ {
		lim.Allow(ctx, "k")
	}
	if h := <-changed; h != Unhealthy {
		t.Fatalf("after 2 failures: %v", h)
	}
	for i := 0; i < 100; i++ {
		if r, err := lim.Allow(ctx, fmt.Sprint("client-", i)); err == nil || !r.Allowed {
			t.Fatalf("twin decision %d: %+v, %v", i, r, err)
		}
	}
	if n := twinKeys(); n < 100 {
		t.Fatalf("%d keys in the twin during the outage; want 100 or more", n)
	}
	restartUntilHealthy(t, srv, changed)
	if r, err := lim.Allow(ctx, "client-0"); err != nil || r.Remaining != 4 {
		t.Errorf("Redis back: %+v %v; want its own state, Remaining 4", r, err)
	}
	if n := twinKeys(); n < 100 {
		t.Errorf("%d keys left in the twin once Redis is back; want 100 or more", n)
	}
	if r := lim.local.Peek(time.Now(), "client-0"); r.Remaining != 4 {
		t.Errorf("the twin forgot what it admitted: %+v", r)
	}
}

// A breaker reopened soon after its probes closed it (Redis answers PING
// but not the decisions) starts its pauses where they were, doubled, up to
// the maximum; one reopened later starts again at 50ms.
func TestBreakerBackoffAcrossReopenings(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	h := &health{maxBackoff: 400 * time.Millisecond}
	for _, c := range []struct {
		last, since, want time.Duration
		what              string
	}{
		{0, 0, minBackoff, "never closed"},
		{50 * time.Millisecond, 10 * time.Millisecond, 100 * time.Millisecond, "reopened at once"},
		{100 * time.Millisecond, 900 * time.Millisecond, 200 * time.Millisecond, "reopened within a second"},
		{400 * time.Millisecond, 10 * time.Millisecond, 400 * time.Millisecond, "at the maximum"},
		{400 * time.Millisecond, 1500 * time.Millisecond, 400 * time.Millisecond, "within four pauses"},
		{100 * time.Millisecond, 2 * time.Second, minBackoff, "reopened later"},
	} {
		h.lastBackoff, h.closedAt = c.last, time.Time{}
		if c.last > 0 {
			h.closedAt = now.Add(-c.since)
		}
		if got := h.firstBackoff(now); got != c.want {
			t.Errorf("%s: first pause %v; want %v", c.what, got, c.want)
		}
	}
}

// restartUntilHealthy restarts srv and waits until the health hook feeding
// changed reports Healthy.
func restartUntilHealthy(t *testing.T, srv *redistest.Server, changed <-chan Health) {
	t.Helper()
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

// A LeakyBucket WaitN whose context ends while it waits its turn says that
// it was counted.
func TestWaitCanceledWhileHeldSaysCounted(t *testing.T) {
	// Canceled 50ms after the second Wait's request is admitted (the
	// observer sees it before WaitN waits its turn), however long Redis
	// takes to admit it: while WaitN waits its turn, a minute away.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var admitted atomic.Int32
	lim := newOn(t, redistest.Client(t), LeakyBucket, Limit{Rate: 1, Period: time.Minute, Burst: 5},
		WithPrefix(fmt.Sprintf("wait-held-%d", time.Now().UnixNano())),
		WithObserver(func(e Event) {
			if e.Allowed && admitted.Add(1) == 2 {
				time.AfterFunc(50*time.Millisecond, cancel)
			}
		}))
	if err := lim.Wait(context.Background(), "k"); err != nil {
		t.Fatal(err)
	}
	err := lim.Wait(ctx, "k") // admitted, its turn a minute away
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "counted") {
		t.Errorf("canceled while held: %v; want context.Canceled, saying it was counted", err)
	}
}

// Close ends the probe of a limiter whose Redis is down, which otherwise
// runs (holding the limiter) until Redis answers; the closed limiter still
// decides, asking Redis every time.
func TestCloseEndsTheProbe(t *testing.T) {
	lim := newOn(t, redistest.RefusedClient(t), TokenBucket, PerMinute(2), WithHealthCheck(1, 50*time.Millisecond))
	var probes atomic.Int32
	ping := lim.health.probe
	lim.health.probe = func(ctx context.Context) error { probes.Add(1); return ping(ctx) }
	ctx := context.Background()
	lim.Allow(ctx, "k")
	if lim.Health() != Unhealthy {
		t.Fatal("the breaker did not open")
	}
	for probes.Load() == 0 {
		time.Sleep(10 * time.Millisecond)
	}
	if err := lim.Close(); err != nil {
		t.Fatal(err)
	}
	for lim.Health() != Healthy {
		time.Sleep(10 * time.Millisecond) // the probe ends at its next pause
	}
	after := probes.Load()
	for i := 0; i < 3; i++ {
		if _, err := lim.Allow(ctx, "k"); err == nil || errors.Is(err, ErrUnavailable) {
			t.Errorf("closed limiter, Redis down: %v; want Redis's own error, no breaker", err)
		}
	}
	time.Sleep(200 * time.Millisecond) // four probe pauses, were one still running
	if n := probes.Load(); n != after || lim.Health() != Healthy {
		t.Errorf("after Close: %d more probes, health %v; want none, and no breaker", n-after, lim.Health())
	}
	lim.Close() // again: nothing
}

// Every AllowN is observed, one whose cost no rule can admit too.
func TestObserverSeesACostError(t *testing.T) {
	var events []Event
	lim := newOn(t, redistest.RefusedClient(t), GCRA, PerSecond(2), WithObserver(func(e Event) { events = append(events, e) }))
	if _, err := lim.AllowN(context.Background(), "k", 3); !errors.Is(err, ErrCostExceedsLimit) {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Outcome != OutcomeError || !errors.Is(events[0].Err, ErrCostExceedsLimit) || events[0].N != 3 {
		t.Errorf("events %+v; want one error event with ErrCostExceedsLimit", events)
	}
}
