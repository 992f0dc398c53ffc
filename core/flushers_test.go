package core

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Flushers park while another batch is in flight (see flush), but none is
// left once the traffic ends: a limiter nobody uses holds no goroutine.
func TestNoFlusherOutlivesTheTraffic(t *testing.T) {
	c := redistest.Client(t)
	lim := newOn(t, c, GCRA, PerHour(1_000_000), WithPrefix(fmt.Sprintf("park-%d", time.Now().UnixNano())))
	for round := 0; round < 3; round++ {
		if err := runLoad(lim); err != nil {
			t.Error(err)
		}
		waitBatcherIdle(t, lim.batch)
		for deadline := time.Now().Add(10 * time.Second); flushersRunning(lim.batch) > 0; {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d flusher goroutines left after the traffic", round, flushersRunning(lim.batch))
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// flushersRunning counts the goroutines in b's flush.
func flushersRunning(b *batcher) int { return flushersOutside(b, "") }

// holdFirstPipeline is a go-redis hook that holds the first EVALSHA
// pipeline, after its reply, until release is closed: a batch in flight
// for as long as the test wants, as on a connection that hangs. With
// loading, it holds the first that came back refused with LOADING (it
// never ran).
type holdFirstPipeline struct {
	pipelineOnly
	loading bool
	taken   atomic.Bool
	held    chan struct{}
	release chan struct{}
}

func (h *holdFirstPipeline) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if isEvalSha(cmds) && (!h.loading || redis.IsLoadingError(cmds[0].Err())) && h.taken.CompareAndSwap(false, true) {
			close(h.held)
			<-h.release
		}
		return err
	}
}

// runLoad makes 64 goroutines × 50 decisions on lim, over 7 keys, and
// returns the first error (behind a held batch, its callers' timeouts are
// expected).
func runLoad(lim *Limiter) error {
	var wg sync.WaitGroup
	var first atomic.Pointer[error]
	for g := 0; g < 64; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				if _, err := lim.Allow(context.Background(), fmt.Sprintf("k%d", (g+i)%7)); err != nil {
					first.CompareAndSwap(nil, &err)
				}
			}
		}()
	}
	wg.Wait()
	if err := first.Load(); err != nil {
		return *err
	}
	return nil
}

// flushersOutside counts the goroutines in b's flush whose stack does not
// hold not, a function name (the hook holding a batch); "" excludes none.
func flushersOutside(b *batcher, not string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	in := fmt.Sprintf("core.(*batcher).flush(%p)", b)
	count := 0
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, in) && (not == "" || !strings.Contains(g, not)) {
			count++
		}
	}
	return count
}

// Flushers park while another batch is in flight (see flush). Behind a
// batch that hangs, they would stay parked for as long as it hangs, past
// the limiter's Close: Close releases them, and no flusher parks after it.
// The closed limiter still decides, by asking Redis.
func TestCloseEndsParkedFlushers(t *testing.T) {
	c := redis.NewClient(redistest.Options(t))
	defer c.Close()
	hold := &holdFirstPipeline{held: make(chan struct{}), release: make(chan struct{})}
	c.AddHook(hold)
	lim := newOn(t, c, GCRA, PerHour(1_000_000), WithTimeout(200*time.Millisecond), WithHealthCheck(0, 0),
		WithPrefix(fmt.Sprintf("close-%d", time.Now().UnixNano())))
	b := lim.batch
	viaFlushers(b)
	loadScript(t, c)
	defer close(hold.release)
	// The first batch hangs; the traffic goes on around it, and its
	// flushers park behind it once it ends.
	go func() { _, _ = lim.Allow(context.Background(), "first") }()
	<-hold.held
	_ = runLoad(lim) // timeouts behind the held batch are expected
	waitFor(t, "the flushers to park behind the hung batch", func() bool {
		b.mu.Lock()
		defer b.mu.Unlock()
		return b.active == 1 && b.parked > 0 && len(b.pending) == 0
	})

	lim.Close()
	for deadline := time.Now().Add(10 * time.Second); ; {
		n := flushersOutside(b, "holdFirstPipeline")
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d flushers parked 10s after Close, behind a hung batch; want none", n)
		}
		time.Sleep(time.Millisecond)
	}

	// After Close: decisions still go to Redis, and no flusher parks.
	if r, err := lim.Allow(context.Background(), "after"); err != nil || !r.Allowed {
		t.Fatalf("Allow after Close: %+v, %v; want admitted by Redis", r, err)
	}
	_ = runLoad(lim) // timeouts behind the held batch are expected
	for deadline := time.Now().Add(10 * time.Second); ; {
		b.mu.Lock()
		parked := b.parked
		b.mu.Unlock()
		n := flushersOutside(b, "holdFirstPipeline")
		if n == 0 && parked == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after Close: %d flushers left (%d parked) behind a hung batch; want none", n, parked)
		}
		time.Sleep(time.Millisecond)
	}
}

// After load and Close, the process holds no more goroutines than before
// the limiter's first decision.
func TestCloseLeavesNoGoroutine(t *testing.T) {
	c := redistest.Client(t)
	lim := newOn(t, c, GCRA, PerHour(1_000_000), WithPrefix(fmt.Sprintf("closeg-%d", time.Now().UnixNano())))
	if _, err := lim.Allow(context.Background(), "warm"); err != nil {
		t.Fatal(err)
	}
	waitBatcherIdle(t, lim.batch)
	base := runtime.NumGoroutine()
	_ = runLoad(lim) // timeouts behind the held batch are expected
	lim.Close()
	for deadline := time.Now().Add(20 * time.Second); ; {
		n := runtime.NumGoroutine()
		if n <= base && flushersRunning(lim.batch) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines 20s after Close (%d flushers); %d before the load", n, flushersRunning(lim.batch), base)
		}
		time.Sleep(time.Millisecond)
	}
}

// A closed limiter is collected once it is dropped, even when its last
// caller's deadline is hours away: the watchdog, armed at that deadline
// (with no timeout of the limiter's own), no longer holds it.
func TestClosedLimiterIsNotHeldByItsWatchdog(t *testing.T) {
	c := redistest.Client(t)
	lim := newOn(t, c, GCRA, PerHour(100), WithTimeout(0), WithPrefix(fmt.Sprintf("closewatch-%d", time.Now().UnixNano())))
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	if _, err := lim.Allow(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	waitBatcherIdle(t, lim.batch)
	lim.Close()
	b := weak.Make(lim.batch)
	lim = nil
	for deadline := time.Now().Add(10 * time.Second); b.Value() != nil; {
		if time.Now().After(deadline) {
			t.Fatal("a closed and dropped limiter's batcher is still reachable 10s later; its last caller's deadline is an hour away")
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
}
