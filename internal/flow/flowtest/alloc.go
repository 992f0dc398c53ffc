package flowtest

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfunc"
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

// CheckAllocBudget fails t when serving req (its RemoteAddr the key)
// through the middleware that build makes around a GCRA limiter that
// admits every request allocates more than MiddlewareAllocBudget beyond
// the limiter's own decision. It skips under the race detector, which
// changes allocation counts.
func CheckAllocBudget(t *testing.T, build func(*core.Limiter) http.Handler, req *http.Request) {
	t.Helper()
	checkAllocs(t, core.PerHour(1<<30), build, req, http.StatusOK, MiddlewareAllocBudget)
}

// CheckDenyAllocBudget is CheckAllocBudget for denied requests, answered
// by the default deny handler, whose budget is DenyAllocBudget. The limit
// is one per minute: a Retry-After of two digits is strconv's own string.
func CheckDenyAllocBudget(t *testing.T, build func(*core.Limiter) http.Handler, req *http.Request) {
	t.Helper()
	checkAllocs(t, core.PerMinute(1), build, req, http.StatusTooManyRequests, DenyAllocBudget)
}

// checkAllocs serves req twice through the middleware build makes around
// a GCRA limiter of limit, expects status from the second, then counts the
// allocations of a request beyond those of the limiter's own decision.
func checkAllocs(t *testing.T, limit core.Limit, build func(*core.Limiter) http.Handler, req *http.Request, status, budget int) {
	t.Helper()
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	lim, err := core.New(redistest.Client(t), core.GCRA, limit, core.WithPrefix(Prefix(t)), core.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	key, err := keyfunc.RemoteIP()(req)
	if err != nil {
		t.Fatal(err)
	}
	h := build(lim)
	w := &writer{h: http.Header{}}
	for range 2 {
		clear(w.h)
		w.status = http.StatusOK // unless the middleware writes another
		h.ServeHTTP(w, req)
	}
	if w.status != status {
		t.Fatalf("the second request: status %d, want %d", w.status, status)
	}
	ctx := context.Background()
	decision := testing.AllocsPerRun(200, func() { lim.Allow(ctx, key) })
	request := testing.AllocsPerRun(200, func() {
		clear(w.h)
		h.ServeHTTP(w, req)
	})
	if request-decision > float64(budget)+0.5 {
		t.Errorf("%.1f allocations per request (status %d), %.1f beyond the decision's %.1f; budget %d", request, status, request-decision, decision, budget)
	}
	t.Logf("%.1f allocations per request (status %d), %.1f beyond the core decision", request, status, request-decision)
}
