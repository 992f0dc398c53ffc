// Command echo is a small Echo service limited with sluice.
//
//	go run ./examples/echo
//	for i in $(seq 12); do curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:8080/; done
//
// It needs no setup: without -redis or REDIS_URL it runs an embedded
// miniredis. Every response of a limited route carries the RateLimit-Policy
// and RateLimit headers (curl -i shows them); a denial is a 429 with
// Retry-After.
//
//	GET  /            every route: at most 10 requests in any minute per client IP
//	POST /login       stricter: 3 per minute per client IP
//	GET  /me          per signed-in user: 5 per minute (curl -H 'Authorization: Bearer alice')
//	GET  /search      a two-rule policy: 2 per second and 100 per day, RFC 9457 denials
//	GET  /items/:id   per route and client: 5 per minute for all items together
package main

import (
	"fmt"
	"log"
	"net/http"
	"strings"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/echolimit"
	"github.com/sluicehq/sluice/examples/internal/example"
	"github.com/sluicehq/sluice/keyfunc"
)

func main() {
	addr, rdb, closeRedis := example.Setup()
	defer closeRedis()

	e := echo.New()
	e.HideBanner = true
	// Every route: at most 10 requests in any minute per client IP (the peer address,
	// never c.RealIP(), which believes forwarding headers). Mounted with
	// Use, after routing, so that route keys know the route.
	e.Use(echolimit.SlidingWindowLog(rdb, core.PerMinute(10)))

	e.GET("/", func(c echo.Context) error { return c.String(http.StatusOK, "hello\n") })

	// A stricter limit on one route.
	e.POST("/login", func(c echo.Context) error { return c.String(http.StatusOK, "welcome\n") },
		echolimit.FixedWindow(rdb, core.PerMinute(3)))

	// Keyed by the signed-in user, which the auth middleware stored with c.Set.
	e.GET("/me", func(c echo.Context) error { return c.String(http.StatusOK, fmt.Sprintf("you are %v\n", c.Get("user"))) },
		auth, echolimit.TokenBucket(rdb, core.PerMinute(5), echolimit.WithEchoKey(echolimit.UserKey("user"))))

	// Two rules decided together: a burst limit and a daily quota.
	policy, err := core.NewPolicy(rdb, []core.Rule{
		{Name: "per-second", Algorithm: core.TokenBucket, Limit: core.PerSecond(2)},
		{Name: "per-day", Algorithm: core.FixedWindow, Limit: core.PerDay(100)},
	})
	if err != nil {
		log.Fatal(err)
	}
	e.GET("/search", func(c echo.Context) error {
		return c.String(http.StatusOK, "results for \""+c.QueryParam("q")+"\"\n")
	}, echolimit.New(policy, echolimit.WithProblemDetails()))

	// Keyed by route and client: /items/1 and /items/2 share a budget.
	e.GET("/items/:id", func(c echo.Context) error { return c.String(http.StatusOK, "item "+c.Param("id")+"\n") },
		echolimit.GCRA(rdb, core.PerMinute(5), echolimit.WithEchoKey(echolimit.RouteKey(keyfunc.RemoteIP()))))

	example.Serve(addr, e)
}

// auth is a stand-in for real authentication: it takes the user from
// "Authorization: Bearer <user>" and stores it with c.Set("user", ...).
func auth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		user, ok := strings.CutPrefix(c.Request().Header.Get("Authorization"), "Bearer ")
		if !ok || user == "" {
			c.Response().Header().Set("WWW-Authenticate", "Bearer")
			return echo.NewHTTPError(http.StatusUnauthorized, "sign in with: Authorization: Bearer <user>")
		}
		c.Set("user", user)
		return next(c)
	}
}
