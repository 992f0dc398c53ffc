package bench

import (
	"context"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// concurrencies are the numbers of concurrent callers of every benchmark.
var concurrencies = []int{1, 16, 64, 256}

// numKeys is how many distinct keys the callers spread over: enough that
// concurrent callers rarely share a key, and with the limits below a key is
// never denied, so the benchmarks measure decisions rather than denials.
const numKeys = 10_000

// keys are the user keys of every benchmark: "user:0" ... "user:9999". Each
// library adds its own prefix.
var keys = func() []string {
	k := make([]string, numKeys)
	for i := range k {
		k[i] = "user:" + strconv.Itoa(i)
	}
	return k
}()

// decider makes one decision for key and reports whether it was admitted.
type decider func(ctx context.Context, key string) (allowed bool, err error)

// runConcurrent is one run of a concurrency sub-benchmark: c goroutines take
// decisions from a shared counter until b.N have been made, each on
// keys[i % numKeys], and time every call. newDecider is called once per
// goroutine (before the timer starts), for deciders that keep per-goroutine
// state; most return the same function every time.
//
// It reports decisions/s, the p50 and p99 latency of one call in
// microseconds and, through b.ReportAllocs, the allocations per decision of
// everything that ran meanwhile (the library, go-redis, their goroutines).
// Any error fails the benchmark, and so do denials beyond 1%: both would
// mean something else than decisions was measured.
//
// It reports cli-us/op, the CPU time of this process (the library, go-redis,
// the harness) per decision: the client's share of the cores. When rdb is
// not nil it also reports, from the Redis server(s) behind rdb
// (every master of a cluster):
//   - srv-us/op: the server's CPU time per decision (INFO cpu, user +
//     system), which shows what pipelining saves the server;
//   - script-us/call: the time Redis spent running each EVALSHA or EVAL
//     (INFO commandstats), the cost of the Lua script itself, which
//     pipelining cannot save;
//   - calls/op: the script calls (EVALSHA and EVAL) per decision.
//
// Both are deltas over the run, so a shared REDIS_URL server is never reset;
// other clients of such a server count in them too.
func runConcurrent(b *testing.B, c int, rdb redis.UniversalClient, newDecider func() decider) {
	b.ReportAllocs()
	deciders := make([]decider, c)
	for g := range deciders {
		deciders[g] = newDecider()
	}
	warm(b, deciders)
	hists := make([]histogram, c)
	var (
		next  atomic.Int64
		tally tally
		wg    sync.WaitGroup
		n     = int64(b.N)
	)
	var before serverStats
	if rdb != nil {
		before = statsOf(b, rdb)
	}
	cpu0 := processCPU()
	wg.Add(c)
	b.ResetTimer()
	for g := range c {
		go func(decide decider, h *histogram) {
			defer wg.Done()
			ctx := context.Background()
			t0 := time.Now()
			for {
				i := next.Add(1)
				if i > n {
					return
				}
				ok, err := decide(ctx, keys[i%numKeys])
				t1 := time.Now()
				h.record(t1.Sub(t0))
				t0 = t1
				tally.add(ok, err)
			}
		}(deciders[g], &hists[g])
	}
	wg.Wait()
	b.StopTimer()
	if cpu0 > 0 {
		b.ReportMetric((processCPU()-cpu0)*1e6/float64(b.N), "cli-us/op")
	}
	if rdb != nil {
		after := statsOf(b, rdb)
		b.ReportMetric((after.cpu-before.cpu)*1e6/float64(b.N), "srv-us/op")
		if calls := after.scriptCalls - before.scriptCalls; calls > 0 {
			b.ReportMetric(float64(after.scriptUsec-before.scriptUsec)/float64(calls), "script-us/call")
			b.ReportMetric(float64(calls)/float64(b.N), "calls/op")
		}
	}

	tally.check(b, "", n)
	var all histogram
	for i := range hists {
		all.merge(&hists[i])
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
	b.ReportMetric(all.quantile(0.50).Seconds()*1e6, "p50-us")
	b.ReportMetric(all.quantile(0.99).Seconds()*1e6, "p99-us")
}

// tally counts what concurrent callers' decisions came to: failures, the
// first one kept, and denials.
type tally struct {
	errs, denied atomic.Int64
	first        atomic.Pointer[error]
}

// add counts one decision. (Small enough to be inlined in the callers'
// loops; the failure is counted out of line.)
func (t *tally) add(ok bool, err error) {
	if err != nil {
		t.fail(err)
	} else if !ok {
		t.denied.Add(1)
	}
}

// fail counts a failed decision, keeping the first error (out of line:
// see add).
//
//go:noinline
func (t *tally) fail(err error) {
	if t.errs.Add(1) == 1 {
		t.first.Store(&err)
	}
}

// check fails the benchmark on any error, and on denials beyond 1% of the
// n decisions: both would mean something else than decisions was measured.
// what prefixes the messages.
func (t *tally) check(b *testing.B, what string, n int64) {
	if e := t.errs.Load(); e > 0 {
		b.Fatalf("%s%d of %d decisions failed; the first: %v", what, e, n, *t.first.Load())
	}
	if d := t.denied.Load(); d*100 > n {
		b.Fatalf("%s%d of %d decisions denied: the limit is meant never to be reached", what, d, n)
	}
}

// serverStats is what the Redis server(s) behind a client have done so far.
type serverStats struct {
	cpu         float64 // seconds of CPU, user + system
	scriptCalls int64   // EVALSHA and EVAL calls
	scriptUsec  int64   // microseconds spent running them
}

// statsOf reads INFO cpu and commandstats of the server behind rdb, summed
// over the masters of a cluster.
func statsOf(b *testing.B, rdb redis.UniversalClient) serverStats {
	ctx := context.Background()
	var mu sync.Mutex
	var total serverStats
	one := func(ctx context.Context, c *redis.Client) error {
		info, err := c.Info(ctx, "cpu", "commandstats").Result()
		if err != nil {
			return err
		}
		var st serverStats
		for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
			v, err := strconv.ParseFloat(infoField(info, f), 64)
			if err != nil {
				return fmt.Errorf("INFO cpu %s: %w", f, err)
			}
			st.cpu += v
		}
		for _, cmd := range []string{"cmdstat_evalsha", "cmdstat_eval"} {
			// cmdstat_evalsha:calls=20000,usec=461758,usec_per_call=23.09,...
			for _, kv := range strings.Split(infoField(info, cmd), ",") {
				k, v, _ := strings.Cut(kv, "=")
				n, _ := strconv.ParseInt(v, 10, 64)
				switch k {
				case "calls":
					st.scriptCalls += n
				case "usec":
					st.scriptUsec += n
				}
			}
		}
		mu.Lock()
		total.cpu += st.cpu
		total.scriptCalls += st.scriptCalls
		total.scriptUsec += st.scriptUsec
		mu.Unlock()
		return nil
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, one)
	case *redis.Client:
		err = one(ctx, c)
	default:
		err = fmt.Errorf("unexpected client %T", rdb)
	}
	if err != nil {
		b.Fatal(err)
	}
	return total
}

