package ginlimit_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/gin-gonic/gin"

	"github.com/sluicehq/sluice/ginlimit"
	"github.com/sluicehq/sluice/internal/flow/flowtest"
	"github.com/sluicehq/sluice/keyfunc"
)

func TestMain(m *testing.M) {
	gin.SetMode(gin.ReleaseMode)
	flowtest.Main(m)
}

func ok(c *gin.Context) { c.String(http.StatusOK, "ok") }

// auth stores the user of "Authorization: Bearer <user>" with c.Set("user", ...).
func auth(c *gin.Context) {
	if user, ok := strings.CutPrefix(c.GetHeader("Authorization"), "Bearer "); ok {
		c.Set("user", user)
	}
	c.Next()
}

func TestMiddleware(t *testing.T) {
	flowtest.Run(t, flowtest.Adapter[ginlimit.Option, gin.HandlerFunc]{
		Name:        "ginlimit",
		FixedWindow: ginlimit.FixedWindow, SlidingWindowLog: ginlimit.SlidingWindowLog,
		SlidingWindowCounter: ginlimit.SlidingWindowCounter, LeakyBucket: ginlimit.LeakyBucket,
		TokenBucket: ginlimit.TokenBucket, GCRA: ginlimit.GCRA, New: ginlimit.New,

		UserKey: ginlimit.WithGinKey(ginlimit.UserKey("user")),
		RouteKey: func(with ...keyfunc.Func) ginlimit.Option {
			return ginlimit.WithGinKey(ginlimit.RouteKey(with...))
		},
		Server: func(global, route []gin.HandlerFunc) http.Handler {
			r := gin.New()
			r.Use(auth)
			r.Use(global...)
			r.GET("/", ok)
			r.GET("/users/:id", ok)
			r.GET("/items/:id", ok)
			r.GET("/limited/:id", append(route, ok)...)
			return r
		},
	})
}
