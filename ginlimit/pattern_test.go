package ginlimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/ginlimit"
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
		opt  ginlimit.Option
	}{
		{"key", ginlimit.WithKey(func(*http.Request) (string, error) { boom(); return "", nil })},
		{"context key", ginlimit.WithGinKey(func(*gin.Context) (string, error) { boom(); return "", nil })},
		{"limiter", ginlimit.WithLimiterFunc(func(*http.Request) *core.Limiter { boom(); return nil })},
		{"deny", ginlimit.WithDenyHandler(func(http.ResponseWriter, *http.Request, core.Result) { boom() })},
	} {
		t.Run(c.name, func(t *testing.T) {
			var seen []string
			e := gin.New()
			e.Use(func(c *gin.Context) {
				defer func() {
					if recover() != nil {
						seen = append(seen, c.Request.Pattern)
						c.AbortWithStatus(http.StatusInternalServerError)
					}
				}()
				c.Next()
			})
			// One request per minute: the second is denied, so that the
			// deny handler runs.
			e.Use(ginlimit.GCRA(rdb, core.PerMinute(1), ginlimit.WithPrefix(flowtest.Prefix(t)),
				ginlimit.WithTimeout(flowtest.Timeout), ginlimit.WithKey(func(*http.Request) (string, error) { return "k", nil }), c.opt))
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
