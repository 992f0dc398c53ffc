// Package ginlimit limits Gin engines with sluice.
//
//	r := gin.New()
//	r.Use(ginlimit.TokenBucket(rdb, core.PerSecond(10)))
//
// The middleware is a gin.HandlerFunc with the options and behaviour of
// package nethttp (see its documentation); this package adds key functions
// that read the Gin context: WithGinKey, RouteKey (c.FullPath()) and
// UserKey (a value that authentication middleware set with c.Set). When a
// function of the user's sees the request (a key, cost, skip or limiter
// function, a deny handler), the middleware sets the request's Pattern to
// c.FullPath() while it decides, so keyfunc.Route keys by the Gin route
// too, as RouteKey does.
//
// The default key is the peer address of the connection, never
// c.ClientIP(), which trusts forwarding headers unless the engine's
// trusted proxies are configured.
//
// A limit on one route or group is mounted with Gin's own tools:
//
//	r.POST("/login", ginlimit.FixedWindow(rdb, core.PerMinute(3)), login)
//	api := r.Group("/api", ginlimit.GCRA(rdb, core.PerSecond(50)))
package ginlimit

//go:generate go run ../internal/flow/adaptergen

import (
	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/internal/flow"
)

// middleware runs f for each request (see admit).
func middleware(f *flow.Flow) gin.HandlerFunc {
	return func(c *gin.Context) {
		if !admit(f, c) {
			c.Abort()
			return
		}
		c.Next()
	}
}

// admit decides c's request with f. When a function of the user's sees the
// request (f.ReadsRoute), r.Pattern is the Gin route meanwhile, so that
// keyfunc.Route keys by the route (see flow.SetPattern); it is restored
// even when such a function panics, so that a recoverer sees r.Pattern as
// the router left it.
func admit(f *flow.Flow, c *gin.Context) bool {
	r := c.Request
	if f.ReadsRoute() {
		defer flow.RestorePattern(r, flow.SetPattern(r, c.FullPath()))
	}
	return f.Admit(c.Writer, r, c)
}
