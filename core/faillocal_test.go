package core

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A Redis that answers PING but refuses the writes of decisions must not
// make FailLocal hand out a fresh budget each time the breaker closes and
// opens again: one key admits about Burst plus what refills meanwhile.
func TestFailLocalBudgetSurvivesRefusedWrites(t *testing.T) {
	refusals := []struct {
		name  string
		setup func(ctx context.Context, c *redis.Client) error
	}{
		{"NOREPLICAS", func(ctx context.Context, c *redis.Client) error {
			return c.ConfigSet(ctx, "min-replicas-to-write", "1").Err()
		}},
		{"READONLY", func(ctx context.Context, c *redis.Client) error {
			// A replica of a server that is not there: PONG, and READONLY
			// to every write.
			return c.ReplicaOf(ctx, "127.0.0.1", redistest.RefusedAddr(t)[len("127.0.0.1:"):]).Err()
		}},
		{"OOM", func(ctx context.Context, c *redis.Client) error {
			if err := c.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
				return err
			}
			return c.ConfigSet(ctx, "maxmemory", "1").Err()
		}},
	}
	for _, rf := range refusals {
		t.Run(rf.name, func(t *testing.T) { refusedWrites(t, rf.setup, false) })
	}
	// A probe that cannot see the refusal (on a Cluster, it writes to one
	// node only) closes the breaker again and again: the twin must still
	// not restore the budget.
	t.Run("blind probe", func(t *testing.T) { refusedWrites(t, refusals[0].setup, true) })
}

// refusedWrites drives one key for two seconds with FailLocal on a Redis
// made by setup to answer PING and refuse writes, and checks what was
// admitted; blind replaces the probe by a PING.
func refusedWrites(t *testing.T, setup func(context.Context, *redis.Client) error, blind bool) {
	srv := redistest.StartT(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	if err := setup(ctx, c); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING must still answer: %v", err)
	}
	var changes atomic.Int32
	lim := newOn(t, c, GCRA, PerMinute(10), WithFailureMode(FailLocal), WithHealthCheck(3, 50*time.Millisecond),
		WithHealthHook(func(Health, error) { changes.Add(1) }))
	defer lim.Close()
	if blind {
		lim.health.probe = func(ctx context.Context) error { return c.Ping(ctx).Err() }
	}
	limit := lim.Rules()[0].Limit
	start := time.Now()
	admitted, calls := 0, 0
	for time.Since(start) < 2*time.Second {
		r, err := lim.Allow(ctx, "client")
		if err == nil {
			t.Fatalf("call %d answered by Redis: %+v", calls, r)
		}
		if r.Allowed {
			admitted++
		}
		calls++
		time.Sleep(2 * time.Millisecond)
	}
	elapsed := time.Since(start)
	t.Logf("%d of %d calls admitted in %s, %d health changes", admitted, calls, elapsed.Round(time.Millisecond), changes.Load())
	bound := limit.Burst + int(int64(limit.Rate)*int64(elapsed)/int64(limit.Period)) + 1
	if admitted > bound {
		t.Errorf("%d of %d calls admitted in %s; want at most %d", admitted, calls, elapsed.Round(time.Millisecond), bound)
	}
	// The probe asks what decisions need: a Redis that refuses
	// them is not taken back.
	if n := changes.Load(); !blind && (n != 1 || lim.Health() != Unhealthy) {
		t.Errorf("%d health changes, now %v; want one, to unhealthy", n, lim.Health())
	}
	if admitted < limit.Rate {
		t.Errorf("%d of %d calls admitted; the twin should admit the burst of %d", admitted, calls, limit.Rate)
	}
	if blind && changes.Load() < 3 {
		t.Errorf("%d health changes; the blind probe should have closed the breaker", changes.Load())
	}
}

// The twin's memory is bounded: an outage seen by many distinct keys keeps
// at most its cap of keys.
func TestFailLocalTwinIsBounded(t *testing.T) {
	lim := newOn(t, redistest.RefusedClient(t), GCRA, PerHour(10), WithFailureMode(FailLocal))
	defer lim.Close()
	ctx := context.Background()
	const keys = 100_000
	for i := 0; i < keys; i++ {
		if r, err := lim.Allow(ctx, fmt.Sprint("k", i)); err == nil || !r.Allowed {
			t.Fatalf("key %d: %+v %v; want the twin's admission with the error", i, r, err)
		}
		if n := lim.local.size(); n > DefaultLocalKeys {
			t.Fatalf("after %d keys the twin holds %d; want at most %d", i+1, n, DefaultLocalKeys)
		}
	}
	// The most recent keys are still limited.
	for i := keys - 10; i < keys; i++ {
		if r, _ := lim.Peek(ctx, fmt.Sprint("k", i)); r.Remaining != 9 {
			t.Errorf("key %d forgotten: %+v", i, r)
		}
	}
}

