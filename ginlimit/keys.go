package ginlimit

import (
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/internal/flow"
	"github.com/sluicehq/sluice/keyfunc"
)

// WithGinKey sets who is limited with a function of the Gin context, such
// as RouteKey or UserKey. Key errors are handled as for WithKey.
//
// A nil f panics at construction.
func WithGinKey(f func(*gin.Context) (string, error)) Option {
	if f == nil {
		return func(c *flow.Config) { c.NilKey("WithGinKey") }
	}
	return flow.WithContextKey(func(_ *http.Request, rc any) (string, error) {
		c, ok := rc.(*gin.Context)
		if !ok {
			return "", errors.New("ginlimit: WithGinKey: no Gin context")
		}
		return f(c)
	})
}

// RouteKey keys requests by the route they match, c.FullPath():
// "route:<METHOD> <path>", such as "route:GET /users/:id". With Funcs in
// with, the key joins them (as keyfunc.Join does), so
// RouteKey(keyfunc.RemoteIP()) limits each client per route. Gin routes
// before any middleware runs, so RouteKey works with r.Use as well as on a
// group or a route. Requests that match no route share one key,
// "route:(no route)", and a method other than the standard ones counts as
// "OTHER".
// Use it with WithGinKey.
func RouteKey(with ...keyfunc.Func) func(*gin.Context) (string, error) {
	key := flow.ContextRouteKey(with)
	return func(c *gin.Context) (string, error) { return key(c.Request, c.FullPath()) }
}

// UserKey keys requests by the user id that authentication middleware
// stored with c.Set(name, id): "user:<id>". The id may be a string, an
// integer or a fmt.Stringer, of a named type too. A request without one
// (anonymous) is a key error: limited by its peer address and reported,
// or answered 400 with WithKeyErrorReject. Use it with WithGinKey.
func UserKey(name string) func(*gin.Context) (string, error) {
	return func(c *gin.Context) (string, error) {
		v, _ := c.Get(name)
		return flow.UserKey(name, v)
	}
}
