package nethttp_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/flow/flowtest"
	"github.com/sluicehq/sluice/nethttp"
)

// limited returns nethttp.New(lim) around a handler that writes nothing.
func limited(lim *core.Limiter) http.Handler {
	return nethttp.New(lim)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
}

// TestMiddlewareAllocBudget holds the middleware to at most 3 allocations
// per request beyond the core decision: the key, the RateLimit value, and
// one backing array for both draft header values. make test runs it without
// the race detector, which changes allocation counts.
func TestMiddlewareAllocBudget(t *testing.T) {
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "203.0.113.7:4711"
	flowtest.CheckAllocBudget(t, limited, req)
}

// TestDenyAllocBudget holds a denial to flowtest.DenyAllocBudget
// allocations beyond the core decision: the default 429 answer writes its
// headers into one array and its body without fmt.
func TestDenyAllocBudget(t *testing.T) {
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "203.0.113.7:4711"
	flowtest.CheckDenyAllocBudget(t, limited, req)
}
