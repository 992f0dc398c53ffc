package core

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// warmPool makes c hold at least n connections in its pool: n PINGs at
// once, with the proxy holding their replies so that none finishes before
// the others have taken a connection of their own.
func warmPool(t *testing.T, c *redis.Client, p *redistest.Proxy, n int) {
	t.Helper()
	p.Delay(100 * time.Millisecond)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.Ping(context.Background()).Err(); err != nil {
				t.Errorf("warming the pool: %v", err)
			}
		}()
	}
	wg.Wait()
	p.Delay(0)
	if idle := c.PoolStats().IdleConns; int(idle) < n {
		t.Fatalf("the pool holds %d idle connections; want %d", idle, n)
	}
}

// hungRun makes decisions decisions, workers at a time, and reports how
// many succeeded and the longest any took.
func hungRun(lim *Limiter, decisions, workers int) (ok int, longest time.Duration) {
	var succeeded atomic.Int64
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := atomic.Int64{}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(decisions) {
				start := time.Now()
				_, err := lim.Allow(context.Background(), "k")
				took := time.Since(start)
				if err == nil {
					succeeded.Add(1)
				}
				mu.Lock()
				longest = max(longest, took)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	return int(succeeded.Load()), longest
}

// Pooled connections that silently stop forwarding (a NAT or a load
// balancer that dropped their state) hold back nothing else, on a default
// client too, which ignores context deadlines while it reads (ReadTimeout,
// 3s): once the flushers are all stuck on hung connections, their sends no
// longer count against the flushers' limit, and the decisions behind them
// go out on healthy connections. Only the decisions sent on a hung
// connection fail, each at its own timeout.
func TestHungConnectionsHoldBackNothing(t *testing.T) {
	for _, hung := range []int{3, 6} {
		t.Run(fmt.Sprintf("hung=%d", hung), func(t *testing.T) {
			p := redistest.StartProxy(t, redistest.Options(t).Addr)
			c := redis.NewClient(&redis.Options{Addr: p.Addr}) // the defaults: PoolSize 10 per CPU
			defer c.Close()
			if size := c.Options().PoolSize; hung >= size {
				t.Skipf("a pool of %d: %d hung connections would be all of it", size, hung)
			}
			lim := newOn(t, c, FixedWindow, PerHour(1_000_000), WithTimeout(100*time.Millisecond),
				WithHealthCheck(0, 0), WithFailureMode(FailClosed),
				WithPrefix(fmt.Sprintf("hung-%d-%d", hung, time.Now().UnixNano())))
			loadScript(t, c)
			warmPool(t, c, p, hung)
			if n := p.HangOpen(); n != hung {
				t.Fatalf("%d connections hang; want %d", n, hung)
			}
			const decisions, slack = 200, 2 * time.Second
			ok, longest := hungRun(lim, decisions, 4)
			t.Logf("%d hung: %d of %d succeeded, the longest took %v", hung, ok, decisions, longest)
			if ok < decisions*9/10 || longest > 100*time.Millisecond+slack {
				t.Errorf("%d of the pool's connections hang: %d of %d decisions succeeded, the longest took %v; want at least 90%% answered, none beyond its 100ms timeout + %v",
					hung, ok, decisions, longest, slack)
			}
		})
	}
}

// The health probe goes through the batcher: flushers stuck on hung
// connections do not hold it back either.
func TestHungConnectionsDoNotStarveTheProbe(t *testing.T) {
	p := redistest.StartProxy(t, redistest.Options(t).Addr)
	// The hung reads last a minute, far beyond the probe's wait below: a
	// probe held behind them fails, whatever the machine's load.
	c := redis.NewClient(&redis.Options{Addr: p.Addr, ReadTimeout: time.Minute})
	defer c.Close()
	lim := newOn(t, c, FixedWindow, PerHour(1_000_000), WithTimeout(100*time.Millisecond),
		WithHealthCheck(0, 0), WithPrefix(fmt.Sprintf("hung-probe-%d", time.Now().UnixNano())))
	viaFlushers(lim.batch)
	loadScript(t, c)
	warmPool(t, c, p, 3)
	p.HangOpen()
	// Three decisions, one on each hung connection, with all three
	// flushers stuck in their reads.
	errs := make(chan error, 3)
	for i := 0; i < 3; i++ {
		allowAsync(lim, context.Background(), fmt.Sprint("h", i), errs)
		waitFor(t, "the decision in flight", func() bool {
			_, _, inflight, _ := batcherState(lim.batch)
			return inflight == i+1
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := lim.probe(ctx); err != nil {
		t.Errorf("the health probe with three flushers stuck on hung connections: %v; want it answered on another", err)
	}
	for i := 0; i < 3; i++ {
		<-errs
	}
}

// With the breaker on, the decisions lost on hung connections may open it
// (three in a row do; the log says how often it opened), and its probe's
// write, answered on a healthy connection, closes it again: either way
// decisions succeed again long before the hung reads end (a minute here).
func TestHungConnectionsBreakerRecovers(t *testing.T) {
	p := redistest.StartProxy(t, redistest.Options(t).Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr, ReadTimeout: time.Minute})
	defer c.Close()
	var unhealthy atomic.Int32
	lim := newOn(t, c, FixedWindow, PerHour(1_000_000), WithTimeout(100*time.Millisecond),
		WithFailureMode(FailClosed), WithHealthHook(func(h Health, _ error) {
			if h == Unhealthy {
				unhealthy.Add(1)
			}
		}),
		WithPrefix(fmt.Sprintf("hung-breaker-%d", time.Now().UnixNano())))
	loadScript(t, c)
	warmPool(t, c, p, 4)
	p.HangOpen()
	ok, failed := 0, 0
	for deadline := time.Now().Add(20 * time.Second); ok < 100 && time.Now().Before(deadline); {
		if _, err := lim.Allow(context.Background(), "k"); err != nil {
			failed++
			time.Sleep(time.Millisecond) // while the breaker is open, answers come at once
		} else {
			ok++
		}
	}
	t.Logf("%d succeeded, %d failed; the breaker opened %d times", ok, failed, unhealthy.Load())
	if ok < 100 {
		t.Errorf("with 4 of the pool's connections hung: %d decisions succeeded, %d failed in 20s; want 100 succeeded, before the hung reads end (a minute)", ok, failed)
	}
}
