package echolimit_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/echolimit"
	"github.com/sluicehq/sluice/internal/flow/flowtest"
	"github.com/sluicehq/sluice/keyfunc"
)

func TestMain(m *testing.M) { flowtest.Main(m) }

func ok(c echo.Context) error { return c.String(http.StatusOK, "ok") }

// auth stores the user of "Authorization: Bearer <user>" with c.Set("user", ...).
func auth(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if user, ok := strings.CutPrefix(c.Request().Header.Get("Authorization"), "Bearer "); ok {
			c.Set("user", user)
		}
		return next(c)
	}
}

func TestMiddleware(t *testing.T) {
	flowtest.Run(t, flowtest.Adapter[echolimit.Option, echo.MiddlewareFunc]{
		Name:        "echolimit",
		FixedWindow: echolimit.FixedWindow, SlidingWindowLog: echolimit.SlidingWindowLog,
		SlidingWindowCounter: echolimit.SlidingWindowCounter, LeakyBucket: echolimit.LeakyBucket,
		TokenBucket: echolimit.TokenBucket, GCRA: echolimit.GCRA, New: echolimit.New,

		UserKey: echolimit.WithEchoKey(echolimit.UserKey("user")),
		RouteKey: func(with ...keyfunc.Func) echolimit.Option {
			return echolimit.WithEchoKey(echolimit.RouteKey(with...))
		},
		Server: func(global, route []echo.MiddlewareFunc) http.Handler {
			e := echo.New()
			e.Use(auth)
			e.Use(global...)
			e.GET("/", ok)
			e.GET("/users/:id", ok)
			e.GET("/items/:id", ok)
			e.GET("/limited/:id", ok, route...)
			return e
		},
	})
}
