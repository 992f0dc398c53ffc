package bench

import (
	"context"
	"flag"
	"testing"
	"time"
)

// latencyLibraries are compared by BenchmarkLatency: sluice GCRA on both
// kinds of client, and the two peers of the latency goal.
var latencyLibraries = []string{"sluice_gcra", "sluice_gcra_ctxtimeout", "redis_rate", "ulule"}

// latencyTurn is how many decisions in a row each library makes in its
// turn of BenchmarkLatency: about 10ms of them by default. -latency.turn=1
// alternates every decision, as this benchmark once did (see below).
var latencyTurn = flag.Int("latency.turn", 100, "decisions in a row per library in BenchmarkLatency")

// BenchmarkLatency times a single caller's decisions of several libraries
// in turns: each library makes -latency.turn decisions in a row, then the
// next one does, in an order that rotates from one round to the next.
//
// Run one after the other, single-caller benchmarks on a shared machine
// compare moments as much as libraries: a neighbour's burst of work lands on
// one library's run and not on another's, and p50 ratios between separate
// runs moved from 0.67× to 1.2× here. In turns of a few milliseconds, every
// library meets the same moments.
//
// Turns rather than one decision each in a row: a library leaves the
// machine in a state of its own for the next call. sluice on a default
// client hands each decision to a goroutine on a second OS thread, which
// keeps a second core awake a little while after it answers; a library
// called right after that finds the core awake. Alternating every decision,
// redis_rate's p50 was 63–80 µs against 86–100 µs in turns, while sluice's
// own barely moved: the single caller of one library is what the latency
// goal is about, so each library is timed after calls of its own. Only the
// first decision of a turn follows another library.
//
// It reports <library>-p50-us and <library>-p99-us for each library. Every
// library has a client of its own, as in BenchmarkAllow.
func BenchmarkLatency(b *testing.B) {
	byName := map[string]library{}
	for _, lib := range libraries() {
		byName[lib.name] = lib
	}
	deciders := make([]decider, len(latencyLibraries))
	for i, n := range latencyLibraries {
		lib, ok := byName[n]
		if !ok {
			b.Fatalf("no library %q", n)
		}
		rdb := newClientWith(lib.client)
		defer rdb.Close()
		if i == 0 {
			flush(b, rdb)
		}
		deciders[i] = lib.setup(b, rdb)()
	}
	warm(b, deciders)
	ctx := context.Background()
	hists := make([]histogram, len(deciders))
	b.ReportAllocs()
	b.ResetTimer()
	for i, turn := 0, 0; i < b.N; turn++ {
		end := min(i+max(*latencyTurn, 1), b.N)
		for j := range deciders {
			k := (turn + j) % len(deciders)
			for m := i; m < end; m++ {
				t0 := time.Now()
				ok, err := deciders[k](ctx, keys[m%numKeys])
				hists[k].record(time.Since(t0))
				if err != nil {
					b.Fatalf("%s: %v", latencyLibraries[k], err)
				}
				if !ok {
					b.Fatalf("%s denied a decision: the limit is meant never to be reached", latencyLibraries[k])
				}
			}
		}
		i = end
	}
	b.StopTimer()
	for k, n := range latencyLibraries {
		b.ReportMetric(hists[k].quantile(0.50).Seconds()*1e6, n+"-p50-us")
		b.ReportMetric(hists[k].quantile(0.99).Seconds()*1e6, n+"-p99-us")
	}
}
