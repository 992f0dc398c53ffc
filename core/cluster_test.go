package core_test

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestCluster runs limiters on a real Redis Cluster of three masters with a
// replica each, through *redis.ClusterClient. The subtests share one
// cluster; Failover changes its topology and so runs last.
func TestCluster(t *testing.T) {
	start := time.Now()
	cl := redistest.StartCluster(t)
	t.Logf("cluster of 3 masters and 3 replicas ready in %s", time.Since(start).Round(time.Millisecond))
	t.Run("ManyKeys", func(t *testing.T) { testClusterManyKeys(t, cl) })
	t.Run("ExactAdmission", func(t *testing.T) { testClusterExactAdmission(t, cl) })
	t.Run("OneCallPerMaster", func(t *testing.T) { testClusterOneCallPerMaster(t, cl) })
	t.Run("FlushersStayFew", func(t *testing.T) { testClusterFlushersStayFew(t, cl) })
	t.Run("OneMasterHangs", func(t *testing.T) { testClusterOneMasterHangs(t, cl, false, false) })
	t.Run("OneMasterHangsHealthCheck", func(t *testing.T) { testClusterOneMasterHangs(t, cl, true, false) })
	t.Run("OneMasterHangsBySlot", func(t *testing.T) { testClusterOneMasterHangs(t, cl, true, true) })
	t.Run("Failover", func(t *testing.T) { testClusterFailover(t, cl) })
}

// clusterPolicy is a three-rule policy of mixed algorithms that admits
// exactly 4 events per key in a test's lifetime: the token bucket holds 4
// and refills one token per 86s.
var clusterPolicy = []core.Rule{
	{Name: "burst", Algorithm: core.TokenBucket, Limit: core.Limit{Rate: 1000, Period: 24 * time.Hour, Burst: 4}},
	{Name: "hourly", Algorithm: core.SlidingWindowLog, Limit: core.PerHour(6)},
	{Name: "daily", Algorithm: core.GCRA, Limit: core.PerDay(10)},
}

// testClusterManyKeys decides 200 user keys, odd ones among them, with every
// algorithm and with a three-rule policy, through redis.NewUniversalClient: each key admits exactly its limit,
// in order, then denies; Reset works; the Redis keys of one user key share
// one slot; the user keys spread over all three masters; every key has a
// TTL.
func testClusterManyKeys(t *testing.T, cl *redistest.Cluster) {
	// What an application configured with several addresses gets.
	cc := redis.NewUniversalClient(&redis.UniversalOptions{Addrs: cl.Addrs()})
	t.Cleanup(func() { cc.Close() })
	if _, ok := cc.(*redis.ClusterClient); !ok {
		t.Fatalf("NewUniversalClient of %d addresses returned a %T", len(cl.Addrs()), cc)
	}
	ctx := context.Background()
	users := []string{"", "{braces}", "a}b{c", "#looks-hashed", strings.Repeat("long-", 30), "ключ ünïcode", "with:colons:and spaces"}
	for i := len(users); i < 200; i++ {
		users = append(users, fmt.Sprintf("user-%d", i))
	}
	type limiterCase struct {
		name  string
		rules []core.Rule
		limit int
	}
	var cases []limiterCase
	for _, alg := range core.Algorithms() {
		cases = append(cases, limiterCase{string(alg), []core.Rule{{Name: string(alg), Algorithm: alg, Limit: core.PerDay(5)}}, 5})
	}
	cases = append(cases, limiterCase{"policy", clusterPolicy, 4})
	clusterAvoidDayEdge(t, cc)
	run := time.Now().UnixNano()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prefix := fmt.Sprintf("many-%s-%d", tc.name, run)
			lim, err := core.NewPolicy(cc, tc.rules, core.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			work := make(chan string)
			for w := 0; w < 16; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for key := range work {
						exhaustKey(t, ctx, lim, key, tc.limit)
					}
				}()
			}
			for _, key := range users {
				work <- key
			}
			close(work)
			wg.Wait()
			if t.Failed() {
				return
			}
			for _, key := range users[:10] {
				if err := lim.Reset(ctx, key); err != nil {
					t.Fatalf("Reset(%q): %v", key, err)
				}
				if r, err := lim.Allow(ctx, key); err != nil || !r.Allowed || r.Remaining != tc.limit-1 {
					t.Errorf("key %q after Reset: %+v, %v; want admitted with %d remaining", key, r, err, tc.limit-1)
				}
			}
			byMaster := clusterCheckKeys(t, cl, prefix, len(users), len(tc.rules), 48*time.Hour)
			if len(byMaster) != 3 {
				t.Errorf("keys on %d masters, want all 3: %v", len(byMaster), byMaster)
			}
		})
	}
}

