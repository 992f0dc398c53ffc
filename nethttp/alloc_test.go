package nethttp_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/nethttp"
)

// writer is a ResponseWriter that allocates nothing once its header map
// exists, so that only the middleware's allocations are counted.
type writer struct{ h http.Header }

func (w *writer) Header() http.Header         { return w.h }
func (w *writer) Write(b []byte) (int, error) { return len(b), nil }
func (w *writer) WriteHeader(int)             {}

// TestMiddlewareAllocBudget holds the middleware to at most 3 allocations
// per request beyond the core decision: the key, the RateLimit value, and
// one backing array for both draft header values. make test runs it without
// the race detector, which changes allocation counts.
func TestMiddlewareAllocBudget(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	rdb := redistest.Client(t)
	lim, err := core.New(rdb, core.GCRA, core.PerHour(1<<30), core.WithPrefix("mw-alloc"), core.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	h := nethttp.New(lim)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	req := httptest.NewRequest("GET", "/", nil)
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
