package ginlimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/ginlimit"
	"github.com/sluicehq/sluice/keyfunc"
)

// Limit an engine to 2 requests per minute per client IP.
func Example() {
	rdb := embeddedRedis()

	r := gin.New()
	r.Use(ginlimit.TokenBucket(rdb, core.PerMinute(2)))
	r.GET("/", func(c *gin.Context) { c.String(http.StatusOK, "hello") })

	for range 3 {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest("GET", "/", nil))
		fmt.Printf("%d RateLimit: %s Retry-After: %q\n", rec.Code, rec.Header().Get("RateLimit"), rec.Header().Get("Retry-After"))
	}
	// Output:
	// 200 RateLimit: "token_bucket";r=1;t=30 Retry-After: ""
	// 200 RateLimit: "token_bucket";r=0;t=60 Retry-After: ""
	// 429 RateLimit: "token_bucket";r=0;t=30 Retry-After: "30"
}

// Key by the user that authentication middleware stored with c.Set; the
// limit applies to one group of routes.
func ExampleUserKey() {
	rdb := embeddedRedis()

	r := gin.New()
	auth := func(c *gin.Context) { c.Set("user", c.GetHeader("X-User")); c.Next() }
	api := r.Group("/api", auth, ginlimit.GCRA(rdb, core.PerMinute(1), ginlimit.WithGinKey(ginlimit.UserKey("user"))))
	api.GET("/me", func(c *gin.Context) {})

	for _, user := range []string{"alice", "alice", "bob"} {
		req := httptest.NewRequest("GET", "/api/me", nil)
		req.Header.Set("X-User", user)
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		fmt.Println(user, rec.Code)
	}
	// Output:
	// alice 200
	// alice 429
	// bob 200
}

// One budget per client per route: keyfunc.Route sees the Gin route, so
// /users/1 and /users/2 share a budget and /items/1 has its own.
func Example_routeKey() {
	rdb := embeddedRedis()

	r := gin.New()
	r.Use(ginlimit.GCRA(rdb, core.PerMinute(1), ginlimit.WithKey(keyfunc.Join(keyfunc.RemoteIP(), keyfunc.Route()))))
	r.GET("/users/:id", func(c *gin.Context) {})
	r.GET("/items/:id", func(c *gin.Context) {})

	for _, path := range []string{"/users/1", "/users/2", "/items/1"} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		fmt.Println(path, rec.Code)
	}
	// Output:
	// /users/1 200
	// /users/2 429
	// /items/1 200
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