// exhaustKey asks for key limit+2 times and checks that exactly the
// first limit calls are admitted, with Remaining counting down, and that
// Peek then denies.
func exhaustKey(t *testing.T, ctx context.Context, lim *core.Limiter, key string, limit int) {
	t.Helper()
	for i := 1; i <= limit+2; i++ {
		r, err := lim.Allow(ctx, key)
		if err != nil {
			t.Errorf("key %q call %d: %v", key, i, err)
			return
		}
		if want := i <= limit; r.Allowed != want || (want && r.Remaining != limit-i) {
			t.Errorf("key %q call %d: %+v; want allowed=%v with %d remaining", key, i, r, want, limit-i)
			return
		}
	}
	if r, err := lim.Peek(ctx, key); err != nil || r.Allowed {
		t.Errorf("key %q: Peek after the limit: %+v, %v", key, r, err)
	}
}

// testClusterExactAdmission runs 4 cluster clients × 100 goroutines on one
// key with every algorithm and flushes the script cache of every master in
// the middle of the run: exactly the limit is admitted and no call fails.
func testClusterExactAdmission(t *testing.T, cl *redistest.Cluster) {
	clients := make([]*redis.ClusterClient, 4)
	for i := range clients {
		clients[i] = cl.Client(t)
	}
	ctx := context.Background()
	const limit, goroutines, attempts = 1000, 400, 5 // 2000 attempts for 1000
	for _, alg := range core.Algorithms() {
		t.Run(string(alg), func(t *testing.T) {
			prefix := fmt.Sprintf("exact-%s-%d", alg, time.Now().UnixNano())
			lims := make([]*core.Limiter, len(clients))
			for i, c := range clients {
				var err error
				if lims[i], err = core.New(c, alg, core.PerDay(limit), core.WithPrefix(prefix)); err != nil {
					t.Fatal(err)
				}
			}
			clusterAvoidDayEdge(t, clients[0])
			var admitted, failed, calls atomic.Int64
			flushed := make(chan struct{})
			start := time.Now()
			var wg sync.WaitGroup
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func(lim *core.Limiter) {
					defer wg.Done()
					for j := 0; j < attempts; j++ {
						if calls.Add(1) == goroutines*attempts/3 {
							err := clients[0].ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
								return m.ScriptFlush(ctx).Err()
							})
							if err != nil {
								t.Errorf("SCRIPT FLUSH: %v", err)
							}
							close(flushed)
						}
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
				}(lims[g%len(lims)])
			}
			wg.Wait()
			t.Logf("%d calls in %s", calls.Load(), time.Since(start).Round(time.Millisecond))
			select {
			case <-flushed:
			default:
				t.Error("the script cache was never flushed")
			}
			if admitted.Load() != limit || failed.Load() != 0 {
				t.Errorf("admitted %d of %d attempts, %d errors; want exactly %d", admitted.Load(), goroutines*attempts, failed.Load(), limit)
			}
			// The counter also needs the next window; a meter's TTL is
			// rounded up to the end of a period (a day) past its refill,
			// and the sliding log's past its period.
			bound := 24 * time.Hour
			if alg != core.FixedWindow {
				bound *= 2
			}
			clusterCheckKeys(t, cl, prefix, 1, 1, bound)
		})
	}
}

