package echolimit_test

import (
	"net/http"
	"testing"

	"github.com/labstack/echo/v4"

	"github.com/sluicehq/sluice/echolimit"
	"github.com/sluicehq/sluice/internal/flow/flowtest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestPatternRestoredAfterPanic: the middleware sets the request's Pattern
// while it decides; when a function of the user's panics during the
// decision, a recoverer mounted before the middleware (with e.Use, or with
// e.Pre before routing) still sees the Pattern as the router left it.
func TestPatternRestoredAfterPanic(t *testing.T) {
	rdb := redistest.Client(t)
	echoKey := echolimit.WithEchoKey(func(echo.Context) (string, error) { panic("a bug in a user function") })
	for _, c := range flowtest.PanicCases(flowtest.PanicCase[echolimit.Option]{Name: "context key", Opt: echoKey}) {
		for _, pre := range []bool{false, true} {
			name := c.Name
			if pre {
				name += " under Pre"
			}
			t.Run(name, func(t *testing.T) {
				var seen []string
				e := echo.New()
				recoverer := func(next echo.HandlerFunc) echo.HandlerFunc {
					return func(c echo.Context) (err error) {
						defer func() {
							if recover() != nil {
								seen = append(seen, c.Request().Pattern)
								err = c.NoContent(http.StatusInternalServerError)
							}
						}()
						return next(c)
					}
				}
				limit, opts := flowtest.PanicLimit(t, c)
				mw := echolimit.GCRA(rdb, limit, opts...)
				if pre {
					e.Pre(recoverer, mw)
				} else {
					e.Use(recoverer, mw)
				}
				e.GET("/users/:id", ok)
				flowtest.CheckPatternAfterPanic(t, e, &seen)
			})
		}
	}
}
