package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"strings"
	"testing"
	"time"
)

const httpSample = `bench-env: nproc=2 gomaxprocs=2 go=go1.26.8 redis=7.0.15 cpu="AMD EPYC"
BenchmarkHTTP/nethttp/c=1-2     	       1	1201570119 ns/op	        30.0 none-p50-us	       300 none-p99-us	     17000 none-req/s	       130.0 redis_rate-p50-us	       250.0 redis_rate-p99-us	      7000 redis_rate-req/s	       150.0 sluice-p50-us	       450.0 sluice-p99-us	      6000 sluice-req/s	       152.5 sluice-cli-us/req	        54.1 sluice-srv-us/req	         1.000 sluice-calls/req	       120.0 ulule-p50-us	       250.0 ulule-p99-us	      8000 ulule-req/s
BenchmarkHTTP/nethttp/c=64-2    	       1	1232548352 ns/op	      1900 none-p50-us	     14000 none-p99-us	     22000 none-req/s	      5600 redis_rate-p50-us	     17000 redis_rate-p99-us	      9000 redis_rate-req/s	      3200 sluice-p50-us	      9800 sluice-p99-us	     18000 sluice-req/s	      5300 ulule-p50-us	     18000 ulule-p99-us	     10000 ulule-req/s
BenchmarkHTTP/gin/c=64-2    	       1	1232548352 ns/op	      1000 none-p50-us	     2000 none-p99-us	     30000 none-req/s	      3000 sluice-p50-us	     5000 sluice-p99-us	     20000 sluice-req/s	      4000 ulule-p50-us	     9000 ulule-p99-us	     8000 ulule-req/s
`

func TestHTTPReport(t *testing.T) {
	res, err := parse(strings.NewReader(httpSample))
	if err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	writeMarkdown(&md, res, time.Date(2025, 1, 2, 3, 4, 0, 0, time.UTC))
	out := md.String()
	for _, want := range []string{
		"| net/http ServeMux | 1 | no limiter | 17.0k | 30.0 | 300 | – | – | – | – |",
		"| net/http ServeMux | 1 | sluice GCRA | 6.00k | 150 | 450 | +120 / +150 | 0.75× | 152 · 54.1 | 1.00 |", // ÷ ulule, the faster peer
		"| net/http ServeMux | 1 | redis_rate v10 | 7.00k | 130 | 250 | +100 / -50.0 | – | – | – |",
		"| net/http ServeMux | 64 | sluice GCRA | 18.0k | 3200 | 9800 | +1300 / -4200 | 1.80× | – | – |",
		"| gin | 64 | sluice GCRA | 20.0k | 3000 | 5000 | +2000 / +3000 | 2.50× | – | – |", // only one peer ran
	} {
		if !strings.Contains(out, want) {
			t.Errorf("markdown lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "| gin | 64 | redis_rate") {
		t.Errorf("a variant that did not run has a row:\n%s", out)
	}

	var svg bytes.Buffer
	if err := writeHTTPChart(&svg, res); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(svg.Bytes()))
	for {
		if _, err := d.Token(); err != nil {
			if err != io.EOF {
				t.Fatalf("chart is not well-formed XML: %v", err)
			}
			break
		}
	}
	for _, want := range []string{"c=1", "c=64", "net/http ServeMux", "gin", "ulule/limiter v3", "sluice GCRA"} {
		if !strings.Contains(svg.String(), want) {
			t.Errorf("chart lacks %q", want)
		}
	}

	empty, _ := parse(strings.NewReader("BenchmarkAllow/x/c=1-2 1 1 ns/op 5 decisions/s\n"))
	if err := writeHTTPChart(io.Discard, empty); err == nil {
		t.Error("writeHTTPChart without BenchmarkHTTP results: no error")
	}
}
