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

// The watchdog ends every wait at its deadline: callers queued behind
// pipelines that never return, callers inside them, callers with their own
// shorter deadline, arriving over time. None is left waiting.
func TestWatchdogEndsEveryWait(t *testing.T) {
	stuck := redistest.StuckServer(t)
	c := redis.NewClient(&redis.Options{Addr: stuck, MaxRetries: -1, ReadTimeout: time.Minute, PoolSize: 4})
	defer c.Close()
	lim := newOn(t, c, GCRA, PerSecond(1), WithTimeout(50*time.Millisecond), WithHealthCheck(0, 0))
	const callers = 60
	errs := make(chan error, callers)
	for i := 0; i < callers; i++ {
		go func() {
			ctx := context.Background()
			if i%3 == 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 20*time.Millisecond)
				defer cancel()
			}
			time.Sleep(time.Duration(i) * time.Millisecond)
			_, err := lim.Allow(ctx, fmt.Sprintf("k%d", i))
			errs <- err
		}()
	}
	guard := time.After(30 * time.Second)
	for i := 0; i < callers; i++ {
		select {
		case err := <-errs:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("got %v, want DeadlineExceeded", err)
			}
		case <-guard:
			t.Fatalf("%d of %d callers still wait, 30s after their 50ms timeout", callers-i, callers)
		}
	}
	// Calls that no longer wait leave the queue at the watchdog's next
	// round (run here, so as not to depend on when it last ran).
	b := lim.batch
	b.expire()
	b.mu.Lock()
	queued := len(b.pending)
	b.mu.Unlock()
	if queued != 0 {
		t.Errorf("%d calls still queued, none of them waiting", queued)
	}
}

// The watchdog fires at the earliest deadline of the calls that wait,
// though calls do not always come in deadline order: the health probe's
// PING waits with its own 1s context, and a Reset with the limiter's 50ms
// timeout queued after it must still end after about 50ms, not 1s.
func TestWatchdogFiresAtTheEarliestDeadline(t *testing.T) {
	stuck := redistest.StuckServer(t)
	c := redis.NewClient(&redis.Options{Addr: stuck, MaxRetries: -1, ReadTimeout: time.Minute})
	defer c.Close()
	lim := newOn(t, c, GCRA, PerSecond(1), WithTimeout(50*time.Millisecond), WithHealthCheck(1, 50*time.Millisecond))
	viaFlushers(lim.batch)
	var probeMu sync.Mutex
	var probeDeadline time.Time // of the first probe's PING
	ping := lim.health.probe
	lim.health.probe = func(ctx context.Context) error {
		if d, ok := ctx.Deadline(); ok {
			probeMu.Lock()
			if probeDeadline.IsZero() {
				probeDeadline = d
			}
			probeMu.Unlock()
		}
		return ping(ctx)
	}
	bg := context.Background()
	// One failed decision opens the breaker; the probe (health.recover)
	// then sends a PING with a 1s context, which hangs.
	if _, err := lim.Allow(bg, "k"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("first decision on a hung Redis: %v", err)
	}
	if lim.Health() != Unhealthy {
		t.Fatal("the breaker did not open")
	}
	waitFor(t, "the probe's PING in flight", func() bool {
		_, _, inflight, watching := batcherState(lim.batch)
		return inflight >= 2 && watching // the hung decision and the probe
	})
	start := time.Now()
	err := lim.Reset(bg, "k")
	end := time.Now()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Reset on a hung Redis: %v, want DeadlineExceeded", err)
	}
	// Armed for the probe's deadline, the watchdog would end the Reset's
	// wait no earlier than that: the test needs no margin of time.
	probeMu.Lock()
	deadline := probeDeadline
	probeMu.Unlock()
	if deadline.IsZero() {
		t.Fatal("the probe's PING had no deadline")
	}
	if !end.Before(deadline) {
		t.Errorf("Reset with a 50ms timeout returned after %v, at or after the probe's deadline: the watchdog was armed for it", end.Sub(start))
	}
}

// The watchdog fires at the earliest deadline, which is the caller's own
// when its context ends before the limiter's timeout, racing the context's
// own timer. Either way the caller is told its context's error, and decide
// counts nothing against Redis's health for a caller that merely ran out of
// its own time.
func TestOwnDeadlineNotCountedAgainstHealth(t *testing.T) {
	opt := redistest.Options(t)
	opt.MaxRetries = -1
	c := redis.NewClient(opt)
	defer c.Close()
	gate := &holdPipelines{holding: true, open: make(chan struct{})}
	c.AddHook(gate)
	defer gate.release()
	lim := newOn(t, c, GCRA, PerSecond(1000), WithTimeout(time.Minute), WithHealthCheck(1<<30, 0),
		WithPrefix(fmt.Sprintf("ctxdl-%d", time.Now().UnixNano())))
	viaFlushers(lim.batch)
	bg := context.Background()
	loadScript(t, c)
	for i := 0; i < 400; i++ {
		ctx, cancel := context.WithTimeout(bg, 2*time.Millisecond)
		_, err := lim.Allow(ctx, fmt.Sprintf("k%d", i%8))
		cancel()
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("call %d: %v, want DeadlineExceeded", i, err)
		}
		if n := lim.health.failures.Load(); n > 0 {
			t.Fatalf("call %d: a caller past its own context's deadline (the limiter's timeout is a minute) counted %d failure(s) against Redis's health", i, n)
		}
	}
}

// With ContextTimeoutEnabled, go-redis ends the pipeline's read at the
// batch's latest deadline: for a lone caller, its own context's. The
// answer ("i/o timeout") can arrive before the context's own timer has set
// ctx.Err(); decide still counts nothing against Redis's health for a
// caller past its own deadline, or enough impatient callers would open the
// breaker on a healthy Redis. So too on a default client, whose lone
// caller sends on a copy that enforces deadlines (see inlineBound).
func TestOwnDeadlineAnswerNotCountedAgainstHealth(t *testing.T) {
	for _, ctxTimeout := range []bool{true, false} {
		c := redis.NewClient(&redis.Options{Addr: redistest.StuckServer(t), ContextTimeoutEnabled: ctxTimeout,
			MaxRetries: -1, ReadTimeout: time.Minute})
		lim := newOn(t, c, GCRA, PerSecond(1000), WithTimeout(time.Minute), WithHealthCheck(1<<30, 0))
		for i := 0; i < 200; i++ {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Millisecond)
			_, err := lim.Allow(ctx, "k")
			cancel()
			if err == nil {
				t.Fatalf("ContextTimeoutEnabled %v, call %d answered by a server that never answers", ctxTimeout, i)
			}
			if n := lim.health.failures.Load(); n > 0 {
				t.Fatalf("ContextTimeoutEnabled %v, call %d (%v): a caller past its own context's deadline counted %d failure(s) against Redis's health", ctxTimeout, i, err, n)
			}
		}
		c.Close()
	}
}
