package echolimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/echolimit"
)

// Limit a server to 2 requests per minute per client IP, and answer
// denials with RFC 9457 problem details.
func Example() {
	rdb := embeddedRedis()

	e := echo.New()
	e.Use(echolimit.TokenBucket(rdb, core.PerMinute(2), echolimit.WithProblemDetails()))
	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "hello") })

	for range 3 {
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		fmt.Println(rec.Code, rec.Header().Get("RateLimit"))
	}
	// Output:
	// 200 "token_bucket";r=1;t=30
	// 200 "token_bucket";r=0;t=60
	// 429 "token_bucket";r=0;t=30
}

// Key by route: every client of GET /reports/:id shares one budget, which
// protects an expensive endpoint as a whole.
func ExampleRouteKey() {
	rdb := embeddedRedis()

	e := echo.New()
	e.GET("/reports/:id", func(c echo.Context) error { return nil },
		echolimit.FixedWindow(rdb, core.PerHour(1), echolimit.WithEchoKey(echolimit.RouteKey())))

	for _, peer := range []string{"192.0.2.1:1234", "198.51.100.7:1234"} {
		req := httptest.NewRequest("GET", "/reports/1", nil)
		req.RemoteAddr = peer
		rec := httptest.NewRecorder()
		e.ServeHTTP(rec, req)
		fmt.Println(peer, rec.Code)
	}
	// Output:
	// 192.0.2.1:1234 200
	// 198.51.100.7:1234 429
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
