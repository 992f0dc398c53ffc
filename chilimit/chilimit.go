// Package chilimit limits chi routers with sluice.
//
//	r := chi.NewRouter()
//	r.Use(chilimit.TokenBucket(rdb, core.PerSecond(10)))
//
// The middleware is a func(http.Handler) http.Handler with the options and
// behaviour of package nethttp (see its documentation); this package adds
// the chi route pattern as a key (RouteKey). When a function of the user's
// sees the request (a key, cost, skip or limiter function, a deny handler),
// the middleware also sets the request's Pattern to the full route pattern
// while it decides, so keyfunc.Route gives the same key wherever the
// middleware is mounted. That costs a lookup in the router per request,
// which allocates under mounted sub-routers (r.Route, r.Mount); with the
// default key, the peer address, the middleware does no lookup.
//
// A limit on one route or group is mounted with chi's own tools:
//
//	r.With(chilimit.FixedWindow(rdb, core.PerMinute(3))).Post("/login", login)
//	r.Route("/api", func(r chi.Router) {
//		r.Use(chilimit.GCRA(rdb, core.PerSecond(50)))
//		r.Get("/items/{id}", item)
//	})
package chilimit

//go:generate go run ../internal/flow/optionsgen

import (
	"net/http"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/flow"
)

// FixedWindow limits with the fixed-window algorithm. It panics when limit
// is invalid, with a message naming the problem.
func FixedWindow(client redis.UniversalClient, limit core.Limit, opts ...Option) func(http.Handler) http.Handler {
	return middleware(flow.Must("chilimit.FixedWindow", client, core.FixedWindow, limit, opts))
}

// SlidingWindowLog limits with the exact sliding-window log. It panics when
// limit is invalid.
func SlidingWindowLog(client redis.UniversalClient, limit core.Limit, opts ...Option) func(http.Handler) http.Handler {
	return middleware(flow.Must("chilimit.SlidingWindowLog", client, core.SlidingWindowLog, limit, opts))
}

// SlidingWindowCounter limits with the sliding-window counter. It panics
// when limit is invalid.
func SlidingWindowCounter(client redis.UniversalClient, limit core.Limit, opts ...Option) func(http.Handler) http.Handler {
	return middleware(flow.Must("chilimit.SlidingWindowCounter", client, core.SlidingWindowCounter, limit, opts))
}

// LeakyBucket shapes with the leaky bucket: an admitted request is held for
// its Delay (at most WithMaxDelay) before the next handler runs. It panics
// when limit is invalid.
func LeakyBucket(client redis.UniversalClient, limit core.Limit, opts ...Option) func(http.Handler) http.Handler {
	return middleware(flow.Must("chilimit.LeakyBucket", client, core.LeakyBucket, limit, opts))
}

// TokenBucket limits with the token bucket. It panics when limit is invalid.
func TokenBucket(client redis.UniversalClient, limit core.Limit, opts ...Option) func(http.Handler) http.Handler {
	return middleware(flow.Must("chilimit.TokenBucket", client, core.TokenBucket, limit, opts))
}

// GCRA limits with the generic cell rate algorithm. It panics when limit is
// invalid.
func GCRA(client redis.UniversalClient, limit core.Limit, opts ...Option) func(http.Handler) http.Handler {
	return middleware(flow.Must("chilimit.GCRA", client, core.GCRA, limit, opts))
}

// New limits with l, a limiter of one rule or a policy of several; l may be
// nil when WithLimiterFunc chooses the limiter. It panics only when it is
// given nothing to decide with: a nil l and no WithLimiterFunc.
func New(l *core.Limiter, opts ...Option) func(http.Handler) http.Handler {
	return middleware(flow.MustNew("chilimit.New", l, opts))
}

// middleware runs f for each request (see admit).
func middleware(f *flow.Flow) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if admit(f, w, r) {
				next.ServeHTTP(w, r)
			}
		})
	}
}

// admit decides r with f. When a function of the user's sees the request
// (f.ReadsRoute), r.Pattern is the full chi route pattern meanwhile, so that
// keyfunc.Route keys by the route (see setPattern); it is restored even
// when such a function panics, so that a recoverer sees r.Pattern as the
// router left it.
func admit(f *flow.Flow, w http.ResponseWriter, r *http.Request) bool {
	if f.ReadsRoute() {
		defer flow.RestorePattern(r, setPattern(r))
	}
	return f.Admit(w, r, nil)
}
