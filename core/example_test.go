package core_test

import (
	"context"
	"fmt"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
)

// A Redis for the examples: an embedded miniredis. In production, pass the
// *redis.Client, *redis.ClusterClient or failover client of your Redis.
// Its clock stands still (at noon, away from any window's edge), so that
// what the examples print does not depend on how fast they run.
func exampleRedis() (*redis.Client, func()) {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	m.SetTime(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	rdb := redis.NewClient(&redis.Options{Addr: m.Addr()})
	return rdb, func() { rdb.Close(); m.Close() }
}

func ExampleNew() {
	rdb, done := exampleRedis()
	defer done()

	limiter, err := core.New(rdb, core.TokenBucket, core.PerSecond(10))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 0; i < 11; i++ {
		res, err := limiter.Allow(ctx, "client-42")
		if err != nil {
			// Redis is down: decide whether to serve anyway (fail open).
			continue
		}
		if i < 2 || !res.Allowed {
			fmt.Printf("request %d: allowed=%v remaining=%d\n", i+1, res.Allowed, res.Remaining)
		}
	}
	// Output:
	// request 1: allowed=true remaining=9
	// request 2: allowed=true remaining=8
	// request 11: allowed=false remaining=0
}

func ExampleNewPolicy() {
	rdb, done := exampleRedis()
	defer done()

	// At most 2 per second and 5 per day, decided all or nothing: a request
	// the per-second rule denies does not count against the day.
	limiter, err := core.NewPolicy(rdb, []core.Rule{
		{Name: "burst", Algorithm: core.TokenBucket, Limit: core.PerSecond(2)},
		{Name: "daily", Algorithm: core.FixedWindow, Limit: core.PerDay(5)},
	})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		res, _ := limiter.Allow(ctx, "user:7")
		fmt.Printf("allowed=%v decided by %q; daily remaining %d\n", res.Allowed, res.Rule, res.Rules[1].Remaining)
	}
	// Output:
	// allowed=true decided by "burst"; daily remaining 4
	// allowed=true decided by "burst"; daily remaining 3
	// allowed=false decided by "burst"; daily remaining 3
}

func ExampleLimiter_Wait() {
	rdb, done := exampleRedis()
	defer done()

	// Workers on many machines share one budget of 50 jobs per second.
	limiter, err := core.New(rdb, core.GCRA, core.PerSecond(50))
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for job := 1; job <= 3; job++ {
		if err := limiter.Wait(ctx, "jobs:email"); err != nil {
			fmt.Println("giving up:", err)
			return
		}
		fmt.Println("processing job", job)
	}
	// Output:
	// processing job 1
	// processing job 2
	// processing job 3
}

func ExampleLocal() {
	// The in-memory twin decides exactly like the Redis scripts, at the
	// time you give it.
	local, err := core.NewLocal([]core.Rule{{Name: "api", Algorithm: core.GCRA, Limit: core.PerMinute(2)}})
	if err != nil {
		panic(err)
	}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{0, 0, 0, 30 * time.Second} {
		res, _ := local.AllowN(t0.Add(at), "k", 1)
		fmt.Printf("t+%s: allowed=%v retry after %s\n", at, res.Allowed, res.RetryAfter)
	}
	// Output:
	// t+0s: allowed=true retry after 0s
	// t+0s: allowed=true retry after 0s
	// t+0s: allowed=false retry after 30s
	// t+30s: allowed=true retry after 0s
}
