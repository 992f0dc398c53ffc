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

//go:generate go run ../internal/flow/adaptergen

import (
	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/internal/flow"
)

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
