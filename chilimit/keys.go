package chilimit

import (
	"net/http"
	"sync"

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
	method, p, ok := find(r)
	if !ok {
		return ""
	}
	return flow.Route(method, p)
}

// findContexts holds the routing contexts of find, so that looking a
// request up does not allocate one every time.
var findContexts = sync.Pool{New: func() any { return chi.NewRouteContext() }}

// find looks r up in the root chi router: the method it is routed by and
// the full route pattern it matches, "" when it matches none. ok is false
// outside a chi router. It allocates only to join the patterns of mounted
// sub-routers.
func find(r *http.Request) (method, pattern string, ok bool) {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil || rctx.Routes == nil {
		return "", "", false
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
	fctx := findContexts.Get().(*chi.Context)
	fctx.Reset()
	pattern = rctx.Routes.Find(fctx, method, path)
	fctx.Reset() // drop the references to this request's path values
	findContexts.Put(fctx)
	return method, pattern, true
}

// setPattern sets r.Pattern to r's full chi route pattern, or
// keyfunc.NoRoute when it matches none, for keyfunc.Route (see
// flow.SetPattern), and returns the previous r.Pattern. Outside a chi router
// it leaves r.Pattern as it is. Chi's own r.Pattern is incomplete where the
// middleware usually runs: empty before routing (r.Use on the root router)
// and the mount point ("/api/*") in a sub-router.
func setPattern(r *http.Request) (previous string) {
	method, p, ok := find(r)
	if !ok {
		return r.Pattern
	}
	if method != r.Method && p != "" {
		p = method + " " + p // routed by a method an earlier middleware set
	}
	return flow.SetPattern(r, p)
}
