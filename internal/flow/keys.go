package flow

import (
	"fmt"
	"net/http"

	"github.com/sluicehq/sluice/keyfunc"
)

// RoutePattern returns "<METHOD> <pattern>", the route part of a route key.
// Requests that match no route have the empty pattern and so share one key
// per method; a key error there would report every 404.
func RoutePattern(r *http.Request, pattern string) string {
	return r.Method + " " + pattern
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
// context (Gin, Echo): the returned function is called with the pattern the
// adapter read. It keys a shallow copy of r whose Pattern field carries the
// route, so the keyfunc Funcs see the request as it is otherwise.
func ContextRouteKey(with []keyfunc.Func) func(r *http.Request, pattern string) (string, error) {
	key := RouteKey(func(r *http.Request) string { return r.Pattern }, with)
	return func(r *http.Request, pattern string) (string, error) {
		routed := *r
		routed.Pattern = RoutePattern(r, pattern)
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
