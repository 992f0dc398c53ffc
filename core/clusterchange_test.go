package core_test

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The tests of this file change a real Redis Cluster while limiters decide
// on it (issue 23): slots move between masters, a master fails over to its
// replica, gracefully or killed, a client's slot map goes stale. Whatever
// the change, every decision counts once: no key admits more than its
// limit, none fewer than its limit minus the calls that failed, and the
// state left in Redis agrees with what was admitted. The one exception
// is Redis's own: a master killed before its replica had its last writes
// loses them (asynchronous replication), and only those may be admitted
// again.
//
// The load (changeLoad) gives each user key a budget of attempts, some
// under the limit and some over it, and releases a third of every budget
// before the change, a third while it runs (as it progresses) and the
// rest after it, so every key is decided before, during and after.

// changeLimit is what each key admits in a test's lifetime: the rules
// are per day, and clusterAvoidDayEdge keeps a test inside one day.
const changeLimit = 12

// changeBudget is how many times key k is tried: once, half its limit,
// one short of it, exactly its limit, three times its limit.
func changeBudget(k int) int64 {
	return [...]int64{1, changeLimit / 2, changeLimit - 1, changeLimit, 3 * changeLimit}[k%5]
}

// changeRules returns a rule of alg admitting changeLimit, and with two
// true, a second rule, a FixedWindow admitting a few more, whose counter
// (checked in Redis afterwards) must then count exactly the admitted
// events: all or nothing across the rules.
func changeRules(alg core.Algorithm, two bool) []core.Rule {
	rules := []core.Rule{{Name: "first", Algorithm: alg, Limit: core.PerDay(changeLimit)}}
	if two {
		rules = append(rules, core.Rule{Name: "window", Algorithm: core.FixedWindow, Limit: core.PerDay(changeLimit + 3)})
	}
	return rules
}

// TestClusterMigration decides on a cluster while slots move between
// masters: 4 cluster clients × 100 goroutines on 400 user keys, half of
// them in the 100 slots moved, with one rule (a meter, and the two
// windows, whose lone loops take first and give back) and with a two-rule
// policy; then a client whose slot map predates a move.
func TestClusterMigration(t *testing.T) {
	start := time.Now()
	cl := redistest.StartCluster(t)
	t.Logf("cluster ready in %s", time.Since(start).Round(time.Millisecond))
	// Each subtest moves slots out of another master than the one before
	// (from the middle of its largest range of slots), so none moves
	// slots another has moved.
	t.Run("GCRA", func(t *testing.T) { testMigrationExact(t, cl, changeRules(core.GCRA, false), 0, 1) })
	t.Run("Policy", func(t *testing.T) { testMigrationExact(t, cl, changeRules(core.TokenBucket, true), 1, 2) })
	t.Run("FixedWindow", func(t *testing.T) { testMigrationExact(t, cl, changeRules(core.FixedWindow, false), 2, 0) })
	t.Run("SlidingWindowCounter", func(t *testing.T) {
		testMigrationExact(t, cl, changeRules(core.SlidingWindowCounter, false), 0, 2)
	})
	t.Run("StaleSlotMap", func(t *testing.T) { testStaleSlotMap(t, cl, 2, 0) })
}

// TestClusterFailoverExact decides on a cluster while a master fails over
// to its replica: gracefully (CLUSTER FAILOVER), then killed once its
// replica has caught up, then killed with no care for its replica. The
// killed masters stay dead.
func TestClusterFailoverExact(t *testing.T) {
	start := time.Now()
	cl := redistest.StartCluster(t)
	t.Logf("cluster ready in %s", time.Since(start).Round(time.Millisecond))
	t.Run("Manual", func(t *testing.T) {
		testFailoverExact(t, cl, changeRules(core.SlidingWindowLog, true), 0, failoverManual)
	})
	t.Run("Killed", func(t *testing.T) { testFailoverExact(t, cl, changeRules(core.GCRA, true), 1, failoverKillCaughtUp) })
	t.Run("KilledLagging", func(t *testing.T) { testFailoverExact(t, cl, changeRules(core.TokenBucket, false), 2, failoverKill) })
}

// failoverMode is how testFailoverExact fails a master over.
type failoverMode int

