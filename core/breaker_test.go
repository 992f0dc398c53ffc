package core

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// probing reports whether a breaker's probe (health.recover) runs, in any
// limiter of the process.
func probing() bool {
	buf := make([]byte, 1<<20)
	return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "core.(*health).recover")
}

// Once the breaker opens, recover probes until Redis answers. A client that
// has been closed never answers again ("redis: client is closed"), so the
// probe goroutine, holding the whole Limiter, runs forever: a goroutine
// leak per limiter dropped while unhealthy (shutdown, a limiter per tenant).
func TestBreakerProbeStopsWhenClientIsClosed(t *testing.T) {
	c := redistest.RefusedClient(t)
	lim := newOn(t, c, GCRA, PerSecond(1), WithHealthCheck(1, 50*time.Millisecond))
	lim.Allow(context.Background(), "k")
	if lim.Health() != Unhealthy {
		t.Fatal("the breaker did not open")
	}
	c.Close()
	for deadline := time.Now().Add(5 * time.Second); probing(); {
		if time.Now().After(deadline) {
			t.Error("the health probe still runs 5s after the client was closed (probes every 50ms, forever)")
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The probe ended and left the breaker open. Closed, the limiter has
	// no breaker any more, as Close says: Healthy, and its decisions ask
	// Redis (here, the closed client).
	lim.Close()
	if h := lim.Health(); h != Healthy {
		t.Errorf("closed limiter: Health %v, want Healthy (no breaker)", h)
	}
	if _, err := lim.Allow(context.Background(), "k"); errors.Is(err, ErrUnavailable) {
		t.Errorf("closed limiter: %v; want the client's own error, no breaker", err)
	}
}

// A probe that succeeds while Close runs tells the hook nothing: Close
// ends the reports.
func TestProbeInFlightAtCloseTellsTheHookNothing(t *testing.T) {
	srv := redistest.StartT(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1})
	defer c.Close()
	var closed atomic.Bool
	var after atomic.Int32
	lim := newOn(t, c, GCRA, PerSecond(100), WithHealthCheck(1, 50*time.Millisecond), WithTimeout(time.Second),
		WithHealthHook(func(Health, error) {
			if closed.Load() {
				after.Add(1)
			}
		}))
	inProbe, release := make(chan struct{}, 1), make(chan struct{})
	var held atomic.Bool
	probe := lim.health.probe
	lim.health.probe = func(ctx context.Context) error {
		if held.CompareAndSwap(false, true) {
			inProbe <- struct{}{}
			<-release
		}
		return probe(ctx)
	}
	ctx := context.Background()
	lim.Allow(ctx, "k")
	srv.Stop()
	lim.Allow(ctx, "k") // the breaker opens
	if lim.Health() != Unhealthy {
		t.Fatal("the breaker did not open")
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	<-inProbe // a probe has started; Redis is back
	closed.Store(true)
	lim.Close()
	close(release)
	for deadline := time.Now().Add(5 * time.Second); probing(); {
		if time.Now().After(deadline) {
			t.Fatal("the health probe still runs 5s after Close")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if n := after.Load(); n != 0 || lim.Health() != Healthy {
		t.Errorf("after Close: the hook told %d time(s), Health %v; want never, Healthy", n, lim.Health())
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
	h.changes = &healthChanges{fn: func(s Health, _ error) {
		if s == Healthy {
			entered <- struct{}{}
			<-release // the hook of Healthy, held back at its start
		}
		mu.Lock()
		seen = append(seen, s)
		mu.Unlock()
	}}
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

// A hook may use the limiter (WithHealthHook): a hook told Healthy that
// decides, and whose decision fails (Redis answers the probe but not the
// decisions in time), reopens the breaker it is told about. Its report
// must not wait for the hook that caused it: the hook returns, hears
// Unhealthy after, and the breaker recovers again.
func TestHealthHookMayReopenItsBreaker(t *testing.T) {
	var log hookLog
	var h *health
	h = &health{threshold: 1, probe: func(context.Context) error { return nil }, stop: make(chan struct{})}
	h.changes = &healthChanges{fn: func(s Health, _ error) {
		if log.add(s) == 2 {
			h.failure(errors.New("the hook's own decision timed out"))
		}
	}}
	defer h.close()
	h.failure(errors.New("down"))
	want := "[unhealthy healthy unhealthy healthy]"
	if got := log.waitFor(want, nil); got != want {
		t.Fatalf("the hook saw %s in 5s; want %s (a hook that reopens its breaker waits on itself)", got, want)
	}
	if h.unhealthy() {
		t.Errorf("breaker open after its last Healthy")
	}
}

// A hook that panics (a bug of the user's, recovered up the stack by an
// HTTP server, say, on the goroutine whose decision opened the breaker)
// leaves the breaker as it would be without it: the probe still runs and
// closes it, and the next change still reaches the hook.
func TestHealthHookPanicLeavesTheBreakerWorking(t *testing.T) {
	var log hookLog
	h := &health{threshold: 1, probe: func(context.Context) error { return nil }, stop: make(chan struct{})}
	h.changes = &healthChanges{fn: func(s Health, _ error) {
		if log.add(s) == 1 {
			panic("the hook's bug")
		}
	}}
	defer h.close()
	func() {
		defer func() { _ = recover() }()
		h.failure(errors.New("down"))
	}()
	want := "[unhealthy healthy]"
	if got := log.waitFor(want, func() bool { return !h.unhealthy() }); got != want || h.unhealthy() {
		t.Errorf("the hook saw %s, breaker open %v, 5s after its hook panicked; want %s and closed", got, h.unhealthy(), want)
	}
}

// A change queued behind one whose hook panicked is still delivered, in
// order.
func TestHealthChangesOutliveAPanickingHook(t *testing.T) {
	var log hookLog
	c := &healthChanges{fn: func(s Health, _ error) {
		if log.add(s) == 1 {
			panic("the hook's bug")
		}
	}}
	deliver := c.note(Unhealthy, errors.New("down"))
	c.note(Healthy, nil) // queued behind it
	func() {
		defer func() { _ = recover() }()
		if deliver {
			c.deliver()
		}
	}()
	if got := log.waitFor("[unhealthy healthy]", nil); got != "[unhealthy healthy]" {
		t.Errorf("the hook saw %s; want [unhealthy healthy]", got)
	}
}

// A hook that panics again on a change queued behind the first panic
// (a caller's decision reopened the breaker while the hook ran) panics on
// the goroutine that delivers, never on one of sluice's own, where
// nothing could recover it and the program would end; every change still
// reaches the hook, in order.
func TestHealthHookPanicsOnlyOnItsDeliverersGoroutine(t *testing.T) {
	var log hookLog
	c := &healthChanges{fn: func(s Health, _ error) {
		log.add(s)
		if s == Unhealthy {
			panic("the hook's bug")
		}
	}}
	deliver := c.note(Unhealthy, errors.New("down"))
	c.note(Healthy, nil)
	c.note(Unhealthy, errors.New("down again"))
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		if deliver {
			c.deliver()
		}
	}()
	time.Sleep(50 * time.Millisecond) // a goroutine started to deliver the rest would have panicked by now
	if got := log.String(); recovered == nil || got != "[unhealthy healthy unhealthy]" {
		t.Errorf("the hook saw %s and its panic reached the deliverer as %v; want [unhealthy healthy unhealthy], and the panic", got, recovered)
	}
}

// A hook that ends its goroutine (runtime.Goexit, which recover does not
// stop) leaves the next change deliverable by whoever notes it.
func TestHealthChangesAfterAHookEndsItsGoroutine(t *testing.T) {
	var calls atomic.Int32
	c := &healthChanges{fn: func(Health, error) {
		if calls.Add(1) == 1 {
			runtime.Goexit()
		}
	}}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		if c.note(Unhealthy, errors.New("down")) {
			c.deliver()
		}
	}()
	<-ended
	if c.note(Healthy, nil) {
		c.deliver()
	}
	if n := calls.Load(); n != 2 {
		t.Errorf("the hook was called %d times; want 2 (the change after the one whose hook ended its goroutine was not delivered)", n)
	}
}

// A change queued behind one whose hook ended its goroutine is still
// delivered, without waiting for a later change to be noted.
func TestHealthChangeQueuedBehindAGoexitIsDelivered(t *testing.T) {
	var log hookLog
	c := &healthChanges{fn: func(s Health, _ error) {
		if log.add(s) == 1 {
			runtime.Goexit()
		}
	}}
	deliver := c.note(Unhealthy, errors.New("down"))
	c.note(Healthy, nil) // queued behind it
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		if deliver {
			c.deliver()
		}
	}()
	<-ended
	if got := log.String(); got != "[unhealthy healthy]" {
		t.Errorf("the hook saw %s; want [unhealthy healthy]", got)
	}
}

// A hook's panic(nil) goes on up the deliverer's goroutine as any panic
// does, even where recover returns nil for it (GODEBUG=panicnil=1): run
// in a child process with that setting.
func TestHealthHookPanicNil(t *testing.T) {
	if os.Getenv("SLUICE_PANICNIL_CHILD") == "1" {
		c := &healthChanges{fn: func(Health, error) { panic(nil) }}
		panicked := true
		func() {
			defer func() { _ = recover() }()
			if c.note(Unhealthy, errors.New("down")) {
				c.deliver()
			}
			panicked = false
		}()
		if !panicked {
			fmt.Println("the hook's panic(nil) did not reach the deliverer")
			os.Exit(3)
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHealthHookPanicNil$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SLUICE_PANICNIL_CHILD=1", "GODEBUG=panicnil=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("with GODEBUG=panicnil=1: %v\n%s", err, out)
	}
}

// hookLog records what a health hook is told, for the tests of the hook.
type hookLog struct {
	mu   sync.Mutex
	seen []Health
}

// add records s and returns how many changes the hook has been told.
func (l *hookLog) add(s Health) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.seen = append(l.seen, s)
	return len(l.seen)
}

func (l *hookLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return fmt.Sprint(l.seen)
}

// waitFor waits up to 5s for the log to read want and done (nil: always)
// to hold, and returns what the log read last.
func (l *hookLog) waitFor(want string, done func() bool) string {
	var got string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if got = l.String(); got == want && (done == nil || done()) {
			break
		}
	}
	return got
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

// A probe refused for its key (NOPERM: the connection's ACL user may touch
// the decisions' keys but not the probe's) keeps the breaker open, and the
// decisions say why. Redis checks a command's keys before anything else,
// so the refusal tells nothing of Redis: taken for an answer, it closed
// the breaker over an outage (out of memory, read-only) again and again.
func TestProbeRefusedItsKeyKeepsTheBreakerOpen(t *testing.T) {
	admin, client := limitedUser(t)
	ctx := context.Background()
	var changes atomic.Int32
	lim := newOn(t, client, GCRA, PerDay(1000), WithHealthCheck(1, 100*time.Millisecond), WithTimeout(50*time.Millisecond),
		WithHealthHook(func(Health, error) { changes.Add(1) }))
	defer lim.Close()
	if _, err := lim.Allow(ctx, "ok-1"); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CONFIG", "SET", "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	defer admin.Do(ctx, "CONFIG", "SET", "maxmemory", "0")
	if _, err := lim.Allow(ctx, "ok-1"); err == nil || !strings.Contains(err.Error(), "OOM") {
		t.Fatalf("Redis out of memory: %v; want OOM", err)
	}
	if lim.Health() != Unhealthy {
		t.Fatal("the breaker did not open on OOM")
	}
	time.Sleep(time.Second) // probes, at most 100ms apart
	if h, n := lim.Health(), changes.Load(); h != Unhealthy || n != 1 {
		t.Errorf("a second of probes refused NOPERM while Redis is out of memory: health %v after %d changes; want Unhealthy after 1", h, n)
	}
	if _, err := lim.Allow(ctx, "ok-1"); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("a decision while the probe is refused: %v; want an error naming NOPERM", err)
	}
}

// A change noted before Close but not yet handed to the hook is dropped:
// here the probe's Healthy, queued while the hook, told Unhealthy, works,
// and then closes the limiter itself.
func TestCloseDropsTheChangesQueued(t *testing.T) {
	var mu sync.Mutex
	var told []Health
	var lim *Limiter
	lim = newOn(t, redistest.Client(t), GCRA, PerSecond(100), WithHealthCheck(1, 50*time.Millisecond),
		WithHealthHook(func(h Health, _ error) {
			mu.Lock()
			told = append(told, h)
			mu.Unlock()
			if h == Unhealthy {
				time.Sleep(300 * time.Millisecond) // Redis is up: the probe queues Healthy meanwhile
				lim.Close()
			}
		}))
	lim.health.failure(errors.New("a decision failed")) // as decide does on a timeout
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 1 || told[0] != Unhealthy {
		t.Errorf("the hook was told %v; want Unhealthy alone, nothing after its Close", told)
	}
}
