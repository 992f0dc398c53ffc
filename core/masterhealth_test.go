package core

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// TestClusterOwnBreakerCountsConsecutiveFailures: on a cluster, a decision
// whose master was never named (it timed out in the queue) counts against
// the limiter's own breaker, and every answered decision, whatever its
// master, ends such a run of failures: three isolated failures between
// hundreds of answers must not open it. (Each round here makes a decision
// time out in the queue by holding every flusher's place.)
func TestClusterOwnBreakerCountsConsecutiveFailures(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := context.Background()
	var mu sync.Mutex
	var changes []Health
	lim, err := New(cl.Client(t), GCRA, PerSecond(1_000_000), WithPrefix(fmt.Sprintf("own-%d", time.Now().UnixNano())),
		WithTimeout(50*time.Millisecond), WithHealthCheck(3, 100*time.Millisecond),
		WithHealthHook(func(h Health, _ error) { mu.Lock(); changes = append(changes, h); mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	for round := 0; round < 4; round++ {
		b := lim.batch
		for wait := time.Now().Add(5 * time.Second); ; time.Sleep(time.Millisecond) {
			b.mu.Lock()
			if b.active == 0 || time.Now().After(wait) {
				break // (held) the last round's flusher has ended
			}
			b.mu.Unlock()
		}
		b.active += 1000 // no flusher may start: the next decision waits out its timeout
		b.mu.Unlock()
		if _, err := lim.Allow(ctx, "queued"); err == nil {
			t.Fatalf("round %d: a decision with no flusher to send it was answered", round)
		}
		b.mu.Lock()
		b.active -= 1000
		b.mu.Unlock()
		for i := 0; i < 100; i++ {
			if _, err := lim.Allow(ctx, fmt.Sprintf("user-%d", i)); err != nil {
				t.Fatalf("round %d: %v", round, err)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if h := lim.Health(); h != Healthy || len(changes) > 0 {
		t.Errorf("after four isolated failures among 400 answers: Health() = %v, the hook saw %v; want Healthy, nothing", h, changes)
	}
}

// TestHealthHookMayCallTheLimiter: a hook that decides (say, to log a
// decision) while the first breaker opens may make a second breaker open
// (another master failing too): that report must not wait for the first
// to end, and the hook still sees one change, in order.
func TestHealthHookMayCallTheLimiter(t *testing.T) {
	var changes healthChanges
	l := &Limiter{opts: options{failures: 1, maxBackoff: time.Second}}
	probe := func(context.Context) error { return errors.New("still down") }
	second := l.newHealth(probe, &changes)
	first := l.newHealth(probe, &changes)
	defer first.close()
	defer second.close()
	var seen []Health
	changes.fn = func(h Health, err error) {
		seen = append(seen, h)
		if h == Unhealthy {
			second.failure(err) // the hook's own decision fails on another master
		}
	}
	done := make(chan struct{})
	go func() {
		first.failure(errors.New("down"))
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the first breaker's failure still waits 5s on its hook, which opened a second breaker")
	}
	changes.mu.Lock()
	defer changes.mu.Unlock()
	if len(seen) != 1 || seen[0] != Unhealthy {
		t.Errorf("the hook saw %v, want [Unhealthy]", seen)
	}
}
