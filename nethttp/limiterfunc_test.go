package nethttp_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/flow/flowtest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/nethttp"
)

// TestLimiterFuncKeepsNoDroppedLimiter: limiters that WithLimiterFunc
// returns, built at run time (one per tenant, say) and dropped, are
// collected; the middleware keeps nothing of them alive.
func TestLimiterFuncKeepsNoDroppedLimiter(t *testing.T) {
	const n = 3000
	rdb := redistest.Client(t)
	prefix := flowtest.Prefix(t)
	var current *core.Limiter
	h := nethttp.New(nil, nethttp.WithLimiterFunc(func(*http.Request) *core.Limiter { return current }))(http.HandlerFunc(ok))
	var collected atomic.Int64
	for i := range n {
		// Rules of its own per limiter (as tenants of different plans),
		// so that nothing shared could stand in for them.
		l, err := core.New(rdb, core.GCRA, core.PerHour(100+i), core.WithPrefix(prefix), core.WithTimeout(flowtest.Timeout))
		if err != nil {
			t.Fatal(err)
		}
		runtime.AddCleanup(l, func(int) { collected.Add(1) }, i)
		current = l
		rec := httptest.NewRecorder()
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = flowtest.Peer
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK || rec.Header().Get("RateLimit-Policy") != fmt.Sprintf(`"gcra";q=%d;w=3600`, 100+i) {
			t.Fatalf("limiter %d: status %d, RateLimit-Policy %q", i, rec.Code, rec.Header().Get("RateLimit-Policy"))
		}
		l.Close()
		current = nil
	}
	// Cleanups run on a goroutine of their own: give it a moment.
	for i := 0; i < 100 && collected.Load() < n-1; i++ {
		runtime.Gosched()
		runtime.GC()
	}
	// The last limiter may still sit in a register or a pool somewhere;
	// every other one must be gone.
	runtime.KeepAlive(h) // the middleware lives on, as in a server
	if got := collected.Load(); got < n-1 {
		t.Errorf("%d of %d dropped limiters collected; the middleware keeps the others alive", got, n)
	}
}
