package ginlimit_test

import (
	"net/http"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/ginlimit"
	"github.com/sluicehq/sluice/internal/flow/flowtest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestPatternRestoredAfterPanic: the middleware sets c.Request.Pattern
// while it decides; when a function of the user's panics during the
// decision, a recoverer mounted before the middleware still sees the
// Pattern as the router left it.
func TestPatternRestoredAfterPanic(t *testing.T) {
	rdb := redistest.Client(t)
	ginKey := ginlimit.WithGinKey(func(*gin.Context) (string, error) { panic("a bug in a user function") })
	for _, c := range flowtest.PanicCases(flowtest.PanicCase[ginlimit.Option]{Name: "context key", Opt: ginKey}) {
		t.Run(c.Name, func(t *testing.T) {
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
			limit, opts := flowtest.PanicLimit(t, c)
			e.Use(ginlimit.GCRA(rdb, limit, opts...))
			e.GET("/users/:id", ok)
			flowtest.CheckPatternAfterPanic(t, e, &seen)
		})
	}
}
