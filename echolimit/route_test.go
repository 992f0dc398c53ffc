package echolimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/echolimit"
	"github.com/sluicehq/sluice/internal/flow/flowtest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfunc"
)

// TestRouteBeforeRouting: mounted with e.Pre, the middleware runs before
// Echo routes (c.Path() is "", as for a 404); route keys still name the
// route the request will be routed to, and only a request that matches no
// route is keyed "route:(no route)".
func TestRouteBeforeRouting(t *testing.T) {
	rdb := redistest.Client(t)
	for _, kf := range []struct {
		name string
		opt  func(record func(string, error) (string, error)) echolimit.Option
	}{
		{"keyfunc.Route", func(record func(string, error) (string, error)) echolimit.Option {
			route := keyfunc.Route()
			return echolimit.WithKey(func(r *http.Request) (string, error) { return record(route(r)) })
		}},
		{"echolimit.RouteKey", func(record func(string, error) (string, error)) echolimit.Option {
			route := echolimit.RouteKey()
			return echolimit.WithEchoKey(func(c echo.Context) (string, error) { return record(route(c)) })
		}},
	} {
		t.Run(kf.name, func(t *testing.T) {
			var key string
			record := func(k string, err error) (string, error) {
				key = k
				if err != nil {
					key = err.Error()
				}
				return k, err
			}
			e := echo.New()
			e.Pre(echolimit.GCRA(rdb, core.PerMinute(100), echolimit.WithPrefix(flowtest.Prefix(t)),
				echolimit.WithTimeout(flowtest.Timeout), kf.opt(record)))
			e.GET("/a", ok)
			e.GET("/users/:id", ok)
			g := e.Group("/api")
			g.POST("/items/:id/tags", ok)
			e.Host("admin.example").GET("/stats", ok)
			for _, c := range []struct{ method, host, path, want string }{
				{"GET", "", "/a", "route:GET /a"},
				{"GET", "", "/users/7", "route:GET /users/:id"},
				{"POST", "", "/api/items/3/tags", "route:POST /api/items/:id/tags"},
				{"GET", "admin.example", "/stats", "route:GET /stats"},
				{"GET", "", "/stats", "route:(no route)"}, // on another host only
				{"GET", "", "/missing", "route:(no route)"},
			} {
				key = ""
				r := httptest.NewRequest(c.method, c.path, nil)
				if c.host != "" {
					r.Host = c.host
				}
				e.ServeHTTP(httptest.NewRecorder(), r)
				if key != c.want {
					t.Errorf("%s %s%s: key %q, want %q", c.method, c.host, c.path, key, c.want)
				}
			}
		})
	}
}