const (
	// failoverManual: CLUSTER FAILOVER on the replica, which waits until
	// it has every write of its master.
	failoverManual failoverMode = iota
	// failoverKillCaughtUp: the master's writes are paused (CLIENT PAUSE
	// WRITE) until its replica has caught up, as WAIT would make sure,
	// then it is killed and the cluster promotes its replica. Decisions
	// sent meanwhile fail; none admitted by the dead master is missing
	// from the replica, so admission stays exact.
	failoverKillCaughtUp
	// failoverKill: the master is killed under load. Admissions it
	// acknowledged but had not yet sent to its replica are lost (Redis
	// replication is asynchronous), and may be admitted again.
	failoverKill
)

// testMigrationExact moves 100 slots of master shards[from] to
// shards[to] under load and checks every key's admissions and state.
func testMigrationExact(t *testing.T, cl *redistest.Cluster, rules []core.Rule, from, to int) {
	ctx := context.Background()
	shards, err := cl.Shards(ctx)
	if err != nil {
		t.Fatal(err)
	}
	src, dst := shards[from], shards[to]
	slots := changeSlots(t, src, 100)
	inSlots := map[int]bool{}
	for _, s := range slots {
		inSlots[s] = true
	}
	keys, moved := changeKeys(func(slot int) bool { return inSlots[slot] }, 200, 200)
	prefix := fmt.Sprintf("migrate-%d", time.Now().UnixNano())
	load, lims := newChangeLoad(t, cl, rules, prefix, keys, moved)

	redirects := func() [4]int64 {
		return [4]int64{
			changeErrorStat(t, cl, src.Master, "ASK"), changeErrorStat(t, cl, src.Master, "MOVED"),
			changeErrorStat(t, cl, src.Master, "TRYAGAIN"), changeErrorStat(t, cl, dst.Master, "TRYAGAIN"),
		}
	}
	before := redirects()
	stop := load.start(lims, 100*len(lims))
	defer stop()
	t0 := time.Now()
	load.release.Store(333)
	if err := load.waitReleased(60 * time.Second); err != nil {
		t.Fatalf("before the migration: %v", err)
	}
	t1 := time.Now()
	load.phase.Store(1)
	// Tries released as the slots move; the first before any does, so
	// some are under way when the first slot is half moved.
	const chunk = 5
	load.release.Store(333 + 333*chunk/int64(len(slots)))
	for i := 0; i < len(slots); i += chunk {
		if err := cl.MigrateSlots(ctx, src.Master, dst.Master, slots[i:i+chunk]); err != nil {
			t.Fatalf("migrating slots %v from %s to %s: %v", slots[i:i+chunk], src.Master, dst.Master, err)
		}
		load.release.Store(333 + int64(333*min(i+2*chunk, len(slots))/len(slots)))
	}
	t2 := time.Now()
	load.phase.Store(2)
	if err := cl.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	load.release.Store(1000)
	if err := load.waitReleased(60 * time.Second); err != nil {
		t.Fatalf("after the migration: %v", err)
	}
	stop()
	after := redirects()
	t.Logf("load before the migration %s, migration of %d slots %s, after %s; the old master answered ASK %d, MOVED %d, TRYAGAIN %d times, the new one TRYAGAIN %d",
		t1.Sub(t0).Round(time.Millisecond), len(slots), t2.Sub(t1).Round(time.Millisecond), time.Since(t2).Round(time.Millisecond),
		after[0]-before[0], after[1]-before[1], after[2]-before[2], after[3]-before[3])

	for _, s := range []int{slots[0], slots[len(slots)-1]} {
		if sh, err := cl.ShardOf(ctx, s); err != nil || sh.Master != dst.Master {
			t.Errorf("slot %d served by %s (%v) after the migration, want %s", s, sh.Master, err, dst.Master)
		}
	}
	load.check(t, cl, rules, true, false)
	clusterCheckKeys(t, cl, prefix, len(keys), len(rules), 48*time.Hour)
}