// warm makes a few concurrent decisions before the timer starts, so that the
// connection pool holds enough connections and scripts are loaded.
func warm(b *testing.B, deciders []decider) {
	var wg sync.WaitGroup
	errs := make([]error, len(deciders))
	for g, decide := range deciders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 2 {
				if _, err := decide(context.Background(), keys[(g*2+i)%numKeys]); err != nil {
					errs[g] = err
					return
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatalf("warming up: %v", err)
		}
	}
}

// same returns a newDecider that gives every goroutine d.
func same(d decider) func() decider {
	return func() decider { return d }
}

// histogram counts durations in log-linear buckets, in the manner of HDR
// histograms: exact below 256ns, then 128 buckets per power of two, so a
// quantile is off by less than 0.8%. Recording is an index computation and
// an increment; each goroutine has its own histogram, merged at the end.
type histogram struct {
	counts [histBuckets]uint64
}

const (
	histSubBits = 7                                 // 128 buckets per power of two
	histBuckets = (40 - histSubBits) << histSubBits // up to 2^39ns (9 minutes); longer is clamped
)

func (h *histogram) record(d time.Duration) {
	h.counts[bucketOf(d)]++
}

func bucketOf(d time.Duration) int {
	v := uint64(min(max(d, 0), 1<<39-1))
	shift := bits.Len64(v) - (histSubBits + 1)
	if shift <= 0 {
		return int(v) // below 2^(histSubBits+1): exact
	}
	return (shift+1)<<histSubBits + int(v>>shift) - 1<<histSubBits
}

// bucketMid returns the middle of bucket i's range of durations.
func bucketMid(i int) time.Duration {
	if i < 2<<histSubBits {
		return time.Duration(i)
	}
	shift := i>>histSubBits - 1
	top := uint64(i&(1<<histSubBits-1)) + 1<<histSubBits
	return time.Duration(top<<shift + (1<<shift)/2)
}

func (h *histogram) merge(o *histogram) {
	for i, n := range o.counts {
		h.counts[i] += n
	}
}

// quantile returns the duration below which a fraction q of the records lie.
func (h *histogram) quantile(q float64) time.Duration {
	var total uint64
	for _, n := range h.counts {
		total += n
	}
	if total == 0 {
		return 0
	}
	rank := uint64(q*float64(total) + 0.5)
	rank = max(rank, 1)
	var seen uint64
	for i, n := range h.counts {
		seen += n
		if seen >= rank {
			return bucketMid(i)
		}
	}
	return bucketMid(histBuckets - 1)
}

func TestHistogram(t *testing.T) {
	var h histogram
	for _, d := range []time.Duration{0, 1, 255, 256, 257, 1000, time.Microsecond * 37, time.Second, 90 * time.Second} {
		i := bucketOf(d)
		if i < 0 || i >= histBuckets {
			t.Fatalf("bucketOf(%v) = %d, out of range", d, i)
		}
		mid := bucketMid(i)
		if diff := float64(mid-d) / float64(max(d, 1)); diff > 0.008 || diff < -0.008 {
			t.Errorf("bucketMid(bucketOf(%v)) = %v, off by %.2f%%", d, mid, diff*100)
		}
	}
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {1, time.Millisecond}} {
		got := h.quantile(c.q)
		if diff := float64(got-c.want) / float64(c.want); diff > 0.008 || diff < -0.008 {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if i := bucketOf(1 << 62); i != histBuckets-1 {
		t.Errorf("bucketOf(2^62) = %d, want the last bucket %d", i, histBuckets-1)
	}
}
