package core

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// benchKeys are user keys spread so that limits are rarely reached: the
// benchmarks measure decisions, not denials.
var benchKeys = func() []string {
	k := make([]string, 1024)
	for i := range k {
		k[i] = "203.0.113." + strconv.Itoa(i)
	}
	return k
}()

// BenchmarkAllow measures one caller's decision on a real redis-server,
// for every algorithm and a two-rule policy.
func BenchmarkAllow(b *testing.B) {
	c := redistest.Client(b)
	ctx := context.Background()
	for _, alg := range Algorithms() {
		b.Run(string(alg), func(b *testing.B) {
			// Far above what the benchmark reaches on a key, and valid for
			// every algorithm (a SlidingWindowCounter of 2^30 an hour is not).
			lim := newBench(b, c, []Rule{{Name: "r", Algorithm: alg, Limit: PerSecond(1 << 19)}})
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if _, err := lim.Allow(ctx, benchKeys[i%len(benchKeys)]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	b.Run("policy", func(b *testing.B) {
		lim := newBench(b, c, []Rule{
			{Name: "second", Algorithm: TokenBucket, Limit: PerSecond(1 << 20)},
			{Name: "day", Algorithm: FixedWindow, Limit: PerDay(1 << 30)},
		})
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			if _, err := lim.Allow(ctx, benchKeys[i%len(benchKeys)]); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAllowInline is BenchmarkAllow/gcra with a client that enforces
// context deadlines (ContextTimeoutEnabled): a lone caller sends its own
// call, with no handoff to a flusher.
func BenchmarkAllowInline(b *testing.B) {
	c := ctxTimeoutClient(b)
	ctx := context.Background()
	lim := newBench(b, c, []Rule{{Name: "r", Algorithm: GCRA, Limit: PerHour(1 << 30)}})
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := lim.Allow(ctx, benchKeys[i%len(benchKeys)]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAllowParallel measures throughput with many concurrent callers,
// where decisions share pipelines.
func BenchmarkAllowParallel(b *testing.B) {
	c := redis.NewClient(&redis.Options{Addr: redistest.Options(b).Addr, PoolSize: 64})
	defer c.Close()
	ctx := context.Background()
	for _, par := range []int{1, 8, 32} { // × GOMAXPROCS goroutines
		b.Run(fmt.Sprintf("goroutines=%dxP", par), func(b *testing.B) {
			lim := newBench(b, c, []Rule{{Name: "r", Algorithm: GCRA, Limit: PerHour(1 << 30)}})
			b.ReportAllocs()
			b.SetParallelism(par)
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					if _, err := lim.Allow(ctx, benchKeys[i%len(benchKeys)]); err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// BenchmarkGoRedisBaseline is what go-redis itself allocates for the same
// script call, sent the same way (one command in a pipeline, its reply read
// as integers) with its arguments made once: the allocation budget of the
// decision path is counted on top of it.
func BenchmarkGoRedisBaseline(b *testing.B) {
	c := redistest.Client(b)
	ctx := context.Background()
	lim := newBench(b, c, []Rule{{Name: "r", Algorithm: GCRA, Limit: PerHour(1 << 30)}})
	args := baselineArgs(lim, "k")
	b.ReportAllocs()
	for b.Loop() {
		goRedisBaseline(ctx, c, args)
	}
}

// baselineArgs returns the whole script call of one Allow of key.
func baselineArgs(lim *Limiter, key string) []interface{} {
	c := &call{keys: lim.appendKeys(nil, storedKey(key)), unit: true}
	return appendScriptCall(nil, lim.batch.script, false, false, []*call{c}, lim.batch.ruleArgs)
}

func goRedisBaseline(ctx context.Context, c redis.UniversalClient, args []interface{}) {
	pipe := c.Pipeline()
	_ = pipe.Process(ctx, redis.NewIntSliceCmd(ctx, args...))
	_, _ = pipe.Exec(ctx)
}

func newBench(b *testing.B, c redis.UniversalClient, rules []Rule) *Limiter {
	lim, err := NewPolicy(c, rules, WithPrefix(fmt.Sprintf("bench%d", time.Now().UnixNano())), WithTimeout(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	lim.Allow(context.Background(), "warm") // load the script
	return lim
}
