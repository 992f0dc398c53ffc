package nethttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/flow/flowtest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/nethttp"
)

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
	flowtest.CheckAllocBudget(t, lim, h, req, "ip:203.0.113.7")
}

// TestDenyAllocBudget holds a denial to flowtest.DenyAllocBudget
// allocations beyond the core decision: the default 429 answer writes its
// headers into one array and its body without fmt.
func TestDenyAllocBudget(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	rdb := redistest.Client(t)
	lim, err := core.New(rdb, core.GCRA, core.PerMinute(1), core.WithPrefix("mw-deny-alloc"), core.WithTimeout(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	h := nethttp.New(lim)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "203.0.113.7:4711"
	flowtest.CheckDenyAllocBudget(t, lim, h, req, "ip:203.0.113.7")
}
