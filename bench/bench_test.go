package bench

import (
	"context"
	"flag"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/throttled/throttled/v2"
	goredisstore "github.com/throttled/throttled/v2/store/goredisstore.v9"
	"github.com/ulule/limiter/v3"
	ulredis "github.com/ulule/limiter/v3/drivers/store/redis"

	"github.com/sluicehq/sluice/core"
)

// rate is the limit of every library: rate events per second per key, with
// a burst of rate. Spread over numKeys keys, no benchmark comes near it, and
// a per-second period keeps SlidingWindowLog's sorted sets small (they hold
// one member per event of the trailing period).
const rate = 1_000_000

// library is one contender of BenchmarkAllow: setup builds its limiter on
// rdb (a client of its own, with clientOptions) once per library.
type library struct {
	name  string
	setup func(b *testing.B, rdb redis.UniversalClient) func() decider
	// client, when set, changes the library's clientOptions: a variant that
	// the table names as such.
	client func(*redis.Options)
}

// libraries are the contenders, in the order of the tables and the chart.
func libraries() []library {
	var libs []library
	for _, alg := range core.Algorithms() {
		libs = append(libs, library{name: "sluice_" + string(alg), setup: func(b *testing.B, rdb redis.UniversalClient) func() decider {
			return sluiceDecider(b, rdb, []core.Rule{{Name: string(alg), Algorithm: alg, Limit: core.Limit{Rate: rate, Period: time.Second}}})
		}})
	}
	libs = append(libs,
		library{name: "sluice_policy", setup: func(b *testing.B, rdb redis.UniversalClient) func() decider {
			return sluiceDecider(b, rdb, policy)
		}},
		// sluice GCRA on a client that enforces context deadlines, where a
		// lone caller sends its own decision instead of handing it to a
		// flusher goroutine.
		library{name: "sluice_gcra_ctxtimeout", setup: func(b *testing.B, rdb redis.UniversalClient) func() decider {
			return sluiceDecider(b, rdb, []core.Rule{{Name: string(core.GCRA), Algorithm: core.GCRA, Limit: core.Limit{Rate: rate, Period: time.Second}}})
		}, client: func(o *redis.Options) { o.ContextTimeoutEnabled = true }},
		library{name: "redis_rate", setup: redisRateDecider},
		library{name: "ulule", setup: ululeDecider},
		library{name: "throttled", setup: throttledDecider},
		library{name: "raw_incr", setup: rawIncrDecider},
		library{name: "raw_evalsha", setup: rawEvalShaDecider},
	)
	return libs
}

// policy is the two-rule policy benchmarked as sluice_policy: a per-second
// GCRA for bursts and an hourly fixed-window quota, decided in one script.
var policy = []core.Rule{
	{Name: "burst", Algorithm: core.GCRA, Limit: core.Limit{Rate: rate, Period: time.Second}},
	{Name: "quota", Algorithm: core.FixedWindow, Limit: core.Limit{Rate: 1_000_000_000, Period: time.Hour}},
}

// BenchmarkAllow makes one rate-limit decision per call, for every library
// at every concurrency, each library on a client of its own and each run on
// an empty database.
func BenchmarkAllow(b *testing.B) {
	for _, lib := range libraries() {
		b.Run(lib.name, func(b *testing.B) {
			rdb := newClientWith(lib.client)
			defer rdb.Close()
			newDecider := lib.setup(b, rdb)
			for _, c := range concurrencies {
				b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
					flush(b, rdb)
					runConcurrent(b, c, rdb, newDecider)
				})
			}
		})
	}
}

// sluiceTimeout bounds each sluice decision. sluice's own default
// (core.DefaultTimeout, 100ms) is far shorter than the peers' only bound,
// go-redis's read timeout (5s by default in v9.22): on a loaded machine the
// slowest calls of every library pass 100ms, and only sluice would fail them
// (and then, after three in a row, stop asking Redis for a while). The
// benchmark gives every library the same patience; -sluice.timeout=100ms
// measures the default.
var sluiceTimeout = flag.Duration("sluice.timeout", 5*time.Second, "the WithTimeout of every sluice limiter")

func sluiceDecider(b *testing.B, rdb redis.UniversalClient, rules []core.Rule) func() decider {
	l, err := core.NewPolicy(rdb, rules, core.WithTimeout(*sluiceTimeout))
	if err != nil {
		b.Fatal(err)
	}
	return same(func(ctx context.Context, key string) (bool, error) {
		res, err := l.Allow(ctx, key)
		return res.Allowed, err
	})
}

// redisRateDecider: go-redis/redis_rate v10, GCRA, one EVALSHA per call.
func redisRateDecider(b *testing.B, rdb redis.UniversalClient) func() decider {
	l := redis_rate.NewLimiter(rdb)
	limit := redisRateLimit(core.Limit{Rate: rate, Period: time.Second})
	return same(func(ctx context.Context, key string) (bool, error) {
		res, err := l.Allow(ctx, key, limit)
		if err != nil {
			return false, err
		}
		return res.Allowed > 0, nil
	})
}

// ululeDecider: ulule/limiter v3 with its Redis store, a fixed window
// counted by one EVALSHA per call.
func ululeDecider(b *testing.B, rdb redis.UniversalClient) func() decider {
	l := ululeLimiter(b, rdb, "ulule", core.Limit{Rate: rate, Period: time.Second})
	return same(func(ctx context.Context, key string) (bool, error) {
		res, err := l.Get(ctx, key)
		return !res.Reached, err
	})
}

