package core

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

func TestDenyCacheCountsDown(t *testing.T) {
	c := newDenyCache(100, time.Microsecond)
	t0 := time.Unix(1000, 0)
	denied := Result{Rule: "r", RetryAfter: 3 * s, ResetAfter: 10 * s, Rules: []RuleResult{
		{Name: "r", RetryAfter: 3 * s, ResetAfter: 10 * s},
		{Name: "other", Allowed: true, Remaining: 4, ResetAfter: 500 * ms},
	}}
	c.put("k", 2, denied, t0, 0)
	denied.Rules[0].Name = "changed by the caller" // the cache keeps its own copy
	steps := []struct {
		at      time.Duration
		n       int
		hit     bool
		retry   time.Duration
		reset   time.Duration
		other   time.Duration // the other rule's ResetAfter
		comment string
	}{
		{0, 2, true, 3 * s, 10 * s, 500 * ms, "at once"},
		{-ms, 2, true, 3 * s, 10 * s, 500 * ms, "a request begun before the denial was cached: never above Redis's RetryAfter"},
		{s, 2, true, 2 * s, 9 * s, 0, "counted down, never below 0"},
		{s, 1, false, 0, 0, 0, "a smaller cost may fit sooner: Redis decides"},
		{s, 3, true, 2 * s, 9 * s, 0, "a larger cost cannot fit sooner: the same countdown, a lower bound"},
		{2999 * ms, 2, true, ms, 7001 * ms, 0, "the last millisecond"},
		{3 * s, 2, false, 0, 0, 0, "expired"},
	}
	for _, st := range steps {
		r, ok := c.get("k", st.n, t0.Add(st.at))
		if ok != st.hit {
			t.Fatalf("%s: hit=%v", st.comment, ok)
		}
		if ok && (r.Allowed || r.RetryAfter != st.retry || r.ResetAfter != st.reset || r.Rules[0].RetryAfter != st.retry ||
			r.Rules[0].Name != "r" || r.Rules[1].ResetAfter != st.other || r.Rules[1].Remaining != 4) {
			t.Errorf("%s: %+v", st.comment, r)
		}
	}
	if _, ok := c.get("other-key", 2, t0); ok {
		t.Error("a key never denied hit the cache")
	}
	// The cached Rules are copies: changing an answer changes no other.
	r1, _ := c.get("k", 2, t0)
	r1.Rules[0].Name = "changed"
	if r2, _ := c.get("k", 2, t0); r2.Rules[0].Name != "r" {
		t.Error("cached results share their Rules")
	}
}

// The entry keeps the smallest cost denied: it answers every larger one.
func TestDenyCacheKeepsTheSmallestCost(t *testing.T) {
	c := newDenyCache(100, time.Microsecond)
	t0 := time.Unix(1000, 0)
	c.put("k", 3, Result{RetryAfter: 5 * s}, t0, 0)
	c.put("k", 5, Result{RetryAfter: 9 * s}, t0, 0) // answered by the entry of 3: kept
	if r, ok := c.get("k", 5, t0); !ok || r.RetryAfter != 5*s {
		t.Errorf("cost 5 after denials of 3 and 5: %+v %v; want the entry of cost 3", r, ok)
	}
	c.put("k", 1, Result{RetryAfter: 2 * s}, t0, 0) // answers more: replaces
	for _, n := range []int{1, 2, 3, 5} {
		if r, ok := c.get("k", n, t0); !ok || r.RetryAfter != 2*s {
			t.Errorf("cost %d after a denial of 1: %+v %v; want the entry of cost 1", n, r, ok)
		}
	}
}

func TestDenyCacheIsBounded(t *testing.T) {
	t0 := time.Unix(1000, 0)
	denied := Result{RetryAfter: s}
	// fewer than the shards, one per shard, and more
	for _, size := range []int{1, 4, denyShards - 1, denyShards, 3*denyShards + 5} {
		c := newDenyCache(size, time.Microsecond)
		for i := 0; i < 1000; i++ {
			c.put(fmt.Sprint(i), 1, denied, t0, 0)
		}
		total := 0
		for i := range c.shards {
			total += len(c.shards[i].entries)
		}
		if total > size {
			t.Errorf("%d entries in a cache of %d", total, size)
		}
	}
	c := newDenyCache(denyShards, time.Microsecond)
	// Expired entries make room.
	c.put("late", 1, denied, t0.Add(2*s), 0)
	if _, ok := c.get("late", 1, t0.Add(2*s)); !ok {
		t.Error("an expired entry did not make room")
	}
}

