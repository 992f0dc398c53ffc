package flow

import (
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestContextRouteKeyAllocations: inside an adapter, which has set
// r.Pattern to the route, a router-native route key allocates only the
// key, not a copy of the request.
func TestContextRouteKeyAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	key := ContextRouteKey(nil)
	for _, pattern := range []string{"/users/:id", ""} {
		r := httptest.NewRequest("GET", "/users/7", nil)
		previous := SetPattern(r, pattern)
		if k, err := key(r, pattern); err != nil || k == "" {
			t.Fatalf("pattern %q: key %q, %v", pattern, k, err)
		}
		n := testing.AllocsPerRun(100, func() { key(r, pattern) })
		RestorePattern(r, previous)
		if n > 1 {
			t.Errorf("pattern %q: %v allocations per key; want at most 1, the key", pattern, n)
		}
	}
}

// TestReadsRoute: the adapters look the route up only for a function of
// the user's that sees the request; the defaults read none.
func TestReadsRoute(t *testing.T) {
	key := func(*http.Request) (string, error) { return "k", nil }
	for _, c := range []struct {
		name string
		opts []Option
		want bool
	}{
		{"defaults", nil, false},
		{"nil key", []Option{WithKey(nil), WithContextKey(nil), WithDenyHandler(nil)}, false},
		{"problem details", []Option{WithProblemDetails()}, false},
		{"key", []Option{WithKey(key)}, true},
		{"context key", []Option{WithContextKey(func(*http.Request, any) (string, error) { return "k", nil })}, true},
		{"cost", []Option{WithCost(func(*http.Request) int { return 1 })}, true},
		{"skip", []Option{WithSkip(func(*http.Request) bool { return false })}, true},
		{"limiter", []Option{WithLimiterFunc(nil)}, false},
		{"deny", []Option{WithDenyHandler(DenyPlain)}, true},
	} {
		if got := New(nil, c.opts).ReadsRoute(); got != c.want {
			t.Errorf("%s: ReadsRoute() = %v, want %v", c.name, got, c.want)
		}
	}
}
