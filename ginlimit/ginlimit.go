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

//go:generate go run ../internal/flow/optionsgen

import (
	"github.com/gin-gonic/gin"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/flow"
)

// FixedWindow limits with the fixed-window algorithm. It panics when limit
// is invalid, with a message naming the problem.
func FixedWindow(client redis.UniversalClient, limit core.Limit, opts ...Option) gin.HandlerFunc {
	return middleware(flow.Must("ginlimit.FixedWindow", client, core.FixedWindow, limit, opts))
}

// SlidingWindowLog limits with the exact sliding-window log. It panics when
// limit is invalid.
func SlidingWindowLog(client redis.UniversalClient, limit core.Limit, opts ...Option) gin.HandlerFunc {
	return middleware(flow.Must("ginlimit.SlidingWindowLog", client, core.SlidingWindowLog, limit, opts))
}

// SlidingWindowCounter limits with the sliding-window counter. It panics
// when limit is invalid.
func SlidingWindowCounter(client redis.UniversalClient, limit core.Limit, opts ...Option) gin.HandlerFunc {
	return middleware(flow.Must("ginlimit.SlidingWindowCounter", client, core.SlidingWindowCounter, limit, opts))
}

// LeakyBucket shapes with the leaky bucket: an admitted request is held for
// its Delay (at most WithMaxDelay) before the next handler runs. It panics
// when limit is invalid.
func LeakyBucket(client redis.UniversalClient, limit core.Limit, opts ...Option) gin.HandlerFunc {
	return middleware(flow.Must("ginlimit.LeakyBucket", client, core.LeakyBucket, limit, opts))
}

// TokenBucket limits with the token bucket. It panics when limit is invalid.
func TokenBucket(client redis.UniversalClient, limit core.Limit, opts ...Option) gin.HandlerFunc {
	return middleware(flow.Must("ginlimit.TokenBucket", client, core.TokenBucket, limit, opts))
}

// GCRA limits with the generic cell rate algorithm. It panics when limit is
// invalid.
func GCRA(client redis.UniversalClient, limit core.Limit, opts ...Option) gin.HandlerFunc {
	return middleware(flow.Must("ginlimit.GCRA", client, core.GCRA, limit, opts))
}

// New limits with l, a limiter of one rule or a policy of several; l may be
// nil when WithLimiterFunc chooses the limiter. It panics only when it is
// given nothing to decide with: a nil l and no WithLimiterFunc.
func New(l *core.Limiter, opts ...Option) gin.HandlerFunc {
	return middleware(flow.MustNew("ginlimit.New", l, opts))
}

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