// throttledDecider: throttled v2's GCRA over its go-redis v9 store, which
// reads the key and the server time in one pipeline and then writes with a
// compare-and-swap script (EVAL): two round trips per decision.
func throttledDecider(b *testing.B, rdb redis.UniversalClient) func() decider {
	store, err := goredisstore.NewCtx(rdb, "throttled:")
	if err != nil {
		b.Fatal(err)
	}
	l, err := throttled.NewGCRARateLimiterCtx(store, throttled.RateQuota{MaxRate: throttled.PerSec(rate), MaxBurst: rate - 1})
	if err != nil {
		b.Fatal(err)
	}
	return same(func(ctx context.Context, key string) (bool, error) {
		limited, _, err := l.RateLimitCtx(ctx, key, 1)
		return !limited, err
	})
}

// redisRateLimit is l as redis_rate's limit, with a burst of its rate.
func redisRateLimit(l core.Limit) redis_rate.Limit {
	return redis_rate.Limit{Rate: l.Rate, Period: l.Period, Burst: l.Rate}
}

// ululeLimiter is an ulule/limiter v3 limiter of l over its Redis store,
// its keys under prefix.
func ululeLimiter(b *testing.B, rdb redis.UniversalClient, prefix string, l core.Limit) *limiter.Limiter {
	store, err := ulredis.NewStoreWithOptions(rdb, limiter.StoreOptions{Prefix: prefix})
	if err != nil {
		b.Fatal(err)
	}
	return limiter.New(store, limiter.Rate{Period: l.Period, Limit: int64(l.Rate)})
}

// twoLimitPeers decide what sluice_policy decides, the limits of policy's
// two rules, with a peer library: two limiters, asked one after the other
// (the quota only when the first admits), two round trips per decision,
// and neither all or nothing. They run in BenchmarkTurns only, where the
// report compares sluice_policy with the better of them.
func twoLimitPeers() []library {
	return []library{
		{name: "redis_rate_two", setup: func(b *testing.B, rdb redis.UniversalClient) func() decider {
			l := redis_rate.NewLimiter(rdb)
			perSecond, quota := redisRateLimit(policy[0].Limit), redisRateLimit(policy[1].Limit)
			return same(func(ctx context.Context, key string) (bool, error) {
				res, err := l.Allow(ctx, key, perSecond)
				if err != nil || res.Allowed == 0 {
					return false, err
				}
				res, err = l.Allow(ctx, "quota:"+key, quota)
				return err == nil && res.Allowed > 0, err
			})
		}},
		{name: "ulule_two", setup: func(b *testing.B, rdb redis.UniversalClient) func() decider {
			perSecond := ululeLimiter(b, rdb, "ulule", policy[0].Limit)
			quota := ululeLimiter(b, rdb, "ulule_quota", policy[1].Limit)
			return same(func(ctx context.Context, key string) (bool, error) {
				res, err := perSecond.Get(ctx, key)
				if err != nil || res.Reached {
					return false, err
				}
				res, err = quota.Get(ctx, key)
				return err == nil && !res.Reached, err
			})
		}},
	}
}

// rawIncrDecider is a reference, not a rate limiter: one INCR per call, the
// cheapest thing a decision could possibly cost in round trips.
func rawIncrDecider(b *testing.B, rdb redis.UniversalClient) func() decider {
	return same(func(ctx context.Context, key string) (bool, error) {
		return true, rdb.Incr(ctx, key).Err()
	})
}

// rawEvalShaDecider is a reference: one EVALSHA of a one-line INCR script
// per call, the floor of any one-script-per-decision limiter.
func rawEvalShaDecider(b *testing.B, rdb redis.UniversalClient) func() decider {
	sha, err := rdb.ScriptLoad(context.Background(), "return redis.call('INCR', KEYS[1])").Result()
	if err != nil {
		b.Fatal(err)
	}
	return same(func(ctx context.Context, key string) (bool, error) {
		return true, rdb.EvalSha(ctx, sha, []string{key}).Err()
	})
}

// BenchmarkPipelinedEvalSha is a reference for sluice's batcher: what Redis
// and go-redis can do when decisions are pipelined and the script is
// trivial. GOMAXPROCS goroutines send pipelines of batch EVALSHAs of the
// one-line INCR script until b.N have been sent; every EVALSHA counts as a
// decision. Callers waiting for their own results, as with a real limiter,
// can only be slower.
func BenchmarkPipelinedEvalSha(b *testing.B) {
	rdb := newClient()
	defer rdb.Close()
	ctx := context.Background()
	sha, err := rdb.ScriptLoad(ctx, "return redis.call('INCR', KEYS[1])").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, batch := range []int{32, 128} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			flush(b, rdb)
			b.ReportAllocs()
			before := statsOf(b, rdb)
			cpu0 := processCPU()
			var next atomic.Int64
			errs := make(chan error, runtime.GOMAXPROCS(0))
			b.ResetTimer()
			for range cap(errs) {
				go func() {
					var err error
					for err == nil {
						end := next.Add(int64(batch))
						start := end - int64(batch)
						if start >= int64(b.N) {
							break
						}
						pipe := rdb.Pipeline()
						for i := start; i < min(end, int64(b.N)); i++ {
							pipe.EvalSha(ctx, sha, []string{keys[i%numKeys]})
						}
						_, err = pipe.Exec(ctx)
					}
					errs <- err
				}()
			}
			for range cap(errs) {
				if err := <-errs; err != nil {
					b.Error(err)
				}
			}
			b.StopTimer()
			after := statsOf(b, rdb)
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			b.ReportMetric((after.cpu-before.cpu)*1e6/float64(b.N), "srv-us/op")
			if calls := after.scriptCalls - before.scriptCalls; calls > 0 {
				b.ReportMetric(float64(after.scriptUsec-before.scriptUsec)/float64(calls), "script-us/call")
			}
			if cpu0 > 0 {
				b.ReportMetric((processCPU()-cpu0)*1e6/float64(b.N), "cli-us/op")
			}
		})
	}
}
