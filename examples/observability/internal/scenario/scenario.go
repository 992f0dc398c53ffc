// Package scenario drives sluice limiters through every outcome an observer
// can see, so that the tests of the Prometheus and the OpenTelemetry
// exporters check the same decisions.
package scenario

import (
	"context"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Rule is the name of the one rule of every limiter of Run and Recover.
const Rule = "per-hour"

// Run makes these decisions, building each limiter with the options that
// opts returns for its name:
//
//	"redis"   2 per hour on a miniredis: allowed, allowed, denied
//	"shadow"  1 per hour in shadow mode:  allowed, denied (Event.Shadow)
//	"closed"  a Redis that refuses connections, FailClosed, unhealthy
//	          after 1 failure: error, error; the health hook reports
//	          Unhealthy during the first decision
//	"local"   the same refused Redis, FailLocal: fallback (allowed by the
//	          in-process twin); still healthy (3 failures make it unhealthy)
//
// Slow rates keep the outcomes independent of when the test runs. The
// limiter "closed" keeps probing its Redis in the background until the
// test binary exits.
func Run(t testing.TB, opts func(limiter string) []core.Option) {
	t.Helper()
	ctx := context.Background()

	m := miniredis.RunT(t)
	rdb := client(t, m.Addr())
	decide(t, ctx, newLimiter(t, rdb, 2, opts("redis")), "alice", 3)
	decide(t, ctx, newLimiter(t, rdb, 1, append(opts("shadow"), core.WithShadow())), "bob", 2)

	down := client(t, redistest.RefusedAddr(t))
	decide(t, ctx, newLimiter(t, down, 2, append(opts("closed"),
		core.WithFailureMode(core.FailClosed), core.WithHealthCheck(1, time.Second))), "carol", 2)
	decide(t, ctx, newLimiter(t, down, 2, append(opts("local"),
		core.WithFailureMode(core.FailLocal))), "dave", 1)
}

// Recover takes the limiter "recovering" (fail open, unhealthy after 1
// failure, probing every 50ms) through an outage: its Redis stops, one
// decision fails (an error outcome) and makes it unhealthy, which healthy
// must then report; the Redis comes back and Recover waits, up to 30s, for
// healthy to report it.
func Recover(t testing.TB, opts func(limiter string) []core.Option, healthy func() bool) {
	t.Helper()
	m := miniredis.RunT(t)
	l := newLimiter(t, client(t, m.Addr()), 2, append(opts("recovering"), core.WithHealthCheck(1, 50*time.Millisecond)))
	m.Close()
	decide(t, context.Background(), l, "erin", 1)
	if healthy() {
		t.Fatal("healthy after a failed decision with WithHealthCheck(1, ...)")
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); !healthy(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("not healthy again 30s after Redis came back")
		}
	}
}

func newLimiter(t testing.TB, rdb redis.UniversalClient, perHour int, opts []core.Option) *core.Limiter {
	t.Helper()
	// A generous timeout: Lua on miniredis under the race detector on a
	// busy machine can take longer than the default 100ms, and a timeout
	// would turn an expected decision into an error outcome.
	opts = append([]core.Option{core.WithTimeout(10 * time.Second)}, opts...)
	l, err := core.NewPolicy(rdb, []core.Rule{{Name: Rule, Algorithm: core.SlidingWindowLog, Limit: core.PerHour(perHour)}}, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// decide makes n decisions for key; the observer sees them, whatever they
// return.
func decide(t testing.TB, ctx context.Context, l *core.Limiter, key string, n int) {
	t.Helper()
	for range n {
		l.Allow(ctx, key)
	}
}

func client(t testing.TB, addr string) *redis.Client {
	t.Helper()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	return rdb
}