// testClusterFailover keeps goroutines deciding many keys while the master
// owning one of them is failed over to its replica (CLUSTER FAILOVER). It
// asserts that calls fail only between the failover's start and the first
// success after the cluster is ready again; that no key admits more than its
// limit across the failover, and none fewer than its limit minus its failed
// calls (no state is lost); and that afterwards a fresh key on the promoted
// master admits exactly its limit under every algorithm.
func testClusterFailover(t *testing.T, cl *redistest.Cluster) {
	ctx := context.Background()
	cc := cl.Client(t)
	const limit = 150 // of each load key
	rules := []core.Rule{
		{Name: "tokens", Algorithm: core.TokenBucket, Limit: core.PerDay(limit)},
		{Name: "log", Algorithm: core.SlidingWindowLog, Limit: core.PerDay(limit + 20)},
		{Name: "gcra", Algorithm: core.GCRA, Limit: core.PerDay(limit + 10)},
	}
	prefix := fmt.Sprintf("failover-%d", time.Now().UnixNano())
	lim, err := core.NewPolicy(cc, rules, core.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 60)
	for i := range keys {
		keys[i] = fmt.Sprintf("load-%d", i)
	}
	slot, err := cc.ClusterKeySlot(ctx, keys[0]).Result()
	if err != nil {
		t.Fatal(err)
	}
	shard, err := cl.ShardOf(ctx, int(slot))
	if err != nil {
		t.Fatal(err)
	}
	promoted := shard.Replicas[0]

	// Keys come in three cohorts of 20: the first is decided from the
	// start, the second from the failover's start, so admissions are under
	// way while it runs, the third once the cluster is ready again.
	load := newFailoverLoad(keys)
	load.active.Store(20)
	stop := load.start(lim, 24)
	defer stop() // on a failed assertion below, stop the load anyway

	// Load before, during and after the failover.
	if err := load.waitSuccesses(1000, time.Time{}, 20*time.Second); err != nil {
		t.Fatalf("before the failover: %v", err)
	}
	if err := cl.WaitReplicaKnown(ctx, promoted); err != nil {
		t.Fatal(err)
	}
	admittedBefore := load.admittedTotal()
	t0 := time.Now()
	load.active.Store(40)
	if err := cl.Failover(ctx, promoted); err != nil {
		t.Fatalf("failover of %s to %s: %v", shard.Master, promoted, err)
	}
	ready := time.Now()
	admittedDuring := load.admittedTotal() - admittedBefore
	load.active.Store(int64(len(keys)))
	// Go on until every key has seen a denial after the failover (all
	// exhausted, state carried over) and plenty of calls have succeeded.
	if err := load.waitSuccesses(1000, ready, 30*time.Second); err != nil {
		t.Fatalf("after the failover: %v", err)
	}
	if err := load.waitExhausted(ready, 30*time.Second); err != nil {
		t.Fatalf("after the failover: %v", err)
	}
	stop()

	if r, err := cl.Role(ctx, promoted); err != nil || r != "master" {
		t.Fatalf("%s has role %q (%v) after the failover, want master", promoted, r, err)
	}
	t.Logf("failover of %s to %s: %s until the cluster was ready; %d admitted meanwhile",
		shard.Master, promoted, ready.Sub(t0).Round(time.Millisecond), admittedDuring)
	load.checkErrors(t, t0, ready)

	for k, key := range keys {
		a, f := load.admitted[k].Load(), load.failed[k].Load()
		if a > limit {
			t.Errorf("key %s admitted %d > limit %d across the failover", key, a, limit)
		}
		if a+f < limit {
			t.Errorf("key %s admitted %d with %d failed calls: state of at least %d admissions lost", key, a, f, limit-a-f)
		}
	}

	// A fresh key on the promoted master admits exactly its limit.
	shard, err = cl.ShardOf(ctx, int(slot))
	if err != nil {
		t.Fatal(err)
	}
	if shard.Master != promoted {
		t.Fatalf("slot %d is served by %s, want the promoted %s", slot, shard.Master, promoted)
	}
	fresh := clusterKeyOn(t, cc, shard, "fresh")
	freshPrefix := prefix + "-fresh"
	for _, alg := range core.Algorithms() {
		t.Run("fresh-"+string(alg), func(t *testing.T) {
			if alg == core.FixedWindow || alg == core.SlidingWindowCounter {
				clusterAvoidDayEdge(t, cc)
			}
			l, err := core.New(cc, alg, core.PerDay(10), core.WithPrefix(freshPrefix))
			if err != nil {
				t.Fatal(err)
			}
			exhaustKey(t, ctx, l, fresh, 10)
		})
	}
	// (the GCRA rule's TTL: a day to refill, rounded up to a day's end)
	clusterCheckKeys(t, cl, prefix, len(keys), len(rules), 48*time.Hour)
	if byMaster := clusterCheckKeys(t, cl, freshPrefix, 1, len(core.Algorithms()), 48*time.Hour); byMaster[promoted] == 0 {
		t.Errorf("the fresh key's Redis keys are not on the promoted master %s: %v", promoted, byMaster)
	}
}

