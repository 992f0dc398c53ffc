package chilimit

import (
	"net/http"
	"strings"
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
// does not read the pattern built so far: it looks the request up as chi
// routes it (by the path and method a middleware before it may have
// rewritten, such as StripSlashes or GetHead, from the sub-router chi has
// reached) and gets the full pattern wherever the middleware is mounted:
// r.Use on the root router, r.Use inside r.Route or r.Group (a Group
// around r.Route too), r.With (before Mount or Route too), or around a
// single handler. The pattern is named as chi's RoutePattern names it once
// routed, without a trailing slash: two routes that differ only by one
// ("/users" and "/users/") share a key, as chi names them alike. Requests
// that match no route share one key,
// "route:(no route)", and a method other than the standard ones counts as
// "OTHER". A router wrapped by the middleware and then mounted,
// r.Mount("/api", mw(sub)), is a handler to chi, which the middleware
// cannot look into: its requests are keyed by the mount point,
// "route:GET /api/*", as keyfunc.Route keys them; put the middleware
// inside it, sub.Use(mw), to key them by their routes. Outside a chi router there is no pattern: a key error
// (keyfunc.ErrNoKey), handled by the key-error policy (see WithKey).
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

// find looks r up as chi routes it: the method it is routed by and the
// full route pattern it matches, "" when it matches none. ok is false
// outside a chi router. It allocates only to join the patterns of mounted
// sub-routers.
//
// Chi routes by rctx.RouteMethod and rctx.RoutePath when they are set: a
// middleware before routing may set them (GetHead routes a HEAD as a GET,
// StripSlashes and CleanPath rewrite the path), the root router sets the
// method, and each mount leaves its sub-router the rest of the path. So
// find follows the mounts chi has passed (rctx.RoutePatterns) from the
// root router to the one that routes next, and looks up there what is
// left of the path, as chi will. When chi has already chosen the route
// (r.With, a handler wrapped by the middleware), its pattern is whole.
func find(r *http.Request) (method, pattern string, ok bool) {
	rctx := chi.RouteContext(r.Context())
	if rctx == nil || rctx.Routes == nil {
		return "", "", false
	}
	method = r.Method
	if rctx.RouteMethod != "" {
		method = rctx.RouteMethod
	}
	routes := rctx.Routes
	for _, p := range rctx.RoutePatterns {
		sub := mounted(routes, p)
		if sub == nil { // a route: chi has chosen it
			return method, rctx.RoutePattern(), true
		}
		routes = sub
	}
	path := rctx.RoutePath
	if len(rctx.RoutePatterns) > 0 {
		// A middleware that wraps the last mount's handler (r.Use in a
		// Group around r.Route, r.With before Mount or Route) runs after
		// chi matched the mount and before the mount leaves its
		// sub-router the rest of the path: the value of the mount's "*"
		// ("" for the mount's own path), which the mount clears once it
		// has moved the path on. Still there, or the path never moved
		// (none, at the root), that rest is the path to look up.
		v := ""
		if k := rctx.URLParams.Keys; len(k) > 0 && k[len(k)-1] == "*" && len(rctx.URLParams.Values) == len(k) {
			v = rctx.URLParams.Values[len(k)-1]
		}
		if v != "" || path == "" {
			path = "/" + v
		}
	}
	if path == "" {
		if path = r.URL.RawPath; path == "" {
			path = r.URL.Path
		}
	}
	if path == "" {
		path = "/"
	}
	fctx := findContexts.Get().(*chi.Context)
	fctx.Reset()
	if pattern = routes.Find(fctx, method, path); pattern != "" {
		pattern = routePattern(fctx, rctx.RoutePatterns, pattern)
	}
	fctx.Reset() // drop the references to this request's path values
	findContexts.Put(fctx)
	return method, pattern, true
}

// routePattern names pattern, found in the sub-router reached through the
// mounts of mounts, as chi names a routed request's (Context.RoutePattern,
// asked of fctx): the mounts' patterns, then the route's, without a
// mount's "/*/" inside or a trailing slash. The mounts' patterns are joined
// here, with one allocation, rather than by RoutePattern, which would take
// two.
func routePattern(fctx *chi.Context, mounts []string, pattern string) string {
	if len(mounts) > 0 {
		n := len(pattern)
		for _, p := range mounts {
			n += len(strings.TrimSuffix(p, "/*"))
		}
		var b strings.Builder
		b.Grow(n)
		for _, p := range mounts {
			b.WriteString(strings.TrimSuffix(p, "/*"))
		}
		b.WriteString(pattern)
		pattern = b.String()
	}
	fctx.RoutePatterns = append(fctx.RoutePatterns[:0], pattern)
	return fctx.RoutePattern()
}

// mountKey names the route of pattern in a chi router.
type mountKey struct {
	in      *chi.Mux
	pattern string
}

// mountedRoutes caches mounted for chi's own routers: what a router mounts
// at one of its patterns never changes (chi refuses a second Mount at a
// pattern, and a route cannot become a mount), and listing a router's
// routes, as mounted must, allocates for each of them. Up to maxMounted
// entries, so that routers made and dropped (as in tests) are not kept
// without bound; past it, mounted lists the routes every time.
var mountedRoutes struct {
	sync.RWMutex
	m map[mountKey]chi.Routes
}

const maxMounted = 4096

// mounted returns the router mounted at pattern in the router in, or nil
// when pattern is one of its routes (or none of its patterns).
func mounted(in chi.Routes, pattern string) chi.Routes {
	mux, cache := in.(*chi.Mux)
	k := mountKey{mux, pattern}
	if cache {
		mountedRoutes.RLock()
		sub, ok := mountedRoutes.m[k]
		mountedRoutes.RUnlock()
		if ok {
			return sub
		}
	}
	var sub chi.Routes
	for _, rt := range in.Routes() {
		if rt.Pattern == pattern {
			sub = rt.SubRoutes
			break
		}
	}
	if cache {
		mountedRoutes.Lock()
		if mountedRoutes.m == nil {
			mountedRoutes.m = make(map[mountKey]chi.Routes)
		}
		if len(mountedRoutes.m) < maxMounted {
			mountedRoutes.m[k] = sub
		}
		mountedRoutes.Unlock()
	}
	return sub
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
