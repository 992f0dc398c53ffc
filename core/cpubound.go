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
// A flusher samples it after each batch, at most every cpuBoundEvery: it
// judges the time since the last sample, however long, and keeps its
// judgement while no batch is sent (a lone caller is sent at once
// whatever it says: nothing is in flight).

// cpuBoundEvery is the shortest window cpuBound judges by.
const cpuBoundEvery = 10 * time.Millisecond

// The process is CPU-bound over a window when at least 1 in cpuBoundShare
// of the goroutines that became ready in it waited cpuBoundWait or longer
// for a CPU: 13–16% did in an HTTP server at its limit, 4% at a quarter
// of its connections, 0.3–0.5% (up to a few % on a shared host) among
// callers deciding as fast as Redis answers. The runtime's buckets are
// coarse, and only whole buckets count: those that begin at the bound or
// above it, so a wait counts as long from 115µs and as slow from 1.05ms.
//
// A flusher gives its turn to the goroutines waiting for a CPU only when
// their turns are quick (fewer than 1 in cpuBoundShare waited cpuTurnLong
// or longer): behind goroutines that compute for milliseconds at a time,
// giving up its turn would hold its next batch as long.
const (
	cpuBoundWait    = 100 * time.Microsecond
	cpuTurnLong     = time.Millisecond
	cpuBoundShare   = 32
	cpuBoundSamples = 64 // waits timed in a window, at least, to judge it
)

// schedGauge judges, from the scheduler's latencies, whether the process
// is CPU-bound (see cpuBound).
type schedGauge struct {
	busy  atomic.Bool // CPU-bound in the last window
	quick atomic.Bool // and its goroutines' turns were short (see cpuTurnLong)

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
		busy, quick := judge(h, g.counts)
		g.busy.Store(busy)
		g.quick.Store(quick)
	}
	g.counts = append(g.counts[:0], h.Counts...)
}

// judge reports, from the histogram's counts before and now's, whether
// the process was CPU-bound (busy: at least 1 in cpuBoundShare of the
// goroutines made ready waited cpuBoundWait or longer for a CPU) and
// whether a turn of its run queues was short (quick: fewer than 1 in
// cpuBoundShare waited cpuTurnLong or longer). A window of fewer than
// cpuBoundSamples waits is neither: the runtime times only some of them,
// and a handful at light load (an idle thread waking) says nothing of a
// queue.
func judge(now *metrics.Float64Histogram, before []uint64) (busy, quick bool) {
	var all, long, slow uint64
	for i, n := range now.Counts {
		d := n - before[i]
		all += d
		// Buckets[i] is the lower bound of Counts[i].
		if now.Buckets[i] >= cpuBoundWait.Seconds() {
			long += d
		}
		if now.Buckets[i] >= cpuTurnLong.Seconds() {
			slow += d
		}
	}
	if all < cpuBoundSamples {
		return false, false
	}
	return long*cpuBoundShare >= all, slow*cpuBoundShare < all
}