// failoverLoad runs and records a load of Allow calls.
type failoverLoad struct {
	keys             []string
	active           atomic.Int64   // calls go to the first active keys
	admitted, failed []atomic.Int64 // per key
	calls, successes atomic.Int64

	mu         sync.Mutex
	errs       []failoverCallError
	deniedWhen [][]time.Time // per key: when denied calls began (the latest few)
	okTimes    []time.Time   // when successful calls began
	longest    time.Duration // the longest call
	longestAt  time.Time     // when it began
}

type failoverCallError struct {
	began time.Time
	err   error
}

func newFailoverLoad(keys []string) *failoverLoad {
	l := &failoverLoad{
		keys:       keys,
		admitted:   make([]atomic.Int64, len(keys)),
		failed:     make([]atomic.Int64, len(keys)),
		deniedWhen: make([][]time.Time, len(keys)),
	}
	l.active.Store(int64(len(keys)))
	return l
}

// start runs goroutines that call lim.Allow on the active keys, round
// robin, until stop is called. stop waits for them; it may be called more
// than once.
func (l *failoverLoad) start(lim *core.Limiter, goroutines int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := g; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				k := i % int(l.active.Load())
				began := time.Now()
				r, err := lim.Allow(context.Background(), l.keys[k])
				l.record(k, began, r.Allowed, err)
			}
		}(g)
	}
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}

func (l *failoverLoad) record(k int, began time.Time, allowed bool, err error) {
	took := time.Since(began)
	l.calls.Add(1)
	l.mu.Lock()
	if took > l.longest {
		l.longest, l.longestAt = took, began
	}
	l.mu.Unlock()
	if err != nil {
		l.failed[k].Add(1)
		l.mu.Lock()
		l.errs = append(l.errs, failoverCallError{began, err})
		l.mu.Unlock()
		return
	}
	l.successes.Add(1)
	if allowed {
		l.admitted[k].Add(1)
	}
	l.mu.Lock()
	l.okTimes = append(l.okTimes, began)
	if !allowed {
		d := append(l.deniedWhen[k], began)
		if len(d) > 4 {
			d = d[1:]
		}
		l.deniedWhen[k] = d
	}
	l.mu.Unlock()
}

// checkErrors fails t for every call that failed although it began after
// the failover was over (ready) and a call begun after that had succeeded:
// errors are allowed only from the failover's start (t0) until the limiter
// has got through again. It logs what the load saw.
func (l *failoverLoad) checkErrors(t *testing.T, t0, ready time.Time) {
	t.Helper()
	l.checkErrorsBut(t, t0, ready, nil, 0)
}

