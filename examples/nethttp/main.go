// Command nethttp is a small net/http service limited with sluice.
//
//	go run ./examples/nethttp
//	for i in $(seq 12); do curl -s -o /dev/null -w '%{http_code}\n' http://127.0.0.1:8080/; done
//
// It needs no setup: without -redis or REDIS_URL it runs an embedded
// miniredis. Every response of a limited route carries the RateLimit-Policy
// and RateLimit headers (curl -i shows them); a denial is a 429 with
// Retry-After.
//
//	GET  /        every route: at most 10 requests in any minute per client IP
//	POST /login   stricter: 3 per minute per client IP
//	GET  /me      per signed-in user: 5 per minute (curl -H 'Authorization: Bearer alice')
//	GET  /search  a two-rule policy: 2 per second and 100 per day, RFC 9457 denials
package main

import (
	"fmt"
	"log"
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/example"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/nethttp"
)

func main() {
	addr, rdb, closeRedis := example.Setup()
	defer closeRedis()

	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello")
	})

	// A stricter limit on one route: wrap its handler.
	login := nethttp.FixedWindow(rdb, core.PerMinute(3))
	mux.Handle("POST /login", login(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "welcome")
	})))

	// Keyed by the signed-in user, which the auth middleware stored.
	perUser := nethttp.TokenBucket(rdb, core.PerMinute(5), nethttp.WithKey(keyfunc.User()))
	mux.Handle("GET /me", auth(perUser(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		user, _ := keyfunc.UserFromContext(r.Context())
		fmt.Fprintf(w, "you are %s\n", user)
	}))))

	// Two rules decided together: a burst limit and a daily quota.
	policy, err := core.NewPolicy(rdb, []core.Rule{
		{Name: "per-second", Algorithm: core.TokenBucket, Limit: core.PerSecond(2)},
		{Name: "per-day", Algorithm: core.FixedWindow, Limit: core.PerDay(100)},
	})
	if err != nil {
		log.Fatal(err)
	}
	search := nethttp.New(policy, nethttp.WithProblemDetails())
	mux.Handle("GET /search", search(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "results for %q\n", r.URL.Query().Get("q"))
	})))

	// Every route: at most 10 requests in any minute per client IP (the peer address).
	limit := nethttp.SlidingWindowLog(rdb, core.PerMinute(10))
	example.Serve(addr, limit(mux))
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
