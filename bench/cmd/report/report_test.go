package main

import (
	"bytes"
	"encoding/xml"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const sample = `bench-env: nproc=2 gomaxprocs=2 go=go1.26.8 redis=7.0.15 cpu="AMD EPYC" loadavg-start="1.00 0.50 0.20" client="go-redis v9 PoolSize=256, defaults otherwise"
memory: name=sluice_gcra rate=100 keys=1 bytes=104 encoding=embstr ttl=1m0s
memory: name=redis_rate rate=100 keys=1 bytes=88 encoding=embstr ttl=1m0s
goos: linux
cpu: AMD EPYC
BenchmarkAllow/sluice_gcra/c=1-2     	   10000	    102964 ns/op	      9000 decisions/s	        40.0 p50-us	       345.1 p99-us	    2048 B/op	      40 allocs/op
BenchmarkAllow/sluice_gcra/c=1-2     	   10000	    102964 ns/op	     10000 decisions/s	        30.0 p50-us	       345.1 p99-us	    2048 B/op	      40 allocs/op
BenchmarkAllow/sluice_gcra/c=1-2     	   10000	    102964 ns/op	     20000 decisions/s	        35.0 p50-us	       345.1 p99-us	    2048 B/op	      40 allocs/op
BenchmarkAllow/sluice_gcra/c=64-2    	   66128	     18963 ns/op	    300000 decisions/s	      1061 p50-us	      4604 p99-us	    1564 B/op	      24 allocs/op
BenchmarkAllow/sluice_sliding_window_log/c=64-2    	   66128	     18963 ns/op	    200000 decisions/s	      1061 p50-us	      4604 p99-us	    1564 B/op	      24 allocs/op
BenchmarkAllow/sluice_policy/c=64-2    	   66128	     18963 ns/op	    250000 decisions/s	      1061 p50-us	      4604 p99-us	    1564 B/op	      24 allocs/op
BenchmarkAllow/redis_rate/c=1-2      	   34152	     39579 ns/op	     25000 decisions/s	        32.0 p50-us	        96.51 p99-us	     704 B/op	      23 allocs/op
BenchmarkAllow/redis_rate/c=64-2     	   41070	     67221 ns/op	     90000 decisions/s	      1823 p50-us	     26411 p99-us	     704 B/op	      23 allocs/op
BenchmarkAllow/ulule/c=64-2          	   41070	     67221 ns/op	    100000 decisions/s	      1823 p50-us	     26411 p99-us	     704 B/op	      23 allocs/op
BenchmarkAllow/raw_evalsha/c=1-2     	   41070	     67221 ns/op	    100000 decisions/s	      18 p50-us	     26 p99-us	     304 B/op	      10 allocs/op
BenchmarkAllow/throttled/c=64-2      	--- FAIL: BenchmarkAllow/throttled/c=64-2
    harness_test.go:89: 3 of 100 decisions failed; the first: boom
BenchmarkCluster/server=single/c=64-2 	 1	 6000000000 ns/op	 50000 redis_rate-decisions/s	 1.0 redis_rate-calls/op	 0.03 sluice_gcra-calls/op	 200000 sluice_gcra-decisions/s	 3.5 sluice_gcra-srv-us/op
BenchmarkCluster/masters=1/c=64-2 	 1	 6000000000 ns/op	 0.031 sluice_gcra-calls/op	 180000 sluice_gcra-decisions/s	 1.0 redis_rate-calls/op	 40000 redis_rate-decisions/s
BenchmarkCluster/masters=3/c=64-2 	 1	 6000000000 ns/op	 0.094 sluice_gcra-calls/op	 150000 sluice_gcra-decisions/s
BenchmarkPipelinedEvalSha/batch=32-2 	 541474	 2257 ns/op	 1.351 cli-us/op	 443070 decisions/s	 1.094 script-us/call	 1.852 srv-us/op	 276 B/op	 5 allocs/op
BenchmarkLatency-2 	 1000	 400000 ns/op	 100.0 redis_rate-p50-us	 200 redis_rate-p99-us	 105.0 sluice_gcra-p50-us	 300 sluice_gcra-p99-us	 90.0 ulule-p50-us	 150 ulule-p99-us
BenchmarkTurns-2 	 1	 33000000000 ns/op	 270000 sluice_gcra-decisions/s	 3.500 sluice_gcra-srv-us/op	 4.000 sluice_gcra-cli-us/op	 60000 redis_rate-decisions/s	 14.00 redis_rate-srv-us/op	 90000 ulule-decisions/s	 10.50 ulule-srv-us/op	 150000 sluice_policy-decisions/s	 30000 redis_rate_two-decisions/s	 40000 ulule_two-decisions/s	 150000 sluice_sliding_window_log-decisions/s
BenchmarkMiddleware/c=1-2 	 1000	 1 ns/op	 9000 decisions/s	 50 p50-us	 80 p99-us	 2500 B/op	 50 allocs/op
FAIL
`

func TestReport(t *testing.T) {
	res, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.benchmarks["Allow/sluice_gcra/c=1"]; got == nil {
		t.Fatalf("benchmarks: %v", res.order)
	} else if v, _ := got.metric("decisions/s"); v != 10000 {
		t.Errorf("median of three samples = %v, want 10000", v)
	}
	if res.env["cpu"] != "AMD EPYC" || res.env["redis"] != "7.0.15" {
		t.Errorf("env = %v", res.env)
	}
	if len(res.failures) != 2 || !strings.Contains(res.failures[0], "boom") {
		t.Errorf("failures = %q", res.failures)
	}

	var md bytes.Buffer
	writeMarkdown(&md, res, time.Date(2025, 1, 2, 3, 4, 0, 0, time.UTC))
	out := md.String()
	for _, want := range []string{
		"| sluice GCRA | 10.0k | 300k |",
		"| sluice GCRA | 0.40× · 1.09× | 3.33× · 0.58× |", // ÷ redis_rate
		// the better peer; the sliding log and the policy against one limit
		// shown and not judged
		"run one after the other, sluice ÷ the better of redis_rate and ulule (here ulule/limiter v3 (fixed window), 100k decisions/s); goal ≥ 4×: GCRA 3.00× (**not met**), SlidingWindowLog 2.00× (no peer offers it: not compared), policy (GCRA + FixedWindow) 2.50× (two limits against one: compared in turns).",
		"libraries in turns, sluice ÷ the better of redis_rate and ulule (here ulule/limiter v3 (fixed window), 90.0k decisions/s); the policy ÷ the better of them deciding its two limits (ulule/limiter v3, two limits, 40.0k decisions/s); goal ≥ 4×: SlidingWindowLog 1.67× (no peer offers it: not compared), GCRA 3.00× (**not met**), policy (GCRA + FixedWindow) 3.75× (**not met**).",
		"sluice's policy ÷ the better of those (ulule/limiter v3, two limits): 3.75×.",
		"| sluice GCRA | 270k | 3.00× | 4.00 · 3.50 |",
		"| redis_rate v10 (GCRA) | 60.0k | 0.67× | – · 14.0 |",
		"in turns (100 µs); goal ≤ 1.05×: GCRA 1.05× (met)",
		"| sluice GCRA | 105 | 1.05× |",
		"| ulule/limiter v3 (fixed window) | 90.0 | 0.90× |",
		"GCRA +30",
		"| cluster, 1 master | sluice GCRA | 180k (0.031) |",
		"| cluster, 3 masters | sluice GCRA | 150k (0.094) |",
		"| cluster, 1 master | sluice GCRA ÷ redis_rate v10 (GCRA) | 4.50× |",
		"| cluster, 3 masters | sluice GCRA ÷ redis_rate v10 (GCRA) | – |",
		"| cluster, 1 master ÷ single server | sluice GCRA | 0.90× |",
		"| c=1 | 9.00k | 50.0 / 80.0 | 50 / 2500 B | +10 allocs / +452 B |",
		"| sluice GCRA | 104 B | 1 | embstr | 1m0s |",
		"| batch 32 | 443k | 1.35 · 1.85 · 1.09 | 5 / 276 B |",
		"`BenchmarkAllow/throttled/c=64-2: harness_test.go:89: 3 of 100 decisions failed; the first: boom`",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}

	var svg bytes.Buffer
	if err := writeChart(&svg, res); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(svg.Bytes()))
	for {
		if _, err := d.Token(); err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("chart is not well-formed XML: %v", err)
			}
			break
		}
	}
	if !strings.Contains(svg.String(), "concurrent callers") || !strings.Contains(svg.String(), "redis_rate v10 (GCRA)") {
		t.Errorf("chart lacks axis label or legend")
	}
}

func TestReplaceSection(t *testing.T) {
	p := filepath.Join(t.TempDir(), "B.md")
	os.WriteFile(p, []byte("intro\n"+beginMarker+"\nold\n"+endMarker+"\noutro\n"), 0o644)
	if err := replaceSection(p, []byte("new\n")); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(p)
	if want := "intro\n" + beginMarker + "\nnew\n" + endMarker + "\noutro\n"; string(got) != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestNiceScale(t *testing.T) {
	for _, c := range []struct{ v, top, step float64 }{
		{412_000, 500_000, 100_000}, {95_000, 100_000, 20_000}, {1, 1, 0.2},
	} {
		top, step := niceScale(c.v)
		if top != c.top || step != c.step {
			t.Errorf("niceScale(%v) = %v, %v; want %v, %v", c.v, top, step, c.top, c.step)
		}
	}
}