// checkErrorsBut is checkErrors allowing at most most late errors for which
// tolerated holds.
func (l *failoverLoad) checkErrorsBut(t *testing.T, t0, ready time.Time, tolerated func(error) bool, most int) {
	t.Helper()
	firstOK := l.firstSuccessAfter(ready)
	errs := l.errorsSnapshot()
	var late []string
	let := 0
	for _, e := range errs {
		if firstOK.IsZero() || e.began.After(firstOK) {
			if tolerated != nil && tolerated(e.err) && let < most {
				let++
				continue
			}
			late = append(late, fmt.Sprintf("+%s: %v", e.began.Sub(t0).Round(time.Millisecond), e.err))
		}
	}
	if let > 0 {
		t.Logf("%d late errors tolerated", let)
	}
	if len(late) > 0 {
		if len(late) > 20 {
			late = append(late[:20], "...")
		}
		t.Errorf("%d calls failed after the failover was over and a call had succeeded again:\n%s", len(late), strings.Join(late, "\n"))
	}
	l.mu.Lock()
	longest, longestAt := l.longest, l.longestAt
	l.mu.Unlock()
	t.Logf("load: %d calls, %d succeeded, %d failed%s; first success after the failover begun +%s after its start; longest call %s, begun at +%s",
		l.calls.Load(), l.successes.Load(), len(errs), failoverErrorSpan(errs, t0),
		firstOK.Sub(t0).Round(time.Millisecond), longest.Round(time.Millisecond), longestAt.Sub(t0).Round(time.Millisecond))
}

func (l *failoverLoad) admittedTotal() int64 {
	var n int64
	for i := range l.admitted {
		n += l.admitted[i].Load()
	}
	return n
}

// successesAfter counts the successful calls begun after mark.
func (l *failoverLoad) successesAfter(mark time.Time) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, t := range l.okTimes {
		if t.After(mark) {
			n++
		}
	}
	return n
}

// firstSuccessAfter returns when the first successful call begun after mark
// began.
func (l *failoverLoad) firstSuccessAfter(mark time.Time) time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	var first time.Time
	for _, t := range l.okTimes {
		if t.After(mark) && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	return first
}

func (l *failoverLoad) errorsSnapshot() []failoverCallError {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]failoverCallError(nil), l.errs...)
}

