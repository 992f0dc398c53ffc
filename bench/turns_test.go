package bench

import (
	"context"
	"flag"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// turnsCallers is the concurrency of BenchmarkTurns: that of the
// throughput goal.
const turnsCallers = 64

var (
	turnsSlice  = flag.Duration("turns.slice", 500*time.Millisecond, "how long each library runs in its turn of BenchmarkTurns")
	turnsRounds = flag.Int("turns.rounds", 6, "rounds of BenchmarkTurns: each library takes one turn per round")
)

// BenchmarkTurns measures throughput at 64 concurrent callers for every
// library but the raw references, and for the peers deciding two limits
// as sluice_policy does (twoLimitPeers), in turns: each library runs for
// -turns.slice, then the next one does, in an order that rotates from one
// round to the next, for -turns.rounds rounds.
//
// BenchmarkAllow runs each library for a few seconds, one after the other,
// minutes apart: on a shared machine a neighbour's work lands on one
// library's run and not on another's, and the same script's Redis CPU per
// decision moved by a third between two libraries of one run. In turns of
// half a second, every library meets the same moments, so their ratios
// hold from run to run better than BenchmarkAllow's.
//
// The benchmark runs its rounds once, whatever b.N. It reports, for each
// library, <library>-decisions/s (its decisions over its turns' time),
// <library>-srv-us/op (Redis's CPU per decision) and <library>-cli-us/op
// (this process's). Every library has a client of its own, as in
// BenchmarkAllow.
func BenchmarkTurns(b *testing.B) {
	var libs []*turnTaker
	var stats func() serverStats
	for _, lib := range append(libraries(), twoLimitPeers()...) {
		if lib.name == "raw_incr" || lib.name == "raw_evalsha" {
			continue
		}
		rdb := newClientWith(lib.client)
		defer rdb.Close()
		if stats == nil {
			flush(b, rdb)
			stats = func() serverStats { return statsOf(b, rdb) }
		}
		libs = append(libs, newTurnTaker(b, lib.name, turnsCallers, lib.setup(b, rdb)))
	}
	takeTurns(b, libs, stats)
	for _, e := range libs {
		e.report(b, false)
	}
}

// turnTaker is one library of a benchmark in turns: its callers, and what
// its turns came to.
type turnTaker struct {
	name     string
	deciders []decider
	decided  int64
	elapsed  time.Duration
	srv, cli float64 // CPU seconds: the server's (every master's), this process's
	calls    int64   // script calls the server ran
}

// newTurnTaker makes c callers of the library and warms them up.
func newTurnTaker(b *testing.B, name string, c int, newDecider func() decider) *turnTaker {
	e := &turnTaker{name: name, deciders: make([]decider, c)}
	for g := range e.deciders {
		e.deciders[g] = newDecider()
	}
	warm(b, e.deciders)
	return e
}

// takeTurns runs libs in turns of -turns.slice, in an order that rotates
// from one round to the next, for -turns.rounds rounds, reading stats (the
// server's CPU and script calls) and this process's CPU around each turn.
func takeTurns(b *testing.B, libs []*turnTaker, stats func() serverStats) {
	b.ResetTimer()
	for round := 0; round < *turnsRounds; round++ {
		for j := range libs {
			e := libs[(round+j)%len(libs)]
			before, cpu0 := stats(), processCPU()
			n, elapsed := turn(b, e.name, e.deciders, *turnsSlice)
			after, cpu1 := stats(), processCPU()
			e.decided += n
			e.elapsed += elapsed
			e.srv += after.cpu - before.cpu
			e.cli += cpu1 - cpu0
			e.calls += after.scriptCalls - before.scriptCalls
		}
	}
	b.StopTimer()
}

// report reports <library>-decisions/s, -srv-us/op and -cli-us/op, and,
// with calls, -calls/op (script calls per decision).
func (e *turnTaker) report(b *testing.B, calls bool) {
	b.ReportMetric(float64(e.decided)/e.elapsed.Seconds(), e.name+"-decisions/s")
	b.ReportMetric(e.srv*1e6/float64(e.decided), e.name+"-srv-us/op")
	if e.cli > 0 {
		b.ReportMetric(e.cli*1e6/float64(e.decided), e.name+"-cli-us/op")
	}
	if calls {
		b.ReportMetric(float64(e.calls)/float64(e.decided), e.name+"-calls/op")
	}
}

// turn runs one library's deciders, one goroutine each, for d, each
// decision on the next of the keys, and returns how many decisions they
// made and how long they took (to the end of the last one). Any error,
// and denials beyond 1%, fail the benchmark, as in runConcurrent.
func turn(b *testing.B, name string, deciders []decider, d time.Duration) (int64, time.Duration) {
	var (
		next  atomic.Int64
		tally tally
		stop  atomic.Bool
		wg    sync.WaitGroup
	)
	start := time.Now()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	wg.Add(len(deciders))
	for _, decide := range deciders {
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for !stop.Load() {
				i := next.Add(1)
				tally.add(decide(ctx, keys[i%numKeys]))
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	n := next.Load()
	tally.check(b, name+": ", n)
	return n, elapsed
}
