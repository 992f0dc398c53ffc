package chilimit

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
)

// writer is a ResponseWriter that allocates nothing once its header map
// exists, so that only the middleware's allocations are counted.
type writer struct{ h http.Header }

func (w *writer) Header() http.Header         { return w.h }
func (w *writer) Write(b []byte) (int, error) { return len(b), nil }
func (w *writer) WriteHeader(int)             {}

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
	w := &writer{h: http.Header{}}
	ctx := context.Background()
	h.ServeHTTP(w, req)
	decision := testing.AllocsPerRun(200, func() { lim.Allow(ctx, "ip:203.0.113.7") })
	request := testing.AllocsPerRun(200, func() {
		clear(w.h)
		h.ServeHTTP(w, req)
	})
	if request-decision > 3.5 {
		t.Errorf("%.1f allocations per request, %.1f beyond the decision's %.1f; budget 3", request, request-decision, decision)
	}
	t.Logf("%.1f allocations per request, %.1f beyond the core decision", request, request-decision)
}
