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

// TestRealRedisExactAdmission runs 4 clients × 100 goroutines on one key
// against a real redis-server, flushing the script cache in the middle: every
// algorithm admits exactly its limit, no call fails, and every key it wrote
// has a TTL afterwards.
func TestRealRedisExactAdmission(t *testing.T) {
	clients := make([]*redis.Client, 4)
	for i := range clients {
		clients[i] = redistest.Client(t)
	}
	ctx := context.Background()
	const limit, attempts = 1000, 5 // 400 goroutines × 5 = 2000 attempts for 1000
	for _, alg := range Algorithms() {
		t.Run(string(alg), func(t *testing.T) {
			prefix := fmt.Sprintf("exact-%s-%d", alg, time.Now().UnixNano())
			lims := make([]*Limiter, len(clients))
			for i, c := range clients {
				// This test is about exactness, not latency: on a loaded
				// machine under -race, 400 callers may queue past the
				// default timeout.
				lims[i] = newOn(t, c, alg, PerDay(limit), WithPrefix(prefix), WithTimeout(10*time.Second))
			}
			avoidWindowEdge(t, clients[0], 24*time.Hour)
			var admitted, failed atomic.Int64
			var wg sync.WaitGroup
			for i := 0; i < 400; i++ {
				wg.Add(1)
				go func(lim *Limiter) {
					defer wg.Done()
					for j := 0; j < attempts; j++ {
						r, err := lim.Allow(ctx, "one-key")
						if err != nil {
							failed.Add(1)
							t.Error(err)
							return
						}
						if r.Allowed {
							admitted.Add(1)
						}
					}
				}(lims[i%len(lims)])
				if i == 200 {
					if err := clients[0].ScriptFlush(ctx).Err(); err != nil {
						t.Fatal(err)
					}
				}
			}
			wg.Wait()
			if admitted.Load() != limit || failed.Load() != 0 {
				t.Errorf("admitted %d of %d attempts, %d errors; want exactly %d", admitted.Load(), 400*attempts, failed.Load(), limit)
			}
			keys, err := clients[0].Keys(ctx, prefix+":*").Result()
			if err != nil || len(keys) == 0 {
				t.Fatalf("keys: %v %v", keys, err)
			}
			// The counter also needs the next window, 2 periods; a meter's
			// TTL is its refill (a period here), and the sliding log's the
			// period, each rounded up to the end of a period.
			bound := 24 * time.Hour
			if alg != FixedWindow {
				bound *= 2
			}
			for _, k := range keys {
				if ttl := clients[0].PTTL(ctx, k).Val(); ttl <= 0 || ttl > bound {
					t.Errorf("key %s: TTL %s", k, ttl)
				}
			}
			clients[0].Del(ctx, keys...)
		})
	}
}

// avoidWindowEdge waits out the last seconds of an epoch-aligned window, so
// a test never straddles two fixed windows.
func avoidWindowEdge(t *testing.T, c *redis.Client, period time.Duration) {
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	if left := period - time.Duration(now.UnixNano())%period; left < 10*time.Second {
		time.Sleep(left + 10*time.Millisecond)
	}
}

// In a policy, a FixedWindow rule in the integer form is taken last, with
// INCRBY first (fw_take), once every other rule admits. Under 400
// concurrent callers it admits exactly its limit, and the other rule
// consumes exactly what was admitted: a request the window denies wrote
// nothing anywhere.
func TestRealRedisPolicyTakesItsWindowLast(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	avoidWindowEdge(t, c, 24*time.Hour)
	const limit = 1000
	rules := []Rule{
		{Name: "quota", Algorithm: FixedWindow, Limit: PerDay(limit)},
		{Name: "burst", Algorithm: GCRA, Limit: PerDay(10 * limit)},
	}
	lim, err := NewPolicy(c, rules, WithPrefix(fmt.Sprintf("take-last-%d", time.Now().UnixNano())), WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if admitted := allowFromMany(t, lim, "k", 400, 5); admitted != limit {
		t.Errorf("admitted %d of 2000; want exactly %d", admitted, limit)
	}
	// GCRA refills one event in 8.64s: within the test, its Remaining is
	// what the admitted requests left.
	p, err := lim.Peek(ctx, "k")
	if err != nil || p.Rules[0].Remaining != 0 || p.Rules[1].Remaining != 9*limit {
		t.Errorf("Peek: %+v, %v; want 0 left of the quota and %d of the burst", p, err, 9*limit)
	}
}

func TestRealRedisPolicyAndPeek(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	prefix := fmt.Sprintf("policy-%d", time.Now().UnixNano())
	var rules []Rule
	for i, alg := range Algorithms() {
		rules = append(rules, Rule{Name: fmt.Sprintf("rule%d", i), Algorithm: alg, Limit: PerHour(10 + i)})
	}
	lim, err := NewPolicy(c, rules, WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	r, err := lim.AllowN(ctx, "k", 10)
	if err != nil || !r.Allowed || r.Rule != "rule0" || r.Remaining != 0 || len(r.Rules) != 6 {
		t.Fatalf("%+v %v", r, err)
	}
	for i, rr := range r.Rules {
		if rr.Remaining != i || rr.Name != rules[i].Name {
			t.Errorf("rule %d: %+v", i, rr)
		}
	}
	if r, _ := lim.Allow(ctx, "k"); r.Allowed || r.Rule != "rule0" || r.Rules[5].Remaining != 5 {
		t.Errorf("denied by rule0, nothing consumed: %+v", r)
	}
	if err := lim.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, lim.keys("k")...).Val(); n != 0 {
		t.Errorf("%d keys left after Reset", n)
	}
}
