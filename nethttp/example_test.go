package nethttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/nethttp"
)

// Limit a whole mux to 2 requests per minute per client IP.
func Example() {
	rdb := embeddedRedis()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })
	h := nethttp.TokenBucket(rdb, core.PerMinute(2))(mux)

	for range 3 {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		fmt.Printf("%d RateLimit: %s Retry-After: %q\n", rec.Code, rec.Header().Get("RateLimit"), rec.Header().Get("Retry-After"))
	}
	// Output:
	// 200 RateLimit: "token_bucket";r=1;t=30 Retry-After: ""
	// 200 RateLimit: "token_bucket";r=0;t=60 Retry-After: ""
	// 429 RateLimit: "token_bucket";r=0;t=30 Retry-After: "30"
}

// A stricter limit on one route, keyed by the route and the client.
func ExampleRouteKey() {
	rdb := embeddedRedis()

	perRoute := nethttp.GCRA(rdb, core.PerMinute(1),
		nethttp.WithKey(nethttp.RouteKey(nil, keyfunc.RemoteIP())))
	mux := http.NewServeMux()
	mux.Handle("GET /reports/{id}", perRoute(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))

	for _, path := range []string{"/reports/1", "/reports/2"} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		fmt.Println(path, rec.Code)
	}
	// Output:
	// /reports/1 200
	// /reports/2 429
}

// embeddedRedis returns a client of a fresh in-process miniredis, so that
// the examples run without a server.
func embeddedRedis() *redis.Client {
	m, err := miniredis.Run()
	if err != nil {
		panic(err)
	}
	return redis.NewClient(&redis.Options{Addr: m.Addr()})
}
