package chilimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/alicebob/miniredis/v2"
	"github.com/go-chi/chi/v5"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/chilimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
)

// Limit a router to 3 requests per minute per client IP, with a stricter
// limit on one route (where both limits count, and the headers list both).
func Example() {
	rdb := embeddedRedis()

	r := chi.NewRouter()
	r.Use(chilimit.TokenBucket(rdb, core.PerMinute(3)))
	r.Get("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "hello") })
	r.With(chilimit.FixedWindow(rdb, core.PerHour(1))).Post("/login", func(w http.ResponseWriter, r *http.Request) {})

	for _, req := range []*http.Request{
		httptest.NewRequest("POST", "/login", nil),
		httptest.NewRequest("POST", "/login", nil), // over the route's limit
		httptest.NewRequest("GET", "/", nil),
		httptest.NewRequest("GET", "/", nil), // over the router's limit
	} {
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, req)
		fmt.Println(req.Method, req.URL.Path, rec.Code, rec.Header().Get("RateLimit-Policy"))
	}
	// Output:
	// POST /login 200 "token_bucket";q=3;w=60, "fixed_window";q=1;w=3600
	// POST /login 429 "token_bucket";q=3;w=60, "fixed_window";q=1;w=3600
	// GET / 200 "token_bucket";q=3;w=60
	// GET / 429 "token_bucket";q=3;w=60
}

// Key by route pattern and client, with the middleware mounted with Use:
// /users/1 and /users/2 share one budget.
func ExampleRouteKey() {
	rdb := embeddedRedis()

	r := chi.NewRouter()
	r.Use(chilimit.GCRA(rdb, core.PerMinute(1), chilimit.WithKey(chilimit.RouteKey(keyfunc.RemoteIP()))))
	r.Get("/users/{id}", func(w http.ResponseWriter, r *http.Request) {})
	r.Get("/items/{id}", func(w http.ResponseWriter, r *http.Request) {})

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
