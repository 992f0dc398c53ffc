package keyfunc

import (
	"net/http"
	"strings"
)

// NoRoute is the route pattern of a request that the router matched to no
// route (a 404). The chilimit, ginlimit and echolimit middlewares set it as
// the request's Pattern while they decide (when a function of yours may
// read the route), and nethttp.RouteKey keys by it, so that every such
// request shares one key, "route:(no route)", whatever its path
// and method: a key per path would let a client make up paths for fresh
// budgets, and a key error would report every 404. A router of your own can
// set it too.
const NoRoute = "(no route)"

var (
	errNoRoute = &KeyError{Source: "route", Err: detail(ErrNoKey,
		"request has no route pattern: no router has matched it yet "+
			"(with net/http, wrap the handlers registered on the ServeMux, or use nethttp.RouteKey(mux))")}
	errNoPattern = &KeyError{Source: "route", Err: detail(ErrNoKey, "request has no route pattern")}
)

// Route returns the Func keying a request by the route it matched:
// "route:<METHOD> <pattern>", such as "route:GET /reports/{id}". On its own
// it limits every client of a route together, which protects an expensive
// endpoint as a whole; joined with a client key it limits each client per
// route:
//
//	keyfunc.Join(keyfunc.RemoteIP(), keyfunc.Route())
//
// The route is r.Pattern. http.ServeMux sets it once it has routed the
// request, so with net/http wrap the handlers registered on the mux, not
// the mux itself (or use nethttp.RouteKey(mux), which also works around
// it). chi sets it after routing too, but a middleware mounted with r.Use
// runs before; the chilimit, ginlimit and echolimit middlewares therefore
// set r.Pattern themselves while they decide, to the full route pattern
// (chi's, including mounted sub-routers; Gin's c.FullPath(); Echo's
// c.Path(), or under e.Pre the route Echo will choose), so Route works
// under every adapter wherever it is mounted and gives the same key as the
// adapter's own RouteKey. They do so only when a function of the user's
// sees the request (a key, cost, skip or limiter function, a deny
// handler): finding the route costs chilimit a router lookup per request,
// which allocates under mounted sub-routers, and echolimit one under
// e.Pre; with the default key nobody reads it and nothing is paid.
//
// A pattern registered with a method ("GET /reports/{id}", which also
// serves HEAD) keys by that method; a pattern without one keys by the
// request's method, where a method other than the nine of RFC 9110 and
// PATCH counts as "OTHER", so a route that accepts any method has at most
// ten budgets per key, not one per method a client makes up. A request
// that matched no route (NoRoute) is keyed "route:(no route)". A request
// without a pattern (no router has routed it) is an ErrNoKey.
//
// Patterns longer than 64 bytes or not printable ASCII are hashed, as by
// RouteFrom. Route allocates only the key.
func Route() Func { return routeKey }

// routeKey is the Func of Route.
func routeKey(r *http.Request) (string, error) {
	p := r.Pattern
	switch p {
	case "":
		return "", errNoRoute
	case NoRoute:
		return "route:" + NoRoute, nil // a constant: no allocation
	}
	method := r.Method
	if i := strings.IndexAny(p, " \t"); i > 0 && strings.IndexByte(p[:i], '/') < 0 {
		// "GET /x", as http.ServeMux patterns carry their method.
		method, p = p[:i], strings.TrimLeft(p[i:], " \t")
	}
	method = RouteMethod(method)
	if isPlain(p) && len(method)+1+len(p) <= maxRawValue {
		return "route:" + method + " " + p, nil
	}
	return hashedKey("route", "", method+" "+p), nil
}

// RouteMethod returns the method under which a route key counts a request
// of method m: m itself for the eight methods of RFC 9110 and PATCH,
// "OTHER" for any other. A route that accepts any method then has at most ten
// budgets per key.
func RouteMethod(m string) string {
	switch m {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodConnect, http.MethodOptions, http.MethodTrace:
		return m
	}
	return "OTHER"
}

// RouteFrom returns the Func keying a request by the route pattern that
// pattern extracts, for routers other than the ones Route knows:
// "route:<pattern>", hashed as "route#<32 hex digits>" when longer than 64
// bytes or not printable ASCII. The extractor must return the pattern
// ("/users/{id}"), never the raw path: every distinct path would be a key
// of its own. An empty pattern is an ErrNoKey. RouteFrom panics if pattern
// is nil.
func RouteFrom(pattern func(*http.Request) string) Func {
	if pattern == nil {
		panic("keyfunc: RouteFrom: nil pattern extractor")
	}
	return func(r *http.Request) (string, error) {
		p := pattern(r)
		if p == "" {
			return "", errNoPattern
		}
		return valueKey("route", "", p), nil
	}
}
