// Command otel is a small net/http service limited with sluice whose
// decisions are exported as OpenTelemetry metrics.
//
//	cd examples/observability && go run ./otel
//	for i in $(seq 12); do curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:8080/; done
//
// It needs no setup and no collector: without -redis or REDIS_URL it runs
// an embedded miniredis, and it prints the metrics to stdout as JSON every
// -interval (10s). On SIGINT or SIGTERM it prints them once more.
//
//	GET /       at most 10 requests in any minute per client IP (limiter "global")
//	GET /beta   a new limit of 3 per minute in shadow mode: never denies,
//	            counts what it would deny (limiter "beta", shadow true)
//
// See Metrics for the instruments and their attributes.
//
// To send the metrics to a collector instead, replace the stdout exporter
// with OTLP (go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetricgrpc,
// or otlpmetrichttp):
//
//	exporter, err := otlpmetricgrpc.New(ctx) // OTEL_EXPORTER_OTLP_ENDPOINT, default localhost:4317
//
// and keep the rest: the periodic reader, the provider and NewMetrics.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"net/http"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/stdout/stdoutmetric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/example"
	"github.com/sluicehq/sluice/nethttp"
)

func main() {
	interval := flag.Duration("interval", 10*time.Second, "how often to export the metrics")
	addr, rdb, closeRedis := example.Setup()
	defer closeRedis()

	exporter, err := stdoutmetric.New(stdoutmetric.WithPrettyPrint())
	if err != nil {
		log.Fatal(err)
	}
	res, err := resource.Merge(resource.Default(),
		resource.NewSchemaless(attribute.String("service.name", "sluice-example")))
	if err != nil {
		log.Fatal(err)
	}
	provider := sdkmetric.NewMeterProvider(
		sdkmetric.WithReader(sdkmetric.NewPeriodicReader(exporter, sdkmetric.WithInterval(*interval))),
		sdkmetric.WithResource(res),
	)
	defer func() {
		// Export what was measured since the last interval.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := provider.Shutdown(ctx); err != nil {
			log.Print(err)
		}
	}()

	metrics, err := NewMetrics(provider.Meter("github.com/sluicehq/sluice"))
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

	example.Serve(addr, mux)
}
