package flow

import (
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/keyfunc"
)

// Route returns "<METHOD> <pattern>" for a request of method matching
// pattern, or keyfunc.NoRoute when pattern is empty (requests that match no
// route share one key whatever their method and path). The method is counted as
// keyfunc.RouteMethod says: a method other than the nine of RFC 9110 and
// PATCH becomes "OTHER", so a route that accepts any method (chi's
// HandleFunc, Gin's and Echo's Any, a ServeMux pattern without a method)
// has at most ten budgets per key, not one for every method a client makes
// up.
func Route(method, pattern string) string {
	if pattern == "" {
		return keyfunc.NoRoute
	}
	return keyfunc.RouteMethod(method) + " " + pattern
}

// SetPattern sets r.Pattern to the route that a router adapter matched
// (pattern, or keyfunc.NoRoute when it matched none) for the time of one
// decision, so that keyfunc.Route sees the route under routers that keep it
// in their own context. It returns the previous r.Pattern, which the
// adapter puts back once the decision is made, so the handlers see the
// request as the router left it. Like http.ServeMux, which sets r.Pattern
// on the request it serves, it writes a field of the request that the
// serving goroutine owns: it neither allocates nor copies the request.
func SetPattern(r *http.Request, pattern string) (previous string) {
	previous = r.Pattern
	if pattern == "" {
		pattern = keyfunc.NoRoute
	}
	r.Pattern = pattern
	return previous
}

// RouteKey returns a key function of the route that pattern extracts:
// "route:<METHOD> <pattern>" (keyfunc.RouteFrom), joined with the keys of
// with when there are any (keyfunc.Join). It panics, at construction, on a
// nil Func in with.
func RouteKey(pattern func(*http.Request) string, with []keyfunc.Func) keyfunc.Func {
	route := keyfunc.RouteFrom(pattern)
	if len(with) == 0 {
		return route
	}
	return keyfunc.Join(append([]keyfunc.Func{route}, with...)...)
}

// ContextRouteKey is RouteKey for routers whose pattern lives in their own
// context (Gin, Echo): the returned function is called with the pattern
// read from that context ("" when it knows none) and keys r by it, as
// keyfunc.Route joined with with. Inside the adapter's middleware r.Pattern
// already holds that route (see SetPattern), or, where the context does not
// know the route yet (Echo's e.Pre), the route the adapter found: r is
// keyed as it is, without a copy. Elsewhere it keys a shallow copy of r
// whose Pattern is pattern.
func ContextRouteKey(with []keyfunc.Func) func(r *http.Request, pattern string) (string, error) {
	key := keyfunc.Route()
	if len(with) > 0 {
		key = keyfunc.Join(append([]keyfunc.Func{key}, with...)...)
	}
	return func(r *http.Request, pattern string) (string, error) {
		if pattern == "" {
			pattern = keyfunc.NoRoute
			if r.Pattern != "" {
				pattern = r.Pattern
			}
		}
		if r.Pattern == pattern {
			return key(r)
		}
		routed := *r
		routed.Pattern = pattern
		return key(&routed)
	}
}

// UserKey returns the key of a user id v that authentication middleware
// stored under name, as keyfunc.UserKey makes it ("user:<id>", bounded). A
// missing or empty value is an error wrapping keyfunc.ErrNoKey (an anonymous
// request), handled by the key-error policy.
func UserKey(name string, v any) (string, error) {
	key, err := keyfunc.UserKey(v)
	if err != nil {
		return "", fmt.Errorf("user id under %q: %w", name, err)
	}
	return key, nil
}

// RestorePattern sets r.Pattern back to previous, the value SetPattern
// returned; the adapters defer it, so that it runs even when a function of
// the user's panics during the decision.
func RestorePattern(r *http.Request, previous string) { r.Pattern = previous }
