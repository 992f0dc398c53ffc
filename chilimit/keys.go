package chilimit

import (
	"net/http"

	"github.com/go-chi/chi/v5"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/keyfunc"
)

// RouteKey keys requests by the chi route pattern they match:
// "route:<METHOD> <pattern>", such as "route:GET /users/{id}". With Funcs
// in with, the key joins them (keyfunc.Join), so RouteKey(keyfunc.RemoteIP())
// limits each client per route.
//
// Chi completes a request's RoutePattern only after routing, but a
// middleware mounted with r.Use runs before routing. RouteKey therefore
// does not read the pattern built so far: it looks the request up in the
// root router (chi's Routes.Find, which descends into mounted sub-routers)
// and gets the full pattern wherever the middleware is mounted: r.Use on the
// root router, r.Use inside r.Route or r.Group, r.With, or around a single
// handler. Requests that match no route share one key, "route:(no route)",
// and a method other than the standard ones counts as "OTHER". Outside a
// chi router there is no pattern: a key error (keyfunc.ErrNoKey), handled by
// the key-error policy (see WithKey).
func RouteKey(with ...keyfunc.Func) keyfunc.Func {
	return flow.RouteKey(pattern, with)
}

// pattern returns "<METHOD> <full chi route pattern>" of r, or "" outside chi.
func pattern(r *http.Request) string {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil || rctx.Routes == nil {
		return ""
	}
	method, path := r.Method, r.URL.RawPath
	if path == "" {
		path = r.URL.Path
	}
	if len(rctx.RoutePatterns) == 0 {
		// Still in the root router, before routing: honour the routing
		// path and method that an earlier middleware may have set.
		if rctx.RoutePath != "" {
			path = rctx.RoutePath
		}
		if rctx.RouteMethod != "" {
			method = rctx.RouteMethod
		}
	}
	if path == "" {
		path = "/"
	}
	return flow.Route(method, rctx.Routes.Find(chi.NewRouteContext(), method, path))
}
