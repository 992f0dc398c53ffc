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
// default key, the peer address, the middleware does no lookup. (RouteKey
// looks the request up once more, so that it also works outside the
// middleware; keyfunc.Route reads the pattern the middleware set.)
//
// A limit on one route or group is mounted with chi's own tools:
//
//	r.With(chilimit.FixedWindow(rdb, core.PerMinute(3))).Post("/login", login)
//	r.Route("/api", func(r chi.Router) {
//		r.Use(chilimit.GCRA(rdb, core.PerSecond(50)))
//		r.Get("/items/{id}", item)
//	})
package chilimit

//go:generate go run ../internal/flow/adaptergen

import (
	"net/http"

	"github.com/sluicehq/sluice/internal/flow"
)

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