// testFailoverExact fails the master of shards[shard] over to its replica
// under load, as mode says, and checks every key's admissions and state.
func testFailoverExact(t *testing.T, cl *redistest.Cluster, rules []core.Rule, shard int, mode failoverMode) {
	ctx := context.Background()
	shards, err := cl.Shards(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sh := shards[shard]
	master, replica := sh.Master, sh.Replicas[0]
	keys, moved := changeKeys(sh.Owns, 200, 200)
	prefix := fmt.Sprintf("failover-exact-%d", time.Now().UnixNano())
	load, lims := newChangeLoad(t, cl, rules, prefix, keys, moved)
	if err := cl.WaitReplicaKnown(ctx, replica); err != nil {
		t.Fatal(err)
	}

	stop := load.start(lims, 100*len(lims))
	defer stop()
	t0 := time.Now()
	load.release.Store(333)
	if err := load.waitReleased(60 * time.Second); err != nil {
		t.Fatalf("before the failover: %v", err)
	}
	t1 := time.Now()
	load.phase.Store(1)
	// Release the middle third over two seconds while the failover runs,
	// a first part at once: a graceful failover may take only tens of
	// milliseconds.
	load.release.Store(333 + 333/8)
	ramp := make(chan struct{})
	var rampDone sync.WaitGroup
	rampDone.Add(1)
	go func() {
		defer rampDone.Done()
		for i := 6; i <= 40; i++ {
			select {
			case <-ramp:
				return
			case <-time.After(50 * time.Millisecond):
			}
			load.release.Store(333 + int64(333*i/40))
		}
	}()
	switch mode {
	case failoverManual:
		err = cl.Failover(ctx, replica)
	case failoverKillCaughtUp:
		err = pauseAndKill(ctx, cl, master, replica)
	case failoverKill:
		err = cl.Kill(master)
	}
	if err == nil && mode != failoverManual {
		err = cl.WaitPromoted(ctx, replica, changeSlotOf(sh))
	}
	close(ramp)
	rampDone.Wait()
	if err != nil {
		t.Fatalf("failover of %s to %s: %v", master, replica, err)
	}
	t2 := time.Now()
	load.phase.Store(2)
	load.release.Store(1000)
	if err := load.waitReleased(60 * time.Second); err != nil {
		t.Fatalf("after the failover: %v", err)
	}
	stop()
	t.Logf("load before the failover %s, failover %s, after %s",
		t1.Sub(t0).Round(time.Millisecond), t2.Sub(t1).Round(time.Millisecond), time.Since(t2).Round(time.Millisecond))
	if r, err := cl.Role(ctx, replica); err != nil || r != "master" {
		t.Errorf("%s has role %q (%v) after the failover, want master", replica, r, err)
	}
	// A killed master's decisions fail until the promotion: errors are
	// many, not rare, then.
	load.check(t, cl, rules, mode == failoverManual, mode == failoverKill)
	if mode != failoverManual {
		// Keys whose every call failed have no state; the health check's
		// probe left a key of its own.
		changeCheckTTLs(t, cl, prefix, 48*time.Hour)
	} else {
		clusterCheckKeys(t, cl, prefix, len(keys), len(rules), 48*time.Hour)
	}
}

// changeCheckTTLs checks that every Redis key under prefix, on every
// master, has a TTL, of at most maxTTL.
func changeCheckTTLs(t *testing.T, cl *redistest.Cluster, prefix string, maxTTL time.Duration) {
	t.Helper()
	ctx := context.Background()
	masters, err := cl.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, m := range masters {
		iter := cl.Node(m).Scan(ctx, 0, prefix+":*", 1000).Iterator()
		for iter.Next(ctx) {
			n++
			// -1: no TTL. (The probe's key lives a second: gone since
			// SCAN, -2, or under a millisecond left, 0, it had one.)
			if ttl, err := cl.Node(m).PTTL(ctx, iter.Val()).Result(); err != nil || ttl == -1 || ttl > maxTTL {
				t.Errorf("key %q: TTL %s (%v), want one of at most %s", iter.Val(), ttl, err, maxTTL)
			}
		}
		if err := iter.Err(); err != nil {
			t.Fatalf("SCAN on %s: %v", m, err)
		}
	}
	if n == 0 {
		t.Errorf("no key under %s", prefix)
	}
}

// pauseAndKill pauses the writes of master (decisions sent to it wait),
// waits until replica has every write master made, and kills master.
// Decisions in flight then fail, having counted nothing the replica does
// not have; those that ran but whose replies the kill lost are counted
// in Redis and failed for the caller.
func pauseAndKill(ctx context.Context, cl *redistest.Cluster, master, replica string) error {
	if err := cl.Node(master).Do(ctx, "CLIENT", "PAUSE", 60000, "WRITE").Err(); err != nil {
		return fmt.Errorf("CLIENT PAUSE on %s: %w", master, err)
	}
	info, err := cl.Node(master).Info(ctx, "replication").Result()
	if err != nil {
		return fmt.Errorf("INFO on %s: %w", master, err)
	}
	want, err := strconv.ParseInt(changeInfoField(info, "master_repl_offset"), 10, 64)
	if err != nil {
		return fmt.Errorf("master_repl_offset of %s: %v", master, err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		info, err := cl.Node(replica).Info(ctx, "replication").Result()
		if err != nil {
			return fmt.Errorf("INFO on %s: %w", replica, err)
		}
		got, _ := strconv.ParseInt(changeInfoField(info, "slave_repl_offset"), 10, 64)
		if got >= want {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("replica %s at offset %d, its master %s at %d", replica, got, master, want)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return cl.Kill(master)
}

// testStaleSlotMap warms a cluster client on keys of 20 slots, moves the
// slots to another master behind its back, and decides on with it: each
// decision follows MOVED and answers as if nothing had moved.
func testStaleSlotMap(t *testing.T, cl *redistest.Cluster, from, to int) {
	ctx := context.Background()
	shards, err := cl.Shards(ctx)
	if err != nil {
		t.Fatal(err)
	}
	src, dst := shards[from], shards[to]
	slots := changeSlots(t, src, 20)
	inSlots := map[int]bool{}
	for _, s := range slots {
		inSlots[s] = true
	}
	keys, _ := changeKeys(func(slot int) bool { return inSlots[slot] }, 60, 0)
	stale := cl.Client(t)
	clusterAvoidDayEdge(t, stale)
	prefix := fmt.Sprintf("stale-%d", time.Now().UnixNano())
	lim, err := core.New(stale, core.TokenBucket, core.PerDay(changeLimit), core.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lim.Close() })
	const warm = 3
	for _, key := range keys {
		for i := 1; i <= warm; i++ {
			if r, err := lim.Allow(ctx, key); err != nil || !r.Allowed || r.Remaining != changeLimit-i {
				t.Fatalf("key %q warm-up call %d: %+v, %v", key, i, r, err)
			}
		}
	}
	movedBefore := changeErrorStat(t, cl, src.Master, "MOVED")
	if err := cl.MigrateSlots(ctx, src.Master, dst.Master, slots); err != nil {
		t.Fatal(err)
	}
	// The client still sends the keys' decisions to the old master.
	if m, err := stale.MasterForKey(ctx, keys[0]); err != nil || m.Options().Addr != src.Master {
		t.Fatalf("the client's slot map was refreshed before it decided (master of %q: %v, %v)", keys[0], m, err)
	}
	var wg sync.WaitGroup
	for _, key := range keys {
		wg.Add(1)
		go func(key string) {
			defer wg.Done()
			for i := warm + 1; i <= changeLimit+2; i++ {
				r, err := lim.Allow(ctx, key)
				if err != nil {
					t.Errorf("key %q call %d after the move: %v", key, i, err)
					return
				}
				if want := i <= changeLimit; r.Allowed != want || (want && r.Remaining != changeLimit-i) {
					t.Errorf("key %q call %d after the move: %+v; want allowed=%v with %d remaining", key, i, r, want, changeLimit-i)
					return
				}
			}
		}(key)
	}
	wg.Wait()
	got := changeErrorStat(t, cl, src.Master, "MOVED")
	t.Logf("%d keys decided %d times each after the move of their %d slots; the old master answered MOVED %d times", len(keys), changeLimit+2-warm, len(slots), got-movedBefore)
	if got <= movedBefore {
		t.Errorf("the old master answered MOVED %d times before the decisions and %d after: the slot map was not stale", movedBefore, got)
	}
	// The replicas learn the slots' new owner by gossip: the keys are
	// counted by master once every node agrees on the masters.
	if err := cl.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	fresh, err := core.New(cl.Client(t), core.TokenBucket, core.PerDay(changeLimit), core.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { fresh.Close() })
	for _, key := range keys {
		if r, err := fresh.Peek(ctx, key); err != nil || r.Allowed || r.Remaining != 0 {
			t.Errorf("key %q: Peek by another client after the move: %+v, %v; want denied", key, r, err)
		}
	}
	if byMaster := clusterCheckKeys(t, cl, prefix, len(keys), 1, 48*time.Hour); byMaster[dst.Master] != len(keys) {
		t.Errorf("keys by master after the move: %v, want all %d on %s", byMaster, len(keys), dst.Master)
	}
}

// changeErrorStat returns how many errors of kind (MOVED, ASK, TRYAGAIN)
// the node at addr has answered (INFO errorstats).
func changeErrorStat(t *testing.T, cl *redistest.Cluster, addr, kind string) int64 {
	t.Helper()
	info, err := cl.Node(addr).Info(context.Background(), "errorstats").Result()
	if err != nil {
		t.Fatalf("INFO errorstats on %s: %v", addr, err)
	}
	v, _ := strings.CutPrefix(changeInfoField(info, "errorstat_"+kind), "count=")
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

func changeInfoField(info, field string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			return v
		}
	}
	return ""
}

// changeSlots returns n consecutive slots from the middle of the largest
// slot range of shard.
func changeSlots(t *testing.T, shard redistest.Shard, n int) []int {
	t.Helper()
	best := shard.Slots[0]
	for _, r := range shard.Slots {
		if r[1]-r[0] > best[1]-best[0] {
			best = r
		}
	}
	if best[1]-best[0]+1 < n {
		t.Fatalf("shard %s has no range of %d slots: %v", shard.Master, n, shard.Slots)
	}
	lo := (best[0] + best[1] - n) / 2
	slots := make([]int, n)
	for i := range slots {
		slots[i] = lo + i
	}
	return slots
}

// changeSlotOf returns a slot the shard serves.
func changeSlotOf(shard redistest.Shard) int { return shard.Slots[0][0] }

// changeKeys returns in user keys whose slots in reports true, then out
// keys whose slots it reports false, and which of them are in.
func changeKeys(in func(slot int) bool, nIn, nOut int) (keys []string, moved []bool) {
	var ins, outs []string
	for i := 0; len(ins) < nIn || len(outs) < nOut; i++ {
		key := "user-" + strconv.Itoa(i)
		if in(redistest.Slot(key)) {
			if len(ins) < nIn {
				ins = append(ins, key)
			}
		} else if len(outs) < nOut {
			outs = append(outs, key)
		}
	}
	keys = append(ins, outs...)
	moved = make([]bool, len(keys))
	for i := range ins {
		moved[i] = true
	}
	return keys, moved
}

// changeLoad runs and records Allow calls on keys, each tried up to its
// budget (changeBudget), as far as release lets.
type changeLoad struct {
	prefix string // of the limiters' keys
	keys   []string
	moved  []bool // keys in the slots or on the master that change
	budget []int64

	release atomic.Int64 // per mille of each budget that may be tried
	phase   atomic.Int32 // 0 before the change, 1 during, 2 after

	tries, admitted, failed []atomic.Int64 // per key
	returned                atomic.Int64   // Allow calls returned
	movedDuring             atomic.Int64   // Allow calls on moved keys begun during the change
	peeks, peekErrs         atomic.Int64

	mu   sync.Mutex
	errs map[string]int // Allow errors by message (the first 80 bytes)
}

// newChangeLoad returns a load on keys and a limiter of rules under
// prefix on each of 4 new cluster clients. It waits out a day's edge.
func newChangeLoad(t *testing.T, cl *redistest.Cluster, rules []core.Rule, prefix string, keys []string, moved []bool) (*changeLoad, []*core.Limiter) {
	t.Helper()
	l := &changeLoad{
		prefix: prefix, keys: keys, moved: moved, budget: make([]int64, len(keys)),
		tries: make([]atomic.Int64, len(keys)), admitted: make([]atomic.Int64, len(keys)), failed: make([]atomic.Int64, len(keys)),
		errs: map[string]int{},
	}
	for k := range keys {
		l.budget[k] = changeBudget(k)
	}
	lims := make([]*core.Limiter, 4)
	for i := range lims {
		c := cl.Client(t)
		if i == 0 {
			clusterAvoidDayEdge(t, c)
		}
		lim, err := core.NewPolicy(c, rules, core.WithPrefix(prefix))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { lim.Close() })
		lims[i] = lim
	}
	return l, lims
}

// released is how many times key k may be tried so far.
func (l *changeLoad) released(k int) int64 { return l.budget[k] * l.release.Load() / 1000 }

// take reserves a try of key k, if one is released.
func (l *changeLoad) take(k int) bool {
	for {
		n := l.tries[k].Load()
		if n >= l.released(k) {
			return false
		}
		if l.tries[k].CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// start runs goroutines, each on limiter g of lims in turn, that try the
// keys round robin; with no try released they Peek, pausing a little, so
// the cluster stays under load. stop waits for them; it may be called
// more than once.
func (l *changeLoad) start(lims []*core.Limiter, goroutines int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			lim := lims[g%len(lims)]
			misses := 0
			for i := g * 7; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				k := i % len(l.keys)
				if !l.take(k) {
					if misses++; misses < len(l.keys) {
						continue
					}
					misses = 0
					l.peeks.Add(1)
					if _, err := lim.Peek(context.Background(), l.keys[k]); err != nil {
						l.peekErrs.Add(1)
					}
					time.Sleep(20 * time.Millisecond)
					continue
				}
				misses = 0
				if l.moved[k] && l.phase.Load() == 1 {
					l.movedDuring.Add(1)
				}
				r, err := lim.Allow(context.Background(), l.keys[k])
				if err != nil {
					l.failed[k].Add(1)
					msg := err.Error()
					if len(msg) > 80 {
						msg = msg[:80]
					}
					l.mu.Lock()
					l.errs[msg]++
					l.mu.Unlock()
				} else if r.Allowed {
					l.admitted[k].Add(1)
				}
				l.returned.Add(1)
			}
		}(g)
	}
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}

