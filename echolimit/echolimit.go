// Package echolimit limits Echo servers with sluice.
//
//	e := echo.New()
//	e.Use(echolimit.TokenBucket(rdb, core.PerSecond(10)))
//
// The middleware is an echo.MiddlewareFunc with the options and behaviour
// of package nethttp (see its documentation); this package adds key
// functions that read the Echo context: WithEchoKey, RouteKey (c.Path())
// and UserKey (a value that authentication middleware set with c.Set). The
// middleware sets the request's Pattern to c.Path() while it decides, so
// keyfunc.Route keys by the Echo route too, as RouteKey does.
//
// The default key is the peer address of the connection, never
// c.RealIP(), which trusts X-Forwarded-For and X-Real-IP unless the
// server's IPExtractor is configured.
//
// Mount the middleware with e.Use (after routing), not e.Pre, so that the
// route is known. A limit on one route or group is mounted with Echo's own
// tools:
//
//	e.POST("/login", login, echolimit.FixedWindow(rdb, core.PerMinute(3)))
//	api := e.Group("/api", echolimit.GCRA(rdb, core.PerSecond(50)))
package echolimit

import (
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/flow"
)

// FixedWindow limits with the fixed-window algorithm. It panics when limit
// is invalid, with a message naming the problem.
func FixedWindow(client redis.UniversalClient, limit core.Limit, opts ...Option) echo.MiddlewareFunc {
	return middleware(flow.Must("echolimit.FixedWindow", client, core.FixedWindow, limit, opts))
}

// SlidingWindowLog limits with the exact sliding-window log. It panics when
// limit is invalid.
func SlidingWindowLog(client redis.UniversalClient, limit core.Limit, opts ...Option) echo.MiddlewareFunc {
	return middleware(flow.Must("echolimit.SlidingWindowLog", client, core.SlidingWindowLog, limit, opts))
}

// SlidingWindowCounter limits with the sliding-window counter. It panics
// when limit is invalid.
func SlidingWindowCounter(client redis.UniversalClient, limit core.Limit, opts ...Option) echo.MiddlewareFunc {
	return middleware(flow.Must("echolimit.SlidingWindowCounter", client, core.SlidingWindowCounter, limit, opts))
}

// LeakyBucket shapes with the leaky bucket: an admitted request is held for
// its Delay (at most WithMaxDelay) before the next handler runs. It panics
// when limit is invalid.
func LeakyBucket(client redis.UniversalClient, limit core.Limit, opts ...Option) echo.MiddlewareFunc {
	return middleware(flow.Must("echolimit.LeakyBucket", client, core.LeakyBucket, limit, opts))
}

// TokenBucket limits with the token bucket. It panics when limit is invalid.
func TokenBucket(client redis.UniversalClient, limit core.Limit, opts ...Option) echo.MiddlewareFunc {
	return middleware(flow.Must("echolimit.TokenBucket", client, core.TokenBucket, limit, opts))
}

// GCRA limits with the generic cell rate algorithm. It panics when limit is
// invalid.
func GCRA(client redis.UniversalClient, limit core.Limit, opts ...Option) echo.MiddlewareFunc {
	return middleware(flow.Must("echolimit.GCRA", client, core.GCRA, limit, opts))
}

// New limits with l, a limiter of one rule or a policy of several; l may be
// nil when WithLimiterFunc chooses the limiter. It panics only when it is
// given nothing to decide with: a nil l and no WithLimiterFunc.
func New(l *core.Limiter, opts ...Option) echo.MiddlewareFunc {
	return middleware(flow.MustNew("echolimit.New", l, opts))
}

// middleware sets the request's Pattern to the Echo route while it
// decides, so that keyfunc.Route keys by the route (see flow.SetPattern).
func middleware(f *flow.Flow) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			r := c.Request()
			previous := flow.SetPattern(r, c.Path())
			ok := f.Admit(c.Response(), r, c)
			r.Pattern = previous
			if !ok {
				return nil
			}
			return next(c)
		}
	}
}
