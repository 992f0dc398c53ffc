package echolimit

import (
	"errors"
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/keyfunc"
)

// WithEchoKey sets who is limited with a function of the Echo context, such
// as RouteKey or UserKey. Key errors are handled as for WithKey.
//
// A nil f panics at construction.
func WithEchoKey(f func(echo.Context) (string, error)) Option {
	if f == nil {
		return func(c *flow.Config) { c.NilKey("WithEchoKey") }
	}
	return flow.WithContextKey(func(_ *http.Request, rc any) (string, error) {
		c, ok := rc.(echo.Context)
		if !ok {
			return "", errors.New("echolimit: WithEchoKey: no Echo context")
		}
		return f(c)
	})
}

// RouteKey keys requests by the route they match, c.Path():
// "route:<METHOD> <path>", such as "route:GET /users/:id". With Funcs in
// with, the key joins them (as keyfunc.Join does), so
// RouteKey(keyfunc.RemoteIP()) limits each client per route. Echo routes
// before the middleware of e.Use, a group or a route runs; under e.Pre the
// middleware looks the route up itself (see the package documentation), so
// RouteKey works there too. Requests that match no route share one key,
// "route:(no route)", and a method other than the standard ones counts as
// "OTHER". A request whose path matches a route but whose method does not
// (Echo answers it 405, or an OPTIONS itself) is keyed by that route's
// path, as Echo's c.Path() reports it: at most ten keys per route. Use it
// with WithEchoKey.
func RouteKey(with ...keyfunc.Func) func(echo.Context) (string, error) {
	key := flow.ContextRouteKey(with)
	return func(c echo.Context) (string, error) { return key(c.Request(), c.Path()) }
}

// UserKey keys requests by the user id that authentication middleware
// stored with c.Set(name, id): "user:<id>". The id may be a string, an
// integer or a fmt.Stringer, of a named type too. A request without one
// (anonymous) is a key error: limited by its peer address and reported,
// or answered 400 with WithKeyErrorReject. Use it with WithEchoKey.
func UserKey(name string) func(echo.Context) (string, error) {
	return func(c echo.Context) (string, error) {
		return flow.UserKey(name, c.Get(name))
	}
}
