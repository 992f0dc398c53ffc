package chilimit

import (
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/flow/flowtest"
)

// limited returns New(lim) around a handler that writes nothing.
func limited(lim *core.Limiter) http.Handler {
	return New(lim)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
}

// TestMiddlewareAllocBudget holds the middleware with the default key (the
// peer address) to the budget of nethttp's, at most 3 allocations per
// request beyond the core decision, under nested sub-routers too: the
// route lookup, which allocates to join the patterns of mounted routers,
// is for key functions that read the route, and the default key does not.
func TestMiddlewareAllocBudget(t *testing.T) {
	mux := chi.NewRouter()
	mux.Route("/api", func(r chi.Router) {
		r.Route("/v1", func(r chi.Router) {
			r.Get("/users/{id}", func(http.ResponseWriter, *http.Request) {})
		})
	})
	req := rootRequest(mux, "GET", "/api/v1/users/7")
	req.RemoteAddr = "203.0.113.7:4711"
	flowtest.CheckAllocBudget(t, limited, req)
}

// TestDenyAllocBudget holds a denial to flowtest.DenyAllocBudget
// allocations beyond the core decision, as nethttp's.
func TestDenyAllocBudget(t *testing.T) {
	mux := chi.NewRouter()
	mux.Get("/users/{id}", func(http.ResponseWriter, *http.Request) {})
	req := rootRequest(mux, "GET", "/users/7")
	req.RemoteAddr = "203.0.113.7:4711"
	flowtest.CheckDenyAllocBudget(t, limited, req)
}
