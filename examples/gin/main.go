// Command gin is a small Gin service limited with sluice.
//
//	go run ./examples/gin
//	for i in $(seq 12); do curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:8080/; done
//
// It needs no setup: without -redis or REDIS_URL it runs an embedded
// miniredis. Every response of a limited route carries the RateLimit-Policy
// and RateLimit headers (curl -i shows them); a denial is a 429 with
// Retry-After.
//
//	GET  /            at most 10 requests in any minute per client IP, shared by
//	                  every route (after the loop above, the others wait a minute too;
//	                  a request a route's own limit denies has counted here already)
//	POST /login       stricter: 3 per minute per client IP
//	GET  /me          per signed-in user: 5 per minute (curl -H 'Authorization: Bearer alice')
//	GET  /search      a two-rule policy: 2 per second and 100 per day, RFC 9457 denials
//	GET  /items/:id   per route and client: 5 per minute for all items together
package main

import (
	"log"
	"net/http"
	"strings"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/example"
	"github.com/sluicehq/sluice/ginlimit"
	"github.com/sluicehq/sluice/keyfunc"
)

func main() {
	addr, rdb, closeRedis := example.Setup()
	defer closeRedis()

	gin.SetMode(gin.ReleaseMode)
	r := gin.New()
	r.Use(gin.Logger(), gin.Recovery())
	// Every route: at most 10 requests in any minute per client IP (the peer address,
	// never c.ClientIP(), which believes forwarding headers).
	r.Use(ginlimit.SlidingWindowLog(rdb, core.PerMinute(10)))

	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "hello\n") })

	// A stricter limit on one route.
	r.POST("/login", ginlimit.FixedWindow(rdb, core.PerMinute(3)), func(c *gin.Context) {
		c.String(http.StatusOK, "welcome\n")
	})

	// Keyed by the signed-in user, which the auth middleware stored with c.Set.
	me := r.Group("/me", auth, ginlimit.TokenBucket(rdb, core.PerMinute(5), ginlimit.WithGinKey(ginlimit.UserKey("user"))))
	me.GET("", func(c *gin.Context) { c.String(http.StatusOK, "you are %s\n", c.GetString("user")) })

	// Two rules decided together: a burst limit and a daily quota.
	policy, err := core.NewPolicy(rdb, []core.Rule{
		{Name: "per-second", Algorithm: core.TokenBucket, Limit: core.PerSecond(2)},
		{Name: "per-day", Algorithm: core.FixedWindow, Limit: core.PerDay(100)},
	})
	if err != nil {
		log.Fatal(err)
	}
	r.GET("/search", ginlimit.New(policy, ginlimit.WithProblemDetails()), func(c *gin.Context) {
		c.String(http.StatusOK, "results for %q\n", c.Query("q"))
	})

	// Keyed by route and client: /items/1 and /items/2 share a budget.
	r.GET("/items/:id", ginlimit.GCRA(rdb, core.PerMinute(5), ginlimit.WithGinKey(ginlimit.RouteKey(keyfunc.RemoteIP()))),
		func(c *gin.Context) { c.String(http.StatusOK, "item %s\n", c.Param("id")) })

	example.Serve(addr, r)
}

// auth is a stand-in for real authentication: it takes the user from
// "Authorization: Bearer <user>" and stores it with c.Set("user", ...).
func auth(c *gin.Context) {
	user, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer ")
	if !ok || user == "" {
		c.Header("WWW-Authenticate", "Bearer")
		c.AbortWithStatusJSON(http.StatusUnauthorized, gin.H{"error": "sign in with: Authorization: Bearer <user>"})
		return
	}
	c.Set("user", user)
	c.Next()
}
