package bench

import (
	"context"
	"fmt"
	"strings"
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

// TestMemoryPerKey measures what one limited key costs in Redis: a fresh
// key takes a whole burst, Rate requests of one event each (sluice) or
// one request of Rate events (the peers, whose state does not depend on
// how the events came), and then every Redis key the library wrote for it
// is weighed with MEMORY USAGE (SAMPLES 0: exact; it includes the key's
// name and Redis's own overhead for it). A key with a rate of 100 and one
// of 1000 show what grows with the rate: only SlidingWindowLog's sorted
// set, one member per request.
//
// It prints one line per library, algorithm and rate:
//
//	memory: name=sluice_gcra rate=100 keys=1 bytes=... encoding=... ttl=...
//
// which cmd/report gathers into a table.
func TestMemoryPerKey(t *testing.T) {
	ctx := context.Background()
	rdb := newClient()
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	type contender struct {
		name  string
		allow func(key string, r int) error
	}
	var cs []contender
	for _, alg := range core.Algorithms() {
		cs = append(cs, contender{"sluice_" + string(alg), func(key string, r int) error {
			l, err := core.New(rdb, alg, core.PerMinute(r))
			if err != nil {
				return err
			}
			return allowEach(l, key, r)
		}})
	}
	cs = append(cs,
		contender{"sluice_policy", func(key string, r int) error {
			l, err := core.NewPolicy(rdb, []core.Rule{
				{Name: "burst", Algorithm: core.GCRA, Limit: core.PerMinute(r)},
				{Name: "quota", Algorithm: core.FixedWindow, Limit: core.PerHour(10 * r)},
			})
			if err != nil {
				return err
			}
			return allowEach(l, key, r)
		}},
		contender{"redis_rate", func(key string, r int) error {
			_, err := redis_rate.NewLimiter(rdb).AllowN(ctx, key, redis_rate.PerMinute(r), r)
			return err
		}},
		contender{"ulule", func(key string, r int) error {
			store, err := ulredis.NewStoreWithOptions(rdb, limiter.StoreOptions{Prefix: "ulule"})
			if err != nil {
				return err
			}
			_, err = limiter.New(store, limiter.Rate{Period: time.Minute, Limit: int64(r)}).Increment(ctx, key, int64(r))
			return err
		}},
		contender{"throttled", func(key string, r int) error {
			store, err := goredisstore.NewCtx(rdb, "throttled:")
			if err != nil {
				return err
			}
			l, err := throttled.NewGCRARateLimiterCtx(store, throttled.RateQuota{MaxRate: throttled.PerMin(r), MaxBurst: r - 1})
			if err != nil {
				return err
			}
			_, _, err = l.RateLimitCtx(ctx, key, r)
			return err
		}},
	)
	// Short user keys, as a user ID would be, fresh on every run even on a
	// shared REDIS_URL; the key name counts in MEMORY USAGE.
	run := uint16(time.Now().UnixNano() >> 20)
	i := 0
	for _, r := range []int{100, 1000} {
		for _, c := range cs {
			i++
			key := fmt.Sprintf("k%04x%02d", run, i)
			if err := c.allow(key, r); err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			var found []string
			for _, pattern := range []string{"*:" + key, "*{" + key + "}*"} { // peers: "<prefix>:<key>"; sluice: a hash tag
				ks, err := scanKeys(ctx, rdb, pattern)
				if err != nil {
					t.Fatal(err)
				}
				found = append(found, ks...)
			}
			if len(found) == 0 {
				t.Fatalf("%s wrote no key matching %q", c.name, key)
			}
			var total int64
			var encodings, ttls []string
			for _, k := range found {
				n, err := rdb.MemoryUsage(ctx, k, 0).Result()
				if err != nil {
					t.Fatalf("MEMORY USAGE %s: %v", k, err)
				}
				total += n
				enc, _ := rdb.ObjectEncoding(ctx, k).Result()
				encodings = append(encodings, enc)
				ttl, _ := rdb.PTTL(ctx, k).Result()
				ttls = append(ttls, ttl.Round(time.Second).String())
			}
			fmt.Printf("memory: name=%s rate=%d keys=%d bytes=%d encoding=%s ttl=%s\n",
				c.name, r, len(found), total, strings.Join(encodings, "+"), strings.Join(ttls, "+"))
			if err := rdb.Del(ctx, found...).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func scanKeys(ctx context.Context, rdb *redis.Client, match string) ([]string, error) {
	var out []string
	var cursor uint64
	for {
		ks, next, err := rdb.Scan(ctx, cursor, match, 1000).Result()
		if err != nil {
			return nil, err
		}
		out = append(out, ks...)
		if cursor = next; cursor == 0 {
			return out, nil
		}
	}
}

// allowEach makes n requests of one event each for key.
func allowEach(l *core.Limiter, key string, n int) error {
	for range n {
		if _, err := l.Allow(context.Background(), key); err != nil {
			return err
		}
	}
	return nil
}
