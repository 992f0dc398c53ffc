package core_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestSentinelFailover runs a limiter on a redis.NewFailoverClient while the
// sentinel fails the master over to its replica (SENTINEL FAILOVER). Calls
// may fail only from the failover's start until the limiter gets through
// again once the sentinel names the new master; afterwards a fresh key
// admits exactly its limit under every algorithm, and its state is on the
// new master, not the old one.
//
// Sentinel failover is asynchronous: what the old master admitted after
// the replica took over is lost, so the load keys' counts across the
// failover are logged, not asserted.
func TestSentinelFailover(t *testing.T) {
	start := time.Now()
	s := redistest.StartSentinel(t)
	t.Logf("master, replica and sentinel ready in %s", time.Since(start).Round(time.Millisecond))
	ctx := context.Background()
	c := s.Client(t)
	oldMaster, newMaster := s.Master.Addr, s.Replica.Addr

	const limit = 150 // of each load key
	rules := []core.Rule{
		{Name: "tokens", Algorithm: core.TokenBucket, Limit: core.PerDay(limit)},
		{Name: "log", Algorithm: core.SlidingWindowLog, Limit: core.PerDay(limit + 20)},
		{Name: "gcra", Algorithm: core.GCRA, Limit: core.PerDay(limit + 10)},
	}
	prefix := fmt.Sprintf("sentinel-%d", time.Now().UnixNano())
	lim, err := core.NewPolicy(c, rules, core.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 40)
	for i := range keys {
		keys[i] = fmt.Sprintf("load-%d", i)
	}
	// The second half of the keys is decided from the failover's start,
	// so admissions are under way while it runs.
	load := newFailoverLoad(keys)
	load.active.Store(20)
	const loadGoroutines = 16
	stop := load.start(lim, loadGoroutines)
	defer stop()

	if err := load.waitSuccesses(1000, time.Time{}, 20*time.Second); err != nil {
		t.Fatalf("before the failover: %v", err)
	}
	admittedBefore := load.admittedTotal()
	t0 := time.Now()
	load.active.Store(int64(len(keys)))
	if err := s.SentinelClient(t).Failover(ctx, s.MasterName).Err(); err != nil {
		if !strings.HasPrefix(err.Error(), "INPROG") {
			t.Fatalf("SENTINEL FAILOVER %s: %v", s.MasterName, err)
		}
		t.Logf("SENTINEL FAILOVER: %v: the sentinel had started one of its own", err)
	}
	if err := s.WaitMaster(ctx, newMaster); err != nil {
		t.Fatalf("failover to %s: %v", newMaster, err)
	}
	switched := time.Now()
	admittedDuring := load.admittedTotal() - admittedBefore
	if err := load.waitSuccesses(1000, switched, 30*time.Second); err != nil {
		t.Fatalf("after the failover: %v", err)
	}
	// The failover client learns of the new master from the sentinel's
	// +switch-master message: wait until its writes land there.
	if err := sentinelWaitWritesOn(ctx, c, s.Node(newMaster), 10*time.Second); err != nil {
		t.Fatal(err)
	}
	stop()

	t.Logf("failover of %s to %s: %s until the sentinel named the new master; %d admitted meanwhile",
		oldMaster, newMaster, switched.Sub(t0).Round(time.Millisecond), admittedDuring)
	// When the failover client learns of the new master, it closes its
	// connections to the old one, calls in flight on them included: their
	// replies are lost, and as the script may have run they are errors,
	// never sent again (a pipeline's write too: other script calls of it
	// may have gone out whole). At most one per load goroutine; nothing
	// else.
	lostReply := func(err error) bool {
		var op *net.OpError
		return errors.As(err, &op) && (op.Op == "read" || op.Op == "set" || op.Op == "write") && errors.Is(err, net.ErrClosed)
	}
	load.checkErrorsBut(t, t0, switched, lostReply, loadGoroutines)
	over, excess, most := 0, int64(0), int64(0)
	for k := range keys {
		if a := load.admitted[k].Load(); a > limit {
			over++
			excess += a - limit
			most = max(most, a)
		}
	}
	t.Logf("%d of %d load keys admitted more than their limit of %d across the failover (%d admissions in excess, at most %d for one key): what the old master admitted after the promotion was lost",
		over, len(keys), limit, excess, most)

	freshPrefix := prefix + "-fresh"
	for _, alg := range core.Algorithms() {
		t.Run("fresh-"+string(alg), func(t *testing.T) {
			if alg == core.FixedWindow || alg == core.SlidingWindowCounter {
				clusterAvoidDayEdge(t, c)
			}
			l, err := core.New(c, alg, core.PerDay(10), core.WithPrefix(freshPrefix))
			if err != nil {
				t.Fatal(err)
			}
			exhaustKey(t, ctx, l, "fresh", 10)
		})
	}
	onNew := sentinelKeys(t, s.Node(newMaster), freshPrefix)
	if len(onNew) != len(core.Algorithms()) {
		t.Errorf("new master %s holds %d keys of the fresh key, want %d: %v", newMaster, len(onNew), len(core.Algorithms()), onNew)
	}
	for _, k := range onNew {
		if ttl, err := s.Node(newMaster).PTTL(ctx, k).Result(); err != nil || ttl <= 0 || ttl > 48*time.Hour {
			t.Errorf("key %q: TTL %s (%v)", k, ttl, err)
		}
	}
	// Until the sentinel turns the old master into a replica (some seconds
	// later), it still takes writes: none of the fresh key's may be there.
	// Once it is a replica, it holds copies, and refuses writes anyway.
	if r, err := s.Role(ctx, oldMaster); err != nil || r != "master" {
		t.Logf("the old master %s is now %q (%v)", oldMaster, r, err)
	} else if onOld := sentinelKeys(t, s.Node(oldMaster), freshPrefix); len(onOld) != 0 {
		t.Errorf("the old master %s holds keys of the fresh key: %v", oldMaster, onOld)
	}
}

// sentinelWaitWritesOn waits until a value written through c can be read
// from master.
func sentinelWaitWritesOn(ctx context.Context, c, master *redis.Client, timeout time.Duration) error {
	key := fmt.Sprintf("sentinel-probe-%d", time.Now().UnixNano())
	deadline := time.Now().Add(timeout)
	for i := 0; ; i++ {
		want := strconv.Itoa(i)
		err := c.Set(ctx, key, want, time.Minute).Err()
		if err == nil {
			if got, _ := master.Get(ctx, key).Result(); got == want {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("writes through the failover client did not reach %s within %s (last error %v)", master.Options().Addr, timeout, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// sentinelKeys returns the keys under prefix on one server.
func sentinelKeys(t *testing.T, node *redis.Client, prefix string) []string {
	t.Helper()
	keys, err := node.Keys(context.Background(), prefix+":*").Result()
	if err != nil {
		t.Fatalf("KEYS on %s: %v", node.Options().Addr, err)
	}
	return keys
}
