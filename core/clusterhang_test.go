package core_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
)

// testClusterOneMasterHangs pauses one master of the cluster (CLIENT PAUSE
// ALL: it takes connections and commands but runs none, as a master
// whose host has stopped answering) while 48 goroutines decide and Reset
// keys of every master. Batches bound for several masters are sent to each
// on its own, Resets (DELs) and the breakers' probes too: the decisions
// and Resets on the live masters' keys are answered throughout, and only
// those on the paused master's keys fail. With the health check
// off, they fail at the limiter's timeout: what is measured is the sending
// alone. With it on, the paused master's breaker opens, and its keys'
// decisions are answered at once by the failure mode until the master
// answers again, while the live masters' keys go to Redis: the limiter
// reports Unhealthy meanwhile, and its hook sees one change each way.
// bySlot groups the decisions by slot, as on Redis 6 masters: the same
// holds.
func testClusterOneMasterHangs(t *testing.T, cl *redistest.Cluster, healthCheck, bySlot bool) {
	cc := cl.Client(t)
	ctx := context.Background()
	shards, err := cl.Shards(ctx)
	if err != nil {
		t.Fatal(err)
	}
	paused := shards[0]
	const pause = 2 * time.Second
	prefix := fmt.Sprintf("hang-%d", time.Now().UnixNano())
	opts := []core.Option{core.WithPrefix(prefix), core.WithTimeout(500 * time.Millisecond), core.WithHealthCheck(0, 0)}
	var hookMu sync.Mutex
	var changes []core.Health
	if healthCheck {
		opts = append(opts[:2], core.WithHealthHook(func(h core.Health, _ error) {
			hookMu.Lock()
			changes = append(changes, h)
			hookMu.Unlock()
		}))
	}
	lim, err := core.New(cc, core.GCRA, core.PerSecond(1_000_000), opts...)
	if err != nil {
		t.Fatal(err)
	}
	if bySlot {
		core.GroupBySlot(lim)
	}
	defer lim.Close()
	keys := make([]string, 600)
	onPaused := make([]bool, len(keys))
	for i := range keys {
		keys[i] = fmt.Sprintf("user-%d", i)
		onPaused[i] = paused.Owns(redistest.Slot(keys[i]))
	}
	for i, key := range keys { // every key's first decision before the pause
		if _, err := lim.Allow(ctx, key); err != nil {
			t.Fatalf("before the pause, %s (on the paused master: %t): %v", key, onPaused[i], err)
		}
	}

	var during atomic.Bool
	var live, liveFailed, hung, hungFailed atomic.Int64
	var mu sync.Mutex
	var firstErr error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 48; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := g; ; i += 48 {
				select {
				case <-stop:
					return
				default:
				}
				k := i % len(keys)
				in := during.Load()
				var err error
				if i%4 == 3 {
					err = lim.Reset(ctx, keys[k]) // a DEL, sent beside the scripts
				} else {
					_, err = lim.Allow(ctx, keys[k])
				}
				if !in || !during.Load() {
					continue // counted only when wholly within the pause
				}
				switch {
				case onPaused[k]:
					hung.Add(1)
					if err != nil {
						hungFailed.Add(1)
					}
				case err != nil:
					liveFailed.Add(1)
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				default:
					live.Add(1)
				}
			}
		}(g)
	}
	time.Sleep(200 * time.Millisecond)
	if err := cl.Node(paused.Master).Do(ctx, "CLIENT", "PAUSE", pause.Milliseconds(), "ALL").Err(); err != nil {
		close(stop)
		wg.Wait()
		t.Fatalf("CLIENT PAUSE on %s: %v", paused.Master, err)
	}
	during.Store(true)
	time.Sleep(pause / 2)
	healthDuring := lim.Health()
	time.Sleep(pause/2 - 300*time.Millisecond)
	during.Store(false)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()

	t.Logf("while %s was paused: %d decisions on the live masters' keys answered, %d failed; %d of %d on the paused master's keys failed",
		paused.Master, live.Load(), liveFailed.Load(), hungFailed.Load(), hung.Load())
	if n := liveFailed.Load(); n > 0 {
		t.Errorf("%d decisions on the live masters' keys failed while %s was paused, the first: %v", n, paused.Master, firstErr)
	}
	if live.Load() < 100 {
		t.Errorf("only %d decisions on the live masters' keys were answered while %s was paused", live.Load(), paused.Master)
	}
	if hung.Load() == 0 || hungFailed.Load() != hung.Load() {
		t.Errorf("%d of %d decisions on the paused master's keys failed, want all of at least one", hungFailed.Load(), hung.Load())
	}
	if err := waitAnswered(ctx, lim, keys, onPaused); err != nil {
		t.Error(err)
	}
	if !healthCheck {
		return
	}
	if healthDuring != core.Unhealthy {
		t.Errorf("Health() = %v while %s was paused, want Unhealthy", healthDuring, paused.Master)
	}
	if h := lim.Health(); h != core.Healthy {
		t.Errorf("Health() = %v once every master answers again, want Healthy", h)
	}
	hookMu.Lock()
	defer hookMu.Unlock()
	if len(changes) != 2 || changes[0] != core.Unhealthy || changes[1] != core.Healthy {
		t.Errorf("the health hook saw %v, want [Unhealthy Healthy]", changes)
	}
}

// waitAnswered waits until a decision on a key of the formerly paused
// master is answered again.
func waitAnswered(ctx context.Context, lim *core.Limiter, keys []string, onPaused []bool) error {
	deadline := time.Now().Add(10 * time.Second)
	for k, key := range keys {
		if !onPaused[k] {
			continue
		}
		for {
			_, err := lim.Allow(ctx, key)
			if err == nil {
				return nil
			}
			if time.Now().After(deadline) {
				return errors.New("after the pause, decisions on the paused master's keys still fail: " + err.Error())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return errors.New("no key on the paused master")
}
