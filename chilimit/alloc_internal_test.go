package chilimit

import (
	"net/http"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/flow/flowtest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestMiddlewareAllocBudget holds the middleware with the default key (the
// peer address) to the budget of nethttp's, at most 3 allocations per
// request beyond the core decision, under nested sub-routers too: the
// route lookup, which allocates to join the patterns of mounted routers,
// is for key functions that read the route, and the default key does not.
func TestMiddlewareAllocBudget(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	rdb := redistest.Client(t)
	lim, err := core.New(rdb, core.GCRA, core.PerHour(1<<30), core.WithPrefix("chi-alloc"), core.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	mux := chi.NewRouter()
	mux.Route("/api", func(r chi.Router) {
		r.Route("/v1", func(r chi.Router) {
			r.Get("/users/{id}", func(http.ResponseWriter, *http.Request) {})
		})
	})
	h := New(lim)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	req := rootRequest(mux, "GET", "/api/v1/users/7")
	req.RemoteAddr = "203.0.113.7:4711"
	flowtest.CheckAllocBudget(t, lim, h, req, "ip:203.0.113.7")
}

// TestDenyAllocBudget holds a denial to flowtest.DenyAllocBudget
// allocations beyond the core decision, as nethttp's.
func TestDenyAllocBudget(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	rdb := redistest.Client(t)
	lim, err := core.New(rdb, core.GCRA, core.PerMinute(1), core.WithPrefix("chi-deny-alloc"), core.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	mux := chi.NewRouter()
	mux.Get("/users/{id}", func(http.ResponseWriter, *http.Request) {})
	h := New(lim)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	req := rootRequest(mux, "GET", "/users/7")
	req.RemoteAddr = "203.0.113.7:4711"
	flowtest.CheckDenyAllocBudget(t, lim, h, req, "ip:203.0.113.7")
}