// A flood far above the limit sends at most 0.05 scripts per request.
func TestDenyCacheSparesRedis(t *testing.T) {
	c := redistest.Client(t)
	var mu sync.Mutex
	scripts, cached := 0, 0
	lim := newOn(t, c, TokenBucket, PerMinute(10), WithPrefix(fmt.Sprintf("flood-%d", time.Now().UnixNano())),
		WithDenyCache(1000), WithObserver(func(e Event) {
			mu.Lock()
			defer mu.Unlock()
			if e.Cached {
				cached++
			} else {
				scripts++
			}
		}))
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := 0; g < 20; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			prev := time.Hour
			for i := 0; i < 100; i++ {
				r, err := lim.AllowN(ctx, "flooded", 1+(g+i)%2) // costs of 1 and 2, mixed
				if err != nil {
					t.Error(err)
					return
				}
				if r.Allowed {
					continue
				}
				// Counting down, but for one step: when a denial of cost 1
				// replaces an entry of cost 2, its wait (which is the same
				// moment: the time one more event needs) is counted from
				// its own request, a request's latency apart. (A second
				// allows for that latency on a loaded machine; the waits
				// are 6s apart.)
				if r.RetryAfter <= 0 || r.RetryAfter > prev+time.Second {
					t.Errorf("RetryAfter %s after %s: not counting down", r.RetryAfter, prev)
				}
				prev = r.RetryAfter
			}
		}(g)
	}
	wg.Wait()
	requests := scripts + cached
	if requests != 2000 {
		t.Fatalf("%d events for 2000 requests", requests)
	}
	if ratio := float64(scripts) / float64(requests); ratio > 0.05 {
		t.Errorf("%d scripts for %d requests (%.3f per request), want at most 0.05", scripts, requests, ratio)
	}
	t.Logf("flood of 2000 requests on one key (10/min, costs 1 and 2): %d scripts, %d answered from the deny cache", scripts, cached)

	// Reset forgets the denial.
	if err := lim.Reset(ctx, "flooded"); err != nil {
		t.Fatal(err)
	}
	if r, _ := lim.Allow(ctx, "flooded"); !r.Allowed || r.Remaining != 9 {
		t.Errorf("after Reset: %+v", r)
	}
}

// pipelineGate is a go-redis hook that, once armed, lets the next pipeline
// holding an EVALSHA run in Redis and then holds its answer until opened.
type pipelineGate struct {
	pipelineOnly
	armed    chan struct{} // closed: the next EVALSHA pipeline is held
	executed chan struct{} // closed when the held pipeline has run in Redis
	open     chan struct{} // closed: the held pipeline's answer goes on
	taken    bool
}

func (g *pipelineGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		select {
		case <-g.armed:
		default:
			return err
		}
		if g.taken || len(cmds) == 0 || !strings.EqualFold(cmds[0].Name(), "evalsha") {
			return err
		}
		g.taken = true
		close(g.executed)
		<-g.open
		return err
	}
}

