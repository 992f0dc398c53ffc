package bench

import (
	"context"
	"testing"
	"time"
)

// latencyLibraries are compared by BenchmarkLatency: sluice GCRA on both
// kinds of client, and the two peers of the latency goal.
var latencyLibraries = []string{"sluice_gcra", "sluice_gcra_ctxtimeout", "redis_rate", "ulule"}

// BenchmarkLatency times a single caller's decisions of several libraries
// interleaved: every iteration makes one decision with each library, in an
// order that rotates from one iteration to the next, on the same key.
//
// Run one after the other, single-caller benchmarks on a shared machine
// compare moments as much as libraries: a neighbour's burst of work lands on
// one library's run and not on another's, and p50 ratios between separate
// runs moved from 0.67× to 1.2× here. Interleaved, every library meets the
// same moments, so the ratio of their p50s is the libraries' own.
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
	for i := 0; i < b.N; i++ {
		key := keys[i%numKeys]
		for j := range deciders {
			k := (i + j) % len(deciders)
			t0 := time.Now()
			ok, err := deciders[k](ctx, key)
			hists[k].record(time.Since(t0))
			if err != nil {
				b.Fatalf("%s: %v", latencyLibraries[k], err)
			}
			if !ok {
				b.Fatalf("%s denied a decision: the limit is meant never to be reached", latencyLibraries[k])
			}
		}
	}
	b.StopTimer()
	for k, n := range latencyLibraries {
		b.ReportMetric(hists[k].quantile(0.50).Seconds()*1e6, n+"-p50-us")
		b.ReportMetric(hists[k].quantile(0.99).Seconds()*1e6, n+"-p99-us")
	}
}
