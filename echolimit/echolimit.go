// Package echolimit limits Echo servers with sluice.
//
//	e := echo.New()
//	e.Use(echolimit.TokenBucket(rdb, core.PerSecond(10)))
//
// The middleware is an echo.MiddlewareFunc with the options and behaviour
// of package nethttp (see its documentation); this package adds key
// functions that read the Echo context: WithEchoKey, RouteKey (c.Path())
// and UserKey (a value that authentication middleware set with c.Set). When
// a function of the user's sees the request (a key, cost, skip or limiter
// function, a deny handler), the middleware sets the request's Pattern to
// the Echo route while it decides, so keyfunc.Route keys by the Echo route
// too, as RouteKey does.
//
// The default key is the peer address of the connection, never
// c.RealIP(), which trusts X-Forwarded-For and X-Real-IP unless the
// server's IPExtractor is configured.
//
// After routing (e.Use, a group, a route) the route is c.Path(), known
// without cost. Mounted with e.Pre, the middleware runs before routing: it
// then looks the request up in the router itself, one more router lookup
// per request, and only when a function of the user's reads the request.
// A pre-middleware that rewrites the path after this one (such as
// middleware.Rewrite) changes the route Echo chooses, not the key: mount
// it first. A limit on one route or group is mounted with Echo's own
// tools:
//
//	e.POST("/login", login, echolimit.FixedWindow(rdb, core.PerMinute(3)))
//	api := e.Group("/api", echolimit.GCRA(rdb, core.PerSecond(50)))
package echolimit

//go:generate go run ../internal/flow/optionsgen

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

// middleware runs f for each request (see admit).
func middleware(f *flow.Flow) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if !admit(f, c) {
				return nil
			}
			return next(c)
		}
	}
}

// admit decides c's request with f. When a function of the user's sees the
// request (f.ReadsRoute), r.Pattern is the Echo route meanwhile, so that
// keyfunc.Route keys by the route (see route and flow.SetPattern); it is
// restored even when such a function panics, so that a recoverer sees
// r.Pattern as the router left it.
func admit(f *flow.Flow, c echo.Context) bool {
	r := c.Request()
	if f.ReadsRoute() {
		defer flow.RestorePattern(r, flow.SetPattern(r, route(c)))
	}
	return f.Admit(c.Response(), r, c)
}

// route returns the route pattern of c's request, "" when it matches none.
// After routing (e.Use, a group, a route) it is c.Path(), read without
// cost. Before routing (e.Pre) c.Path() is "", as for a request that
// matched no route; route then looks the request up as Echo's ServeHTTP
// will (the router of its host, the method and echo.GetPath), in a
// context of Echo's pool.
func route(c echo.Context) string {
	if p := c.Path(); p != "" {
		return p
	}
	e := c.Echo()
	if e == nil {
		return ""
	}
	r := c.Request()
	router := e.Router()
	if routers := e.Routers(); len(routers) > 0 {
		if hr, ok := routers[r.Host]; ok {
			router = hr
		}
	}
	lc := e.AcquireContext()
	lc.Reset(r, nil)
	router.Find(r.Method, echo.GetPath(r), lc)
	p := lc.Path()
	lc.Reset(nil, nil) // drop the references to this request
	e.ReleaseContext(lc)
	return p
}
