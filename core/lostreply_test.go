package core

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// A decision whose reply is lost after the script ran (the connection is
// closed, reset, or hangs until the read times out) fails; it is never sent
// again, by go-redis's retries (MaxRetries, 3 by default) or by sluice: each
// decision counts once at Redis. Every path is covered: the batcher's
// pipelines (a default client), the inline send (ContextTimeoutEnabled),
// and a Ring (one script call per decision, through its shard's client).
func TestLostReplyCountsOnce(t *testing.T) {
	modes := []struct {
		name string
		mode redistest.LostMode
	}{
		{"close", redistest.LostClose},
		{"reset", redistest.LostReset},
		{"hang", redistest.LostHang},
	}
	clients := []struct {
		name   string
		inline bool
		new    func(p *redistest.Proxy) redis.UniversalClient
	}{
		{"client", false, func(p *redistest.Proxy) redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: p.Addr, ReadTimeout: 300 * time.Millisecond})
		}},
		{"inline", true, func(p *redistest.Proxy) redis.UniversalClient {
			return redis.NewClient(&redis.Options{Addr: p.Addr, ContextTimeoutEnabled: true, ReadTimeout: 300 * time.Millisecond})
		}},
		{"ring", false, func(p *redistest.Proxy) redis.UniversalClient {
			return redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"one": p.Addr}, ReadTimeout: 300 * time.Millisecond})
		}},
	}
	for _, cl := range clients {
		for _, m := range modes {
			t.Run(cl.name+"/"+m.name, func(t *testing.T) {
				p := redistest.StartProxy(t, redistest.Options(t).Addr)
				c := cl.new(p)
				defer c.Close()
				lim := newOn(t, c, FixedWindow, PerHour(1000), WithTimeout(2*time.Second),
					WithHealthCheck(0, 0), WithPrefix(fmt.Sprintf("lost-%s-%s-%d", cl.name, m.name, time.Now().UnixNano())))
				if lim.batch.inline != cl.inline {
					t.Fatalf("inline path: %v, want %v", lim.batch.inline, cl.inline)
				}
				ctx := context.Background()
				loadScript(t, c)
				const decisions = 6
				failed := 0
				for i := 0; i < decisions; i++ {
					p.LoseReplies(1, m.mode, "evalsha")
					if _, err := lim.Allow(ctx, "k"); err != nil {
						failed++
					}
				}
				v, err := redistest.Client(t).Get(ctx, lim.keys("k")[0]).Result()
				if err != nil {
					t.Fatal(err)
				}
				if n := fwCount(v); n != decisions || failed != decisions {
					t.Errorf("%d decisions, each reply lost once (%d lost by the proxy): Redis counted %d, %d failed; want %d counted, all failed",
						decisions, p.Lost(), n, failed, decisions)
				}
			})
		}
	}
}

// With replies lost now and then, a limit of 5 admits at most 5: a
// decision whose reply was lost and that ran again would count twice, but a
// decision answered admitted must never be one that Redis did not count.
// Lost decisions count (they ran), so fewer than 5 are admitted; never more.
func TestLostRepliesNeverOverAdmit(t *testing.T) {
	p := redistest.StartProxy(t, redistest.Options(t).Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr, ReadTimeout: 300 * time.Millisecond})
	defer c.Close()
	lim := newOn(t, c, FixedWindow, PerHour(5), WithTimeout(2*time.Second), WithHealthCheck(0, 0),
		WithFailureMode(FailClosed), WithPrefix(fmt.Sprintf("lost-over-%d", time.Now().UnixNano())))
	ctx := context.Background()
	loadScript(t, c)
	admitted, failed := 0, 0
	for i := 0; i < 20; i++ {
		if i%2 == 0 {
			p.LoseReplies(1, redistest.LostMode(i/2%3), "evalsha")
		}
		r, err := lim.Allow(ctx, "k")
		switch {
		case err != nil:
			failed++
		case r.Allowed:
			admitted++
		}
	}
	v, err := c.Get(ctx, lim.keys("k")[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	if n := fwCount(v); admitted > 5 || n < int64(admitted) {
		t.Errorf("limit 5, 20 decisions, %d replies lost: %d admitted, %d failed, Redis counted %d", p.Lost(), admitted, failed, n)
	}
	if failed != 10 {
		t.Errorf("%d decisions failed; want the 10 whose replies were lost", failed)
	}
}

// The same through a ClusterClient, whose pipelines and commands go
// through go-redis's cluster code (its own MOVED/ASK and retry loops):
// every connection to every node passes the proxy (Dial).
func TestLostReplyCountsOnceOnCluster(t *testing.T) {
	cl := redistest.StartCluster(t)
	direct := cl.Client(t)
	modes := []struct {
		name string
		mode redistest.LostMode
	}{
		{"close", redistest.LostClose},
		{"hang", redistest.LostHang},
	}
	for _, inline := range []bool{false, true} {
		for _, m := range modes {
			t.Run(fmt.Sprintf("inline=%v/%s", inline, m.name), func(t *testing.T) {
				p := redistest.StartProxy(t, cl.Nodes[0].Addr)
				c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), Dialer: p.Dial,
					ContextTimeoutEnabled: inline, ReadTimeout: 300 * time.Millisecond})
				defer c.Close()
				lim := newOn(t, c, FixedWindow, PerHour(1000), WithTimeout(2*time.Second), WithHealthCheck(0, 0),
					WithPrefix(fmt.Sprintf("lost-cluster-%s-%v-%d", m.name, inline, time.Now().UnixNano())))
				ctx := context.Background()
				if _, err := lim.Allow(ctx, "k"); err != nil { // the topology and the script, loaded
					t.Fatal(err)
				}
				const decisions = 6
				failed := 0
				for i := 0; i < decisions; i++ {
					p.LoseReplies(1, m.mode, "evalsha")
					if _, err := lim.Allow(ctx, "k"); err != nil {
						failed++
					}
				}
				v, err := direct.Get(ctx, lim.keys("k")[0]).Result()
				if err != nil {
					t.Fatal(err)
				}
				if n := fwCount(v); n != 1+decisions || failed != decisions {
					t.Errorf("1 decision, then %d each with its reply lost (%d lost by the proxy): Redis counted %d, %d failed; want %d counted, %d failed",
						decisions, p.Lost(), n, failed, 1+decisions, decisions)
				}
			})
		}
	}
}
