// Command prometheus is a small net/http service limited with sluice whose
// decisions are exported to Prometheus.
//
//	cd examples/observability && go run ./prometheus
//	for i in $(seq 12); do curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:8080/; done
//	curl -s http://127.0.0.1:8080/metrics | grep sluice_
//
// It needs no setup: without -redis or REDIS_URL it runs an embedded
// miniredis.
//
//	GET /         at most 10 requests in any minute per client IP (limiter="global")
//	GET /beta     a new limit of 3 per minute in shadow mode: never denies,
//	              counts what it would deny (limiter="beta", shadow="true")
//	GET /metrics  the metrics, not limited
//
// See Metrics for the metric names and labels.
package main

import (
	"fmt"
	"log"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/example"
	"github.com/sluicehq/sluice/nethttp"
)

func main() {
	addr, rdb, closeRedis := example.Setup()
	defer closeRedis()

	// A registry of its own, holding only sluice's metrics. A service would
	// pass the registry it already serves (prometheus.DefaultRegisterer
	// adds the Go runtime and process metrics).
	reg := prometheus.NewRegistry()
	metrics, err := NewMetrics(reg)
	if err != nil {
		log.Fatal(err)
	}

	hello := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})
	mux := http.NewServeMux()

	// The middleware builds its limiter with the observer and health hook.
	global := nethttp.SlidingWindowLog(rdb, core.PerMinute(10),
		nethttp.WithLimiterOptions(metrics.Options("global")...))
	mux.Handle("GET /{$}", global(hello))

	// Shadow mode: watch what a limit would do before enforcing it.
	beta := nethttp.FixedWindow(rdb, core.PerMinute(3), nethttp.WithShadow(),
		nethttp.WithLimiterOptions(metrics.Options("beta")...))
	mux.Handle("GET /beta", beta(hello))

	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))

	example.Serve(addr, mux)
}
