package nethttp

import (
	"net/http"
	"strings"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/keyfunc"
)

// RouteKey keys requests by the ServeMux pattern they match:
// "route:<METHOD> <path pattern>", such as "route:GET /users/{id}". A
// pattern registered with a method keys by that method (a HEAD request that
// "GET /x" serves shares its budget); one without keys by the request's.
// With Funcs in with, the key joins them (keyfunc.Join), so
// RouteKey(mux, keyfunc.RemoteIP()) limits each client per route.
//
// Inside mux (a middleware wrapping a registered handler) the pattern is
// r.Pattern. Around mux (wrapping the whole mux) it is found with
// mux.Handler(r); mux may be nil when the middleware only wraps handlers.
// Requests that match no pattern share one key, "route:(no route)", and a
// method other than the standard ones counts as "OTHER".
func RouteKey(mux *http.ServeMux, with ...keyfunc.Func) keyfunc.Func {
	return flow.RouteKey(func(r *http.Request) string {
		pattern := r.Pattern
		if pattern == "" && mux != nil {
			_, pattern = mux.Handler(r)
		}
		if i := strings.IndexAny(pattern, " \t"); i >= 0 {
			// "GET /x": the method as registered, which also serves HEAD,
			// so that HEAD and GET of a route share one budget.
			return flow.Route(pattern[:i], strings.TrimLeft(pattern[i:], " \t"))
		}
		return flow.Route(r.Method, pattern)
	}, with)
}
