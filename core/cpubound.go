package core

import (
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"
)

// The batcher sends a second batch while one is in flight as soon as as
// many calls are pending as are out (see mayGo): a caller then waits at
// most about one round trip, and Redis is never idle while calls wait.
// That is right while the process has CPU to spare. Once its goroutines
// queue for a CPU (an HTTP server at its limit, say), every script call
// costs the process CPU that its requests are waiting for: writing,
// reading and waking flushers, and on a host shared with Redis, Redis's
// own. There fewer, larger batches serve more requests: measured through
// a net/http server at 64 connections on two cores, 9–16% more requests
// per second, with 40% fewer script calls per request (see
// docs/performance.md).
//
// cpuBound tells the batchers which of the two the process is in, from
// the Go scheduler's own account of how long goroutines that were ready
// to run waited for a CPU (runtime/metrics, /sched/latencies:seconds).
// Every flusher samples it after a batch, at most every cpuBoundEvery.

// cpuBoundEvery is the shortest window cpuBound judges by.
const cpuBoundEvery = 10 * time.Millisecond

// cpuBoundWait and cpuBoundShare: the process is CPU-bound over a window
// when at least 1 in cpuBoundShare of the goroutines that became ready
// in it waited cpuBoundWait or longer for a CPU. A CPU-bound HTTP server
// measured 13%; callers deciding as fast as Redis answers, with the CPU
// to spare, 0.3–0.5%.
const (
	cpuBoundWait  = 100 * time.Microsecond
	cpuBoundShare = 32
)

// schedGauge judges, from the scheduler's latencies, whether the process
// is CPU-bound (see cpuBound).
type schedGauge struct {
	busy atomic.Bool // CPU-bound in the last window

	mu     sync.Mutex // held by the one sampling; others skip
	at     time.Time  // when the last window began
	sample []metrics.Sample
	counts []uint64 // the histogram's counts at the window's start
}

// cpuBound is the process's gauge: the scheduler's latencies are the
// whole process's, so every batcher shares it.
var cpuBound = schedGauge{sample: []metrics.Sample{{Name: "/sched/latencies:seconds"}}}

// update closes the current window if it has lasted cpuBoundEvery, and
// judges it. A Go without the metric leaves busy false: batches go as
// they would with CPU to spare. A gauge without a sample is fixed: update
// leaves it as it is.
func (g *schedGauge) update(now time.Time) {
	if g.sample == nil || !g.mu.TryLock() {
		return // fixed, or another flusher is sampling
	}
	defer g.mu.Unlock()
	if now.Sub(g.at) < cpuBoundEvery {
		return
	}
	g.at = now
	metrics.Read(g.sample)
	if g.sample[0].Value.Kind() != metrics.KindFloat64Histogram {
		return
	}
	h := g.sample[0].Value.Float64Histogram()
	if len(g.counts) == len(h.Counts) {
		g.busy.Store(waitedLong(h, g.counts))
	}
	g.counts = append(g.counts[:0], h.Counts...)
}

// waitedLong reports whether, between the counts before and now's, at
// least 1 in cpuBoundShare of the goroutines made ready waited
// cpuBoundWait or longer for a CPU.
func waitedLong(now *metrics.Float64Histogram, before []uint64) bool {
	var all, long uint64
	for i, n := range now.Counts {
		d := n - before[i]
		all += d
		// Buckets[i] is the lower bound of Counts[i].
		if now.Buckets[i] >= cpuBoundWait.Seconds() {
			long += d
		}
	}
	return all > 0 && long*cpuBoundShare >= all
}
