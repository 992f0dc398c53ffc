// Command chi is a small chi service limited with sluice.
//
//	go run ./examples/chi
//	for i in $(seq 12); do curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:8080/; done
//
// It needs no setup: without -redis or REDIS_URL it runs an embedded
// miniredis. Every response of a limited route carries the RateLimit-Policy
// and RateLimit headers (curl -i shows them); a denial is a 429 with
// Retry-After.
//
//	GET  /             every route: at most 10 requests in any minute per client IP
//	POST /login        stricter: 3 per minute per client IP
//	GET  /me           per signed-in user: 5 per minute (curl -H 'Authorization: Bearer alice')
//	GET  /search       a two-rule policy: 2 per second and 100 per day, RFC 9457 denials
//	GET  /items/{id}   per route pattern and client: 5 per minute for all items together
package main

import (
	"fmt"
	"log"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/sluicehq/sluice/chilimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/example"
	"github.com/sluicehq/sluice/keyfunc"
)

func main() {
	addr, rdb, closeRedis := example.Setup()
	defer closeRedis()

	r := chi.NewRouter()
	// Every route: at most 10 requests in any minute per client IP (the peer address).
	r.Use(chilimit.SlidingWindowLog(rdb, core.PerMinute(10)))

	r.Get("/", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })

	// A stricter limit on one route.
	r.With(chilimit.FixedWindow(rdb, core.PerMinute(3))).Post("/login", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "welcome")
	})

	// Keyed by the signed-in user, which the auth middleware stored.
	r.Group(func(r chi.Router) {
		r.Use(auth)
		r.Use(chilimit.TokenBucket(rdb, core.PerMinute(5), chilimit.WithKey(keyfunc.User())))
		r.Get("/me", func(w http.ResponseWriter, r *http.Request) {
			user, _ := keyfunc.UserFromContext(r.Context())
			fmt.Fprintf(w, "you are %s\n", user)
		})
	})

	// Two rules decided together: a burst limit and a daily quota.
	policy, err := core.NewPolicy(rdb, []core.Rule{
		{Name: "per-second", Algorithm: core.TokenBucket, Limit: core.PerSecond(2)},
		{Name: "per-day", Algorithm: core.FixedWindow, Limit: core.PerDay(100)},
	})
	if err != nil {
		log.Fatal(err)
	}
	r.With(chilimit.New(policy, chilimit.WithProblemDetails())).Get("/search", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "results for %q\n", r.URL.Query().Get("q"))
	})

	// Keyed by route pattern and client: /items/1 and /items/2 share a budget.
	r.With(chilimit.GCRA(rdb, core.PerMinute(5), chilimit.WithKey(chilimit.RouteKey(keyfunc.RemoteIP())))).
		Get("/items/{id}", func(w http.ResponseWriter, r *http.Request) {
			fmt.Fprintf(w, "item %s\n", chi.URLParam(r, "id"))
		})

	example.Serve(addr, r)
}

// auth is a stand-in for real authentication: it takes the user from
// "Authorization: Bearer <user>" and stores it for keyfunc.User.
func auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || user == "" {
			w.Header().Set("WWW-Authenticate", "Bearer")
			http.Error(w, "sign in with: Authorization: Bearer <user>", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(keyfunc.WithUser(r.Context(), user)))
	})
}
