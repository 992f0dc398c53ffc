package core

import (
	"fmt"
	"math"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// fixedGauge is a gauge that says busy and quick whatever the scheduler
// does.
func fixedGauge(busy, quick bool) *schedGauge {
	g := &schedGauge{}
	g.busy.Store(busy)
	g.quick.Store(quick)
	return g
}

func TestJudge(t *testing.T) {
	// Buckets: [-Inf, 0), [0, 50µs), [50µs, 100µs), [100µs, 1ms), [1ms, +Inf).
	h := &metrics.Float64Histogram{Buckets: []float64{math.Inf(-1), 0, 50e-6, 100e-6, 1e-3, math.Inf(1)}}
	before := []uint64{0, 1000, 10, 5, 5}
	for _, tc := range []struct {
		now         []uint64
		busy, quick bool
	}{
		{[]uint64{0, 1000, 10, 5, 5}, false, false},  // nothing timed
		{[]uint64{0, 1050, 10, 15, 5}, false, false}, // 10 of 60 long, but too few to judge
		{[]uint64{0, 1310, 10, 5, 5}, false, true},   // all short
		{[]uint64{0, 1310, 10, 15, 5}, true, true},   // 10 of 320 (1 in 32) long, none slow
		{[]uint64{0, 1311, 10, 15, 5}, false, true},  // 10 of 321
		{[]uint64{0, 1000, 100, 5, 6}, false, true},  // 1 of 91: [50µs, 100µs) is not long
		{[]uint64{0, 1300, 10, 25, 16}, true, false}, // 31 of 331 long, 11 of them slow
		{[]uint64{0, 1300, 10, 25, 15}, true, true},  // 10 of 330 slow (1 in 33)
		{[]uint64{0, 1000, 10, 5, 105}, true, false}, // all 1ms and more
	} {
		h.Counts = tc.now
		if busy, quick := judge(h, before); busy != tc.busy || quick != tc.quick {
			t.Errorf("counts %v since %v: judged busy %v quick %v, want %v %v", tc.now, before, busy, quick, tc.busy, tc.quick)
		}
	}
}

// The process's own scheduler tells the gauge when goroutines queue for a
// CPU: beside more spinning goroutines than Ps, goroutines that wake from
// short sleeps wait for one. Those waits are long (a spinning goroutine
// runs for milliseconds at a time), so the turns are not quick: a flusher
// would not give up its own.
func TestSchedGaugeSeesQueuedGoroutines(t *testing.T) {
	g := &schedGauge{sample: []metrics.Sample{{Name: "/sched/latencies:seconds"}}}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := 0; i < 4*runtime.GOMAXPROCS(0); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Giving way every 2ms, so that the test ends even
			// without asynchronous preemption
			// (GODEBUG=asyncpreemptoff=1); the other spinners' turns
			// are still long.
			for last := time.Now(); !stop.Load(); {
				if time.Since(last) > 2*time.Millisecond {
					runtime.Gosched()
					last = time.Now()
				}
			}
		}()
	}
	for i := 0; i < 256; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				time.Sleep(100 * time.Microsecond)
			}
		}()
	}
	defer func() { stop.Store(true); wg.Wait() }()
	// Windows of 250ms: the runtime times one wait in eight, and the
	// queue here is slow, so a window needs a while for enough of them.
	g.update(time.Now())
	for deadline := time.Now().Add(20 * time.Second); !g.busy.Load(); {
		if time.Now().After(deadline) {
			t.Fatal("spinning goroutines outnumbering the Ps: the gauge never saw the process CPU-bound")
		}
		time.Sleep(250 * time.Millisecond)
		g.update(time.Now())
	}
	if g.quick.Load() {
		t.Error("behind goroutines spinning for 10ms at a time, the gauge judged the turns quick")
	}
}

// A batcher of a CPU-bound process holds a second small batch until twice
// what is in flight is pending; a large one, or any with CPU to spare,
// goes once as many are pending as are in flight.
func TestCPUBoundHoldsSmallBatches(t *testing.T) {
	for _, tc := range []struct {
		busy              bool
		inflight, pending int
		want              bool
	}{
		{false, 4, 4, true},
		{true, 4, 4, false},
		{true, 4, 7, false},
		{true, 4, 8, true},
		{true, 0, 1, true}, // nothing in flight: sent at once
		{true, smallBatch, smallBatch, true},
		{false, 4, 3, false},
	} {
		b := &batcher{load: fixedGauge(tc.busy, true), grouping: groupAll}
		b.inflight = tc.inflight
		b.pending = make([]*call, tc.pending)
		if got := b.mayGo(time.Now()); got != tc.want {
			t.Errorf("busy %v, %d in flight, %d pending: mayGo %v, want %v", tc.busy, tc.inflight, tc.pending, got, tc.want)
		}
	}
}

// Batching for a CPU-bound process, flushers giving up their turn after
// small batches, keeps every decision exact and answered: callers on one
// key, at a few and at many at once, against a real redis-server.
func TestCPUBoundBatchesAdmitExactly(t *testing.T) {
	c := redistest.Client(t)
	const limit = 300
	for _, alg := range Algorithms() {
		for _, callers := range []int{6, 64} {
			t.Run(fmt.Sprintf("%s/%d", alg, callers), func(t *testing.T) {
				lim := newOn(t, c, alg, PerDay(limit), WithTimeout(10*time.Second),
					WithPrefix(fmt.Sprintf("cpubound-%d", time.Now().UnixNano())))
				lim.batch.load = fixedGauge(true, true)
				avoidWindowEdge(t, c, 24*time.Hour)
				attempts := 2 * limit / callers
				if admitted := allowFromMany(t, lim, "one-key", callers, attempts); admitted != limit {
					t.Errorf("admitted %d of %d attempts; want exactly %d", admitted, callers*attempts, limit)
				}
				waitBatcherIdle(t, lim.batch)
			})
		}
	}
}