// waitSuccesses waits until n calls begun after mark have succeeded.
func (l *failoverLoad) waitSuccesses(n int, mark time.Time, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		got := l.successesAfter(mark)
		if got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d calls succeeded within %s (%d calls, %d errors)", got, n, timeout, l.calls.Load(), len(l.errorsSnapshot()))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitExhausted waits until every key has been denied in a call begun
// after mark.
func (l *failoverLoad) waitExhausted(mark time.Time, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		l.mu.Lock()
		pending := 0
		for _, d := range l.deniedWhen {
			if len(d) == 0 || !d[len(d)-1].After(mark) {
				pending++
			}
		}
		l.mu.Unlock()
		if pending == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d keys not denied within %s", pending, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// failoverErrorSpan describes when errors happened, relative to t0.
func failoverErrorSpan(errs []failoverCallError, t0 time.Time) string {
	if len(errs) == 0 {
		return ""
	}
	first, last := errs[0].began, errs[0].began
	kinds := map[string]int{}
	for _, e := range errs {
		if e.began.Before(first) {
			first = e.began
		}
		if e.began.After(last) {
			last = e.began
		}
		msg := e.err.Error()
		if len(msg) > 60 {
			msg = msg[:60]
		}
		kinds[msg]++
	}
	var ks []string
	for k, n := range kinds {
		ks = append(ks, fmt.Sprintf("%dx %q", n, k))
	}
	sort.Strings(ks)
	return fmt.Sprintf(", begun from +%s to +%s after the failover's start: %s",
		first.Sub(t0).Round(time.Millisecond), last.Sub(t0).Round(time.Millisecond), strings.Join(ks, ", "))
}

// clusterKeyOn returns a user key whose hash tag falls in a slot of shard.
func clusterKeyOn(t *testing.T, cc *redis.ClusterClient, shard redistest.Shard, base string) string {
	t.Helper()
	for i := 0; i < 10000; i++ {
		key := fmt.Sprintf("%s-%d", base, i)
		slot, err := cc.ClusterKeySlot(context.Background(), key).Result()
		if err != nil {
			t.Fatal(err)
		}
		if shard.Owns(int(slot)) {
			return key
		}
	}
	t.Fatalf("no key for shard %v", shard)
	return ""
}

// clusterCheckKeys finds every Redis key under prefix by SCAN on each
// master, and checks that they belong to users user keys of perUser keys
// each (one per rule of each limiter sharing the prefix), that all keys of one user key (one hash tag) share one slot
// (CLUSTER KEYSLOT), and that every key has a TTL, of at most maxTTL. It
// returns the number of keys on each master.
func clusterCheckKeys(t *testing.T, cl *redistest.Cluster, prefix string, users, perUser int, maxTTL time.Duration) map[string]int {
	t.Helper()
	ctx := context.Background()
	masters, err := cl.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	byMaster := map[string]int{}
	byTag := map[string][]string{}
	for _, m := range masters {
		node := cl.Node(m)
		var cursor uint64
		for {
			keys, next, err := node.Scan(ctx, cursor, prefix+":*", 1000).Result()
			if err != nil {
				t.Fatalf("SCAN on %s: %v", m, err)
			}
			for _, k := range keys {
				open, end := strings.IndexByte(k, '{'), strings.IndexByte(k, '}')
				if !strings.HasPrefix(k, prefix+":{") || end < open {
					t.Errorf("key %q has no hash tag after the prefix", k)
					continue
				}
				tag := k[open+1 : end]
				byTag[tag] = append(byTag[tag], k)
				byMaster[m]++
				// -1: no TTL. (The probe's key lives a second: gone since
				// SCAN, -2, or under a millisecond left, 0, it had one.)
				if ttl, err := node.PTTL(ctx, k).Result(); err != nil || ttl == -1 || ttl > maxTTL {
					t.Errorf("key %q: TTL %s (%v), want one of at most %s", k, ttl, err, maxTTL)
				}
			}
			if cursor = next; cursor == 0 {
				break
			}
		}
	}
	if len(byTag) != users {
		t.Errorf("prefix %s: keys of %d user keys, want %d", prefix, len(byTag), users)
	}
	for tag, keys := range byTag {
		if len(keys) != perUser {
			t.Errorf("user key %q has %d Redis keys, want %d: %v", tag, len(keys), perUser, keys)
		}
		var first int64 = -1
		for _, k := range keys {
			slot, err := cl.Node(masters[0]).ClusterKeySlot(ctx, k).Result()
			if err != nil {
				t.Fatal(err)
			}
			if first >= 0 && slot != first {
				t.Errorf("user key %q: keys in slots %d and %d: %v", tag, first, slot, keys)
			}
			first = slot
		}
	}
	return byMaster
}

// clusterAvoidDayEdge waits out the last 30 seconds of a UTC day (by the
// server's clock), so a test never straddles two daily windows.
func clusterAvoidDayEdge(t *testing.T, c redis.UniversalClient) {
	t.Helper()
	now, err := c.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	const day = 24 * time.Hour
	if left := day - time.Duration(now.UnixNano())%day; left < 30*time.Second {
		t.Logf("waiting %s for the next UTC day", left.Round(time.Millisecond))
		time.Sleep(left + 50*time.Millisecond)
	}
}
