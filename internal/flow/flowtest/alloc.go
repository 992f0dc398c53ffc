package flowtest

import (
	"context"
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/core"
)

// MiddlewareAllocBudget is the allocations a middleware may make per
// request beyond the core decision: the key, the RateLimit value, and one
// backing array for both draft header values.
const MiddlewareAllocBudget = 3

// DenyAllocBudget is the allocations a middleware may make per denied
// request beyond the core decision: those of MiddlewareAllocBudget,
// Retry-After's value slice, and one array for the two header values of
// the default 429 answer (Content-Type, X-Content-Type-Options).
const DenyAllocBudget = MiddlewareAllocBudget + 2

// writer is a ResponseWriter that allocates nothing once its header map
// exists, so that only the middleware's allocations are counted.
type writer struct {
	h      http.Header
	status int
}

func (w *writer) Header() http.Header         { return w.h }
func (w *writer) Write(b []byte) (int, error) { return len(b), nil }
func (w *writer) WriteHeader(status int)      { w.status = status }

// CheckAllocBudget fails t when serving req through h, a middleware
// deciding with lim and keyed by the peer address, allocates more than
// MiddlewareAllocBudget beyond lim's own decision for that key. Run it
// without the race detector, which changes allocation counts.
func CheckAllocBudget(t *testing.T, lim *core.Limiter, h http.Handler, req *http.Request, key string) {
	t.Helper()
	w := &writer{h: http.Header{}}
	ctx := context.Background()
	h.ServeHTTP(w, req)
	decision := testing.AllocsPerRun(200, func() { lim.Allow(ctx, key) })
	request := testing.AllocsPerRun(200, func() {
		clear(w.h)
		h.ServeHTTP(w, req)
	})
	if request-decision > MiddlewareAllocBudget+0.5 {
		t.Errorf("%.1f allocations per request, %.1f beyond the decision's %.1f; budget %d", request, request-decision, decision, MiddlewareAllocBudget)
	}
	t.Logf("%.1f allocations per request, %.1f beyond the core decision", request, request-decision)
}

// CheckDenyAllocBudget is CheckAllocBudget for denied requests: lim must
// deny key once it has admitted one request, for less than 100 seconds (a
// limit of one per minute: a Retry-After of two digits is strconv's own
// string), and h, a middleware deciding with lim and keyed by the peer
// address, must answer with the default deny handler. It fails t when a
// denial allocates more than DenyAllocBudget beyond lim's own decision.
func CheckDenyAllocBudget(t *testing.T, lim *core.Limiter, h http.Handler, req *http.Request, key string) {
	t.Helper()
	w := &writer{h: http.Header{}}
	ctx := context.Background()
	h.ServeHTTP(w, req)
	clear(w.h)
	h.ServeHTTP(w, req)
	if w.status != http.StatusTooManyRequests {
		t.Fatalf("the second request: status %d, want 429", w.status)
	}
	decision := testing.AllocsPerRun(200, func() { lim.Allow(ctx, key) })
	request := testing.AllocsPerRun(200, func() {
		clear(w.h)
		h.ServeHTTP(w, req)
	})
	if request-decision > DenyAllocBudget+0.5 {
		t.Errorf("%.1f allocations per denied request, %.1f beyond the decision's %.1f; budget %d", request, request-decision, decision, DenyAllocBudget)
	}
	t.Logf("%.1f allocations per denied request, %.1f beyond the core decision", request, request-decision)
}