// waitReleased waits until every try released so far has returned.
func (l *changeLoad) waitReleased(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var want int64
		for k := range l.keys {
			want += l.released(k)
		}
		got := l.returned.Load()
		if got >= want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d released tries returned within %s", got, want, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// check asserts, for every key, that all of its budget was tried; that
// it admitted at most the limit, and at least min(budget, limit) less its
// failed calls; and that the state in Redis, read by a new client, agrees:
// Peek's Remaining is the limit less what was admitted (less, at most,
// the failed calls, which may have counted: a reply lost after the
// script ran), and a FixedWindow second rule counted exactly the admitted
// events (within the same slack). With rare, failed calls must be at most
// 1% of all.
//
// With lossy (a master killed before its replica had all its writes),
// the moved keys' state may have lost admissions, which are then
// admitted again: for those keys a key may admit more than its limit, by
// no more than the admissions missing from its state (admitted less
// what Redis holds); what Redis holds is still at most the limit and at
// most the calls made. The admissions lost are logged.
func (l *changeLoad) check(t *testing.T, cl *redistest.Cluster, rules []core.Rule, rare, lossy bool) {
	t.Helper()
	ctx := context.Background()
	cc := cl.Client(t)
	peek, err := core.NewPolicy(cc, rules, core.WithPrefix(l.prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer peek.Close()
	windows := map[string]int64{} // user key -> the second rule's count
	if len(rules) == 2 {
		windows = changeWindowCounts(t, cl, cc, l.prefix)
	}
	var total, failed, admitted, lost, excess int64
	bad := 0
	for k, key := range l.keys {
		a, f, b := l.admitted[k].Load(), l.failed[k].Load(), l.budget[k]
		total += l.tries[k].Load()
		failed += f
		admitted += a
		want := min(b, changeLimit)
		var problems []string
		if n := l.tries[k].Load(); n != b {
			problems = append(problems, fmt.Sprintf("tried %d times, want %d", n, b))
		}
		if a+f < want {
			problems = append(problems, fmt.Sprintf("admitted %d with %d failed calls of %d: %d admissions lost", a, f, b, want-a-f))
		}
		r, err := peek.Peek(ctx, key)
		if lossy && l.moved[k] {
			held := int64(changeLimit - r.Remaining) // events the state holds
			switch {
			case err != nil:
				problems = append(problems, fmt.Sprintf("Peek: %v", err))
			case r.Remaining < 0 || held > a+f:
				problems = append(problems, fmt.Sprintf("Peek: %d remaining: more counted than the %d admitted and %d failed calls", r.Remaining, a, f))
			case a > changeLimit+max(0, a-held):
				problems = append(problems, fmt.Sprintf("admitted %d > limit %d plus the %d admissions missing from its state", a, changeLimit, a-held))
			}
			lost += max(0, a-held)
			excess += max(0, a-changeLimit)
		} else if a > changeLimit {
			problems = append(problems, fmt.Sprintf("admitted %d > limit %d", a, changeLimit))
		}
		switch {
		case lossy && l.moved[k]:
		case err != nil:
			problems = append(problems, fmt.Sprintf("Peek: %v", err))
		case a >= changeLimit && (r.Allowed || r.Remaining != 0):
			problems = append(problems, fmt.Sprintf("Peek %+v after the limit was admitted", r))
		case a < changeLimit && (int64(r.Remaining) > changeLimit-a || int64(r.Remaining) < changeLimit-a-f):
			problems = append(problems, fmt.Sprintf("Peek: %d remaining, want %d less at most %d failed", r.Remaining, changeLimit-a, f))
		}
		if len(rules) == 2 {
			if c := windows[key]; c < a || c > a+f {
				problems = append(problems, fmt.Sprintf("the second rule counted %d events, want %d admitted (plus at most %d failed)", c, a, f))
			}
		}
		if len(problems) > 0 {
			if bad++; bad <= 20 {
				t.Errorf("key %s (moved %v, budget %d): %s", key, l.moved[k], b, strings.Join(problems, "; "))
			}
		}
	}
	if bad > 20 {
		t.Errorf("... %d keys wrong in all", bad)
	}
	l.mu.Lock()
	var kinds []string
	for msg, n := range l.errs {
		kinds = append(kinds, fmt.Sprintf("%dx %q", n, msg))
	}
	l.mu.Unlock()
	sort.Strings(kinds)
	t.Logf("%d Allow calls: %d admitted, %d failed %v; %d on moved keys during the change; %d Peeks, %d failed",
		total, admitted, failed, kinds, l.movedDuring.Load(), l.peeks.Load(), l.peekErrs.Load())
	if lossy {
		t.Logf("admissions missing from the promoted replica's state: %d; admitted beyond the limit: %d", lost, excess)
	}
	if l.movedDuring.Load() == 0 {
		t.Error("no decision on a moved key began during the change: the load did not race it")
	}
	if rare && failed*100 > total {
		t.Errorf("%d of %d calls failed, want at most 1%%", failed, total)
	}
}

// changeWindowCounts returns, per user key, the count in the Redis key of
// rule 1 (a FixedWindow) under prefix, read from every master.
func changeWindowCounts(t *testing.T, cl *redistest.Cluster, cc *redis.ClusterClient, prefix string) map[string]int64 {
	t.Helper()
	ctx := context.Background()
	masters, err := cl.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int64{}
	for _, m := range masters {
		iter := cl.Node(m).Scan(ctx, 0, prefix+":*:1", 1000).Iterator()
		for iter.Next(ctx) {
			k := iter.Val()
			open, end := strings.IndexByte(k, '{'), strings.IndexByte(k, '}')
			v, err := cc.Get(ctx, k).Int64()
			if err != nil || open < 0 || end < open {
				t.Errorf("key %q: %d, %v", k, v, err)
				continue
			}
			// The integer form: a window tag × 2^32 + the count.
			counts[k[open+1:end]] = v & (1<<32 - 1)
		}
		if err := iter.Err(); err != nil {
			t.Fatalf("SCAN on %s: %v", m, err)
		}
	}
	return counts
}

// TestClusterFollowsAKilledMaster: a limiter's client knows the cluster's
// slot map from before a master is killed. Until the cluster promotes the
// replica, the dead master's keys fail, and a live master's keys fail only
// as Redis refuses them (CLUSTERDOWN, from when the cluster has found the
// master failing until the promotion, under Redis's default
// cluster-require-full-coverage): each master has a breaker of its own,
// so the dead master's failures do not stop the others, while the limiter
// reports Unhealthy. Once the replica is promoted, the dead master's keys
// reach it within moments, not after go-redis's periodic reload a minute
// on (go-redis reloads a cluster's slot map on MOVED and ASK, and a master
// that refuses connections answers neither: sluice asks for a reload when
// a decision or a probe fails), and the limiter is Healthy again.
func TestClusterFollowsAKilledMaster(t *testing.T) {
	cl := redistest.StartCluster(t)
	ctx := context.Background()
	shards, err := cl.Shards(ctx)
	if err != nil {
		t.Fatal(err)
	}
	sh := shards[0]
	master, replica := sh.Master, sh.Replicas[0]
	if err := cl.WaitReplicaKnown(ctx, replica); err != nil {
		t.Fatal(err)
	}
	keys, _ := changeKeys(sh.Owns, 1, 1)
	dead, live := keys[0], keys[1]
	var mu sync.Mutex
	var changes []core.Health
	// At the default timeout (the tests raise it), not waiting out
	// go-redis's dials to the dead master.
	lim, err := core.New(cl.Client(t), core.GCRA, core.PerSecond(1000), core.WithTimeout(core.DefaultTimeout),
		core.WithPrefix(fmt.Sprintf("killed-%d", time.Now().UnixNano())),
		core.WithHealthHook(func(h core.Health, _ error) { mu.Lock(); changes = append(changes, h); mu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	for _, k := range keys {
		if _, err := lim.Allow(ctx, k); err != nil {
			t.Fatalf("before the kill, %s: %v", k, err)
		}
	}
	if err := cl.Kill(master); err != nil {
		t.Fatal(err)
	}
	var promoted atomic.Bool
	outage := make(chan [4]int)
	go func() {
		var n [4]int // the dead key's failures; the live key's decisions, failures, and those not CLUSTERDOWN
		sawUnhealthy := 0
		for !promoted.Load() {
			if _, err := lim.Allow(ctx, dead); err != nil {
				n[0]++
			}
			if _, err := lim.Allow(ctx, live); err != nil {
				n[2]++
				if !strings.Contains(err.Error(), "CLUSTERDOWN") {
					n[3]++ // not Redis's refusal: a timeout of a loaded machine, or the dead master's breaker
					t.Logf("during the outage, %s (a live master's): %v", live, err)
				}
			}
			n[1]++
			if lim.Health() == core.Unhealthy {
				sawUnhealthy++
			}
			time.Sleep(5 * time.Millisecond)
		}
		if sawUnhealthy == 0 {
			t.Errorf("the limiter never reported Unhealthy during the outage")
		}
		outage <- n
	}()
	err = cl.WaitPromoted(ctx, replica, changeSlotOf(sh))
	promoted.Store(true)
	n := <-outage
	if err != nil {
		t.Fatalf("failover of %s to %s: %v", master, replica, err)
	}
	at := time.Now()
	t.Logf("during the outage: %s failed %d times; %s decided %d times, %d refused by the cluster", dead, n[0], live, n[1], n[2])
	if n[0] == 0 || n[2] == n[1] || n[3] > max(3, n[1]/20) {
		t.Errorf("during the outage: %s failed %d times, %s %d of %d (%d not refused by the cluster); want the dead master's key to fail, the live one's to decide",
			dead, n[0], live, n[2], n[1], n[3])
	}
	const within = 15 * time.Second // go-redis's own reload comes after a minute
	for _, k := range keys {
		var err error
		for {
			if _, err = lim.Allow(ctx, k); err == nil || time.Since(at) > within {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			t.Errorf("%s still fails %v after %s was promoted: %v", k, within, replica, err)
		} else {
			t.Logf("%s decides again %v after the promotion", k, time.Since(at).Round(time.Millisecond))
		}
	}
	for lim.Health() != core.Healthy && time.Since(at) < within {
		time.Sleep(20 * time.Millisecond)
	}
	if lim.Health() != core.Healthy {
		t.Errorf("the limiter is still Unhealthy %v after the promotion", within)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(changes) != 2 || changes[0] != core.Unhealthy || changes[1] != core.Healthy {
		t.Errorf("the health hook saw %v; want Unhealthy, then Healthy", changes)
	}
}
