package flow

import (
	"fmt"
	"net/http"
	"reflect"
	"strconv"

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

// UserKey returns the key "user:<v>" of a user id v that authentication
// middleware stored under name. v may be a string, an integer or a
// fmt.Stringer; a missing or empty value is an error wrapping
// keyfunc.ErrNoKey (an anonymous request), handled by the key-error policy.
func UserKey(name string, v any) (string, error) {
	var s string
	switch v := v.(type) {
	case string:
		s = v
	case int:
		s = strconv.FormatInt(int64(v), 10)
	case int64:
		s = strconv.FormatInt(v, 10)
	case int32:
		s = strconv.FormatInt(int64(v), 10)
	case uint:
		s = strconv.FormatUint(uint64(v), 10)
	case uint64:
		s = strconv.FormatUint(v, 10)
	case uint32:
		s = strconv.FormatUint(uint64(v), 10)
	case fmt.Stringer:
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
			break
		}
		s = v.String()
	case nil:
	default:
		return "", &keyfunc.KeyError{Source: "context",
			Err: fmt.Errorf("user id of type %T under %q is not a string, an integer or a fmt.Stringer", v, name)}
	}
	if s == "" {
		return "", &keyfunc.KeyError{Source: "context", Err: fmt.Errorf("%w: no user id under %q", keyfunc.ErrNoKey, name)}
	}
	return "user:" + s, nil
}