// Once Redis decides again, the twin lets go of the keys that have expired,
// and of its map once none is left, but keeps the live ones.
func TestFailLocalTwinTidiedWhenHealthy(t *testing.T) {
	lim := newOn(t, redistest.Client(t), GCRA, PerMinute(10), WithFailureMode(FailLocal))
	defer lim.Close()
	ctx := context.Background()
	now := time.Now()
	for i := 0; i < 100; i++ {
		lim.local.AllowN(now.Add(-time.Hour), fmt.Sprint("old-", i), 1)
	}
	lim.local.AllowN(now, "live", 1)
	lim.local.tidyAt.Store(1) // due
	if _, err := lim.Allow(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if n := lim.local.size(); n != 1 {
		t.Fatalf("%d keys after a tidy; want the live one", n)
	}
	if r := lim.local.Peek(now, "live"); r.Remaining != 9 {
		t.Errorf("live key forgotten: %+v", r)
	}
	lim.local.Reset("live")
	lim.local.tidyAt.Store(1)
	if _, err := lim.Allow(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if at := lim.local.tidyAt.Load(); at != 0 || lim.local.size() != 0 {
		t.Errorf("empty twin: next tidy at %d, %d keys; want none", at, lim.local.size())
	}
}

// A caller whose own deadline ends before Redis answers is not admitted,
// whatever the failure mode, and takes nothing from the twin: while Redis
// hangs (here), and while Redis is healthy and denying (see
// TestShortDeadlinesDoNotPassAnExhaustedKey). It used to get the twin's
// view, unconsumed, admitted while room was left: 40 of 40 past PerDay(5)
// (and a caller's own deadline never opens the breaker). Answered by the
// twin, counting, they got past a healthy Redis that denied them.
func TestCallersPastTheirDeadlineAreNotAdmitted(t *testing.T) {
	srv := redistest.StartT(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	ctx := context.Background()
	for _, mode := range []FailureMode{FailOpen, FailLocal} {
		lim := newOn(t, c, GCRA, PerDay(5), WithFailureMode(mode), WithTimeout(time.Second))
		if _, err := lim.Allow(ctx, "warm"); err != nil {
			t.Fatal(err)
		}
		if err := c.Do(ctx, "CLIENT", "PAUSE", "500", "ALL").Err(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 10; i++ {
			short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			res, err := lim.Allow(short, "k")
			cancel()
			if err != context.DeadlineExceeded || res.Allowed {
				t.Errorf("%v, call %d: %+v, %v; want not admitted, the context's error", mode, i, res, err)
			}
		}
		if mode == FailLocal {
			if r := lim.local.Peek(time.Now(), "k"); r.Remaining != 5 {
				t.Errorf("the twin after them: %+v; want untouched, 5 left", r)
			}
		}
		c.Do(ctx, "CLIENT", "UNPAUSE")
	}
}

// Callers that set deadlines shorter than Redis takes to answer do not get
// past a key Redis denies, whatever the failure mode: fail open admitted
// every one, and FailLocal's twin a budget of its own.
func TestShortDeadlinesDoNotPassAnExhaustedKey(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	for _, mode := range []FailureMode{FailOpen, FailLocal} {
		lim := newOn(t, c, FixedWindow, PerHour(10), WithFailureMode(mode),
			WithPrefix(fmt.Sprintf("short-%d", time.Now().UnixNano())))
		if _, err := lim.AllowN(ctx, "k", 10); err != nil {
			t.Fatal(err)
		}
		admitted := 0
		for i := 0; i < 200; i++ {
			short, cancel := context.WithTimeout(ctx, time.Duration(50+i*5)*time.Microsecond)
			if res, _ := lim.Allow(short, "k"); res.Allowed {
				admitted++
			}
			cancel()
		}
		if admitted != 0 || lim.Health() != Healthy {
			t.Errorf("%v: %d of 200 short-deadline callers admitted past an exhausted key (Redis %v); want none", mode, admitted, lim.Health())
		}
	}
}

// With FailLocal, a caller whose context has ended before it asks is not
// admitted, and nothing is taken from the twin, whether Redis is healthy
// or taken for unhealthy (the twin deciding then): canceled calls must not
// spend the budget the twin keeps for an outage. Nothing decided, so an
// observer sees an error, not the twin's decision, and in shadow mode it
// is no would-be denial. (Counted, five canceled Allows emptied a
// PerDay(5) key for the next outage; while unhealthy they were admitted.)
func TestFailLocalCallerGoneBeforeItAsks(t *testing.T) {
	srv := redistest.StartT(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer c.Close()
	ctx := context.Background()
	canceled, cancel := context.WithCancel(ctx)
	cancel()
	for _, shadow := range []bool{false, true} {
		var events []Event
		opts := []Option{WithFailureMode(FailLocal), WithHealthCheck(1, time.Minute),
			WithObserver(func(e Event) { events = append(events, e) })}
		if shadow {
			opts = append(opts, WithShadow())
		}
		lim := newOn(t, c, GCRA, PerDay(5), opts...)
		check := func(when string) {
			t.Helper()
			events = events[:0]
			for i := 0; i < 5; i++ {
				r, err := lim.Allow(canceled, "k")
				if !errors.Is(err, context.Canceled) || r.Allowed != shadow || r.ShadowDenied || r.Rules != nil {
					t.Errorf("shadow %v, %s: %+v, %v; want context.Canceled, nothing decided", shadow, when, r, err)
				}
			}
			if r := lim.local.Peek(time.Now(), "k"); r.Remaining != 5 {
				t.Errorf("shadow %v, %s: the twin %+v; want untouched, 5 left", shadow, when, r)
			}
			if len(events) != 5 {
				t.Errorf("shadow %v, %s: %d events of 5 decisions", shadow, when, len(events))
			}
			for _, e := range events {
				if e.Outcome != OutcomeError || e.Shadow {
					t.Errorf("shadow %v, %s: event %+v; want OutcomeError, no shadow denial", shadow, when, e)
				}
			}
		}
		check("healthy")
		if shadow {
			continue
		}
		srv.Stop()
		lim.Allow(ctx, "other") // the breaker opens
		if lim.Health() != Unhealthy {
			t.Fatal("one failure with a threshold of 1: still healthy")
		}
		check("unhealthy")
	}
}

// A Wait cut short by its own deadline while Redis hangs returns the
// context's error, as a Wait that Redis answers late does, and takes
// nothing from the twin (see TestCallersPastTheirDeadlineAreNotAdmitted);
// in shadow mode too. (A message claiming the twin's admission was given
// for the twin's shadow denials once.)
func TestFailLocalWaitCutShortReturnsTheContextsError(t *testing.T) {
	srv := redistest.StartT(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	ctx := context.Background()
	for _, shadow := range []bool{false, true} { // (in shadow mode, a denial is no admission either)
		opts := []Option{WithFailureMode(FailLocal), WithTimeout(time.Second)}
		if shadow {
			opts = append(opts, WithShadow())
		}
		lim := newOn(t, c, GCRA, PerDay(5), opts...)
		if _, err := lim.Allow(ctx, "warm"); err != nil {
			t.Fatal(err)
		}
		if err := c.Do(ctx, "CLIENT", "PAUSE", "500", "ALL").Err(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 8; i++ {
			short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
			err := lim.Wait(short, "k")
			cancel()
			if err != context.DeadlineExceeded {
				t.Fatalf("shadow %v, Wait %d: %v; want the context's own error", shadow, i, err)
			}
		}
		if left := lim.local.Peek(time.Now(), "k").Remaining; left != 5 {
			t.Errorf("shadow %v: the twin has %d of 5 left; want 5, untouched", shadow, left)
		}
		c.Do(ctx, "CLIENT", "UNPAUSE")
	}
}

// A Wait whose context ends just after the twin admitted and counted its
// call (Redis refusing, or taken for unhealthy) returns nil, as one whose
// context ends just after Redis admitted it does: it used to return
// Redis's error, telling the caller it was not admitted while the twin had
// counted it. (The observer runs on the caller's goroutine after the
// decision: it cancels there.)
func TestFailLocalWaitCanceledJustAfterTheTwinAdmits(t *testing.T) {
	for _, down := range []string{"refused", "unhealthy"} {
		c := redis.NewClient(&redis.Options{Addr: redistest.RefusedAddr(t), MaxRetries: -1})
		defer c.Close()
		var cancel context.CancelFunc
		opts := []Option{WithFailureMode(FailLocal), WithObserver(func(Event) {
			if cancel != nil {
				cancel()
			}
		})}
		if down == "refused" {
			opts = append(opts, WithHealthCheck(0, 0))
		}
		lim := newOn(t, c, GCRA, PerSecond(5), opts...)
		if down == "unhealthy" {
			for i := 0; i < 5; i++ {
				lim.Allow(context.Background(), "warm")
			}
			if lim.Health() != Unhealthy {
				t.Fatal("5 refused decisions: still healthy")
			}
		}
		ctx, cf := context.WithCancel(context.Background())
		cancel = cf
		if err := lim.Wait(ctx, "k"); err != nil {
			t.Errorf("%s: Wait: %v; want nil, the twin's admission", down, err)
		}
		if left := lim.local.Peek(time.Now(), "k").Remaining; left != 4 {
			t.Errorf("%s: the twin has %d of 5 left; want 4", down, left)
		}
	}
}

// The same when the limiter's own timeout failed the call (Redis never
// answering) and ctx reaches its deadline just after the twin admitted:
// the timeout's error wraps context.DeadlineExceeded, but is not ctx's
// own, and Wait returns nil for the twin's admission.
func TestFailLocalWaitPastItsDeadlineJustAfterTheTwinAdmits(t *testing.T) {
	stuck := redis.NewClient(&redis.Options{Addr: redistest.StuckServer(t), MaxRetries: -1})
	defer stuck.Close()
	var done <-chan struct{}
	lim := newOn(t, stuck, GCRA, PerDay(5), WithFailureMode(FailLocal), WithTimeout(30*time.Millisecond),
		WithHealthCheck(0, 0), WithObserver(func(Event) {
			if done != nil {
				<-done // the decision is made: ctx reaches its deadline now
			}
		}))
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	done = ctx.Done()
	if err := lim.Wait(ctx, "k"); err != nil {
		t.Errorf("Wait: %v; want nil, the twin's admission", err)
	}
	if left := lim.local.Peek(time.Now(), "k").Remaining; left != 4 {
		t.Errorf("the twin has %d of 5 left; want 4", left)
	}
}

// sliceErr is an error of a type that cannot be compared.
type sliceErr []string

func (e sliceErr) Error() string { return "canceled: " + e[0] }

// sliceErrCtx is a context that ends with a sliceErr after its first
// Err: while its call is out.
type sliceErrCtx struct {
	context.Context
	asked atomic.Int32
}

func (c *sliceErrCtx) Err() error {
	if c.asked.Add(1) == 1 {
		return nil
	}
	return sliceErr{"by its caller"}
}

// A context whose error cannot be compared with == makes WaitN return it,
// not panic: WaitN compares no errors (it once did, with ==).
func TestWaitWithAnUncomparableContextError(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: redistest.RefusedAddr(t), MaxRetries: -1})
	defer c.Close()
	lim := newOn(t, c, GCRA, PerSecond(5), WithFailureMode(FailLocal), WithHealthCheck(0, 0))
	ctx := &sliceErrCtx{Context: context.Background()}
	if err := lim.Wait(ctx, "k"); err == nil || err.Error() != "canceled: by its caller" {
		t.Errorf("Wait: %v; want the context's own error", err)
	}
}

// A SlidingWindowLog key of the twin lets go of a burst's log once the
// burst has left its window: a million requests in a second, then one
// every 40 minutes in a one-hour window, left the burst's array (16 MB)
// held by a log of two entries, appended into its spare room.
func TestTwinLogLetsGoOfABurst(t *testing.T) {
	loc, err := NewLocal([]Rule{{Name: "log", Algorithm: SlidingWindowLog, Limit: PerHour(2_000_000)}})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_700_000_000, 0)
	for i := range 1_000_000 {
		if r, _ := loc.AllowN(t0.Add(time.Duration(i)*time.Microsecond), "k", 1); !r.Allowed {
			t.Fatalf("burst request %d denied", i)
		}
	}
	now := t0
	for i := range 100 {
		now = now.Add(40 * time.Minute)
		if r, _ := loc.AllowN(now, "k", 1); !r.Allowed {
			t.Fatalf("quiet request %d denied", i)
		}
	}
	loc.mu.Lock()
	log := loc.keys["k"][0].log
	loc.mu.Unlock()
	if len(log) > 2 || cap(log) > 64 {
		t.Errorf("a window of %d requests holds a log of capacity %d", len(log), cap(log))
	}
}

// Denials of a key whose log holds a burst gone by copy nothing: the log
// is made small when a decision stores it, not each time a rule reads it
// (a policy's denial stores nothing, and a flood of them copied the live
// log at every request).
func TestTwinLogDenialsCopyNothing(t *testing.T) {
	loc, err := NewLocal([]Rule{
		{Name: "log", Algorithm: SlidingWindowLog, Limit: PerHour(2_000_000)},
		{Name: "window", Algorithm: FixedWindow, Limit: Limit{Rate: 1_000_000, Period: 2 * time.Hour}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1_700_006_400, 0) // a window of two hours starts
	for i := range 1_000_000 {
		if r, _ := loc.AllowN(t0.Add(time.Duration(i)*time.Millisecond*3), "k", 1); !r.Allowed {
			t.Fatalf("burst request %d denied", i)
		}
	}
	now := t0.Add(time.Hour + 2990*time.Second) // most of the log has left its window; the window's count is spent
	if r, _ := loc.AllowN(now, "k", 1); r.Allowed {
		t.Fatal("admitted past the window's count")
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 100 {
		loc.AllowN(now, "k", 1)
	}
	runtime.ReadMemStats(&after)
	if per := (after.TotalAlloc - before.TotalAlloc) / 100; per > 16<<10 {
		t.Errorf("%d bytes allocated per denied decision", per)
	}
}