// The deny cache's documentation: "this limiter's own Reset clears its
// entry". A denial that Redis made before the Reset but that reaches the
// limiter after it is cached all the same, and then answers for RetryAfter
// (an hour here) although Redis, reset, would admit.
func TestDenyCacheAfterOwnReset(t *testing.T) {
	prefix := fmt.Sprintf("denyreset-%d", time.Now().UnixNano())
	ctx := context.Background()
	// Another instance of the same limiter uses up the key.
	other := newOn(t, redistest.Client(t), FixedWindow, PerHour(1), WithPrefix(prefix))
	if r, err := other.Allow(ctx, "k"); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	c := redistest.Client(t)
	gate := &pipelineGate{armed: make(chan struct{}), executed: make(chan struct{}), open: make(chan struct{})}
	c.AddHook(gate)
	lim := newOn(t, c, FixedWindow, PerHour(1), WithPrefix(prefix), WithDenyCache(100))
	viaFlushers(lim.batch)
	close(gate.armed)

	denied := make(chan Result, 1)
	go func() {
		r, _ := lim.Allow(ctx, "k") // denied in Redis, answer held by the gate
		denied <- r
	}()
	<-gate.executed
	if err := lim.Reset(ctx, "k"); err != nil { // rides the second flusher
		t.Fatal(err)
	}
	close(gate.open)
	if r := <-denied; r.Allowed {
		t.Fatalf("the held request: %+v, want the denial Redis made before the Reset", r)
	}
	// Reset has returned: Redis holds nothing for k.
	if n := c.Exists(ctx, lim.keys("k")[0]).Val(); n != 0 {
		t.Fatalf("the key survived Reset")
	}
	r, err := lim.Allow(ctx, "k")
	if err != nil || !r.Allowed {
		t.Errorf("after Reset returned: %+v %v; the deny cache answered a denial Redis would not give", r, err)
	}
}

// On a limit that Redis decides in milliseconds (a bucket that takes more
// than 2^50 µs to refill), a denial's RetryAfter counts from the start of
// Redis's millisecond, up to a millisecond before the request reached it:
// the cache must not deny past the moment Redis admits again.
func TestDenyCacheEndsByRedisMillisecond(t *testing.T) {
	client := redistest.Client(t)
	ctx := context.Background()
	lim := Limit{Rate: 3, Period: 100 * time.Millisecond, Burst: 12_000_000_000}
	var last Event
	prefix := WithPrefix(fmt.Sprintf("deny-ms-%d", time.Now().UnixNano()))
	l := newOn(t, client, GCRA, lim, WithDenyCache(100), prefix, WithObserver(func(e Event) { last = e }))
	plain := newOn(t, client, GCRA, lim, prefix) // the same state, no cache
	if l.rules[0].tick != 1000 {
		t.Fatalf("tick %dµs: the test needs a limit decided in milliseconds", l.rules[0].tick)
	}
	for round := range 20 {
		key := fmt.Sprint("k", round)
		if r, err := l.AllowN(ctx, key, lim.Burst); err != nil || !r.Allowed {
			t.Fatalf("burst: %+v %v", r, err)
		}
		r, err := l.Allow(ctx, key)
		if err != nil || r.Allowed || last.Cached {
			t.Fatalf("want a denial from Redis: %+v %v (cached %v)", r, err, last.Cached)
		}
		for { // until Redis itself would admit one event
			p, err := plain.Peek(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if p.Allowed {
				break
			}
			time.Sleep(p.RetryAfter / 2)
		}
		if r, err := l.Allow(ctx, key); err != nil || !r.Allowed {
			t.Fatalf("round %d: Redis admits, the limiter answered %+v %v (cached %v)", round, r, err, last.Cached)
		}
	}
}

// A rule that denied and whose own wait is over in a cached answer has at
// least the denied cost left: its Remaining says so, a lower bound, as the
// other rules' are.
func TestDenyCacheRuleWaitOverHasTheCostLeft(t *testing.T) {
	c := newDenyCache(100, time.Microsecond)
	t0 := time.Unix(1000, 0)
	denied := Result{Rule: "minute", RetryAfter: time.Minute, Rules: []RuleResult{
		{Name: "second", RetryAfter: time.Second, ResetAfter: time.Second},
		{Name: "minute", RetryAfter: time.Minute, ResetAfter: time.Minute},
	}}
	c.put("k", 2, denied, t0, 0)
	res, ok := c.get("k", 2, t0.Add(1500*time.Millisecond))
	if !ok {
		t.Fatal("no cached answer within the minute")
	}
	if rr := res.Rules[0]; !rr.Allowed || rr.Remaining < 2 {
		t.Errorf("the second's rule, its wait over: %+v; want allowed with at least the cost, 2, left", rr)
	}
}
