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
)

// TestPatternRestoredAfterPanic: the middleware sets r.Pattern while it
// decides; when a function of the user's panics during the decision, a
// recoverer mounted before the middleware still sees r.Pattern as the
// router left it.
func TestPatternRestoredAfterPanic(t *testing.T) {
	rdb := redistest.Client(t)
	boom := func() { panic("a bug in a user function") }
	for _, c := range []struct {
		name string
		opt  echolimit.Option
	}{
		{"key", echolimit.WithKey(func(*http.Request) (string, error) { boom(); return "", nil })},
		{"context key", echolimit.WithEchoKey(func(echo.Context) (string, error) { boom(); return "", nil })},
		{"limiter", echolimit.WithLimiterFunc(func(*http.Request) *core.Limiter { boom(); return nil })},
		{"deny", echolimit.WithDenyHandler(func(http.ResponseWriter, *http.Request, core.Result) { boom() })},
	} {
		for _, pre := range []bool{false, true} {
			name := c.name
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
				// One request per minute: the second is denied, so that the
				// deny handler runs.
				limit := echolimit.GCRA(rdb, core.PerMinute(1), echolimit.WithPrefix(flowtest.Prefix(t)),
					echolimit.WithTimeout(flowtest.Timeout), echolimit.WithKey(func(*http.Request) (string, error) { return "k", nil }), c.opt)
				if pre {
					e.Pre(recoverer, limit)
				} else {
					e.Use(recoverer, limit)
				}
				e.GET("/users/:id", ok)
				for range 2 {
					e.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/users/1", nil))
				}
				if len(seen) == 0 {
					t.Fatal("no panic reached the recoverer")
				}
				for _, p := range seen {
					if p != "" {
						t.Errorf("the recoverer saw r.Pattern %q, want the router's own \"\"", p)
					}
				}
			})
		}
	}
}
