package flowtest

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/flow"
)

// PanicCase is a user function that panics while the middleware decides,
// given as an option of the adapter.
type PanicCase[O ~func(*flow.Config)] struct {
	Name string
	Opt  O
}

// PanicCases are the user functions that run while the middleware has set
// r.Pattern: a key function, a limiter function and a deny handler, plus
// the adapter's own (its router-native key), each panicking.
func PanicCases[O ~func(*flow.Config)](own ...PanicCase[O]) []PanicCase[O] {
	boom := func() { panic("a bug in a user function") }
	return append([]PanicCase[O]{
		{"key", O(flow.WithKey(func(*http.Request) (string, error) { boom(); return "", nil }))},
		{"limiter", O(flow.WithLimiterFunc(func(*http.Request) *core.Limiter { boom(); return nil }))},
		{"deny", O(flow.WithDenyHandler(func(http.ResponseWriter, *http.Request, core.Result) { boom() }))},
	}, own...)
}

// PanicLimit returns the options of the GCRA middleware of a panic case:
// one request per minute on one key, so that the second request is denied
// and the deny handler runs, then c's option.
func PanicLimit[O ~func(*flow.Config)](t *testing.T, c PanicCase[O]) (core.Limit, []O) {
	key := O(flow.WithKey(func(*http.Request) (string, error) { return "k", nil }))
	return core.PerMinute(1), []O{O(flow.WithPrefix(Prefix(t))), O(flow.WithTimeout(Timeout)), key, c.Opt}
}

// CheckPatternAfterPanic sends two requests for /users/1 to h, whose
// recoverer, mounted before the middleware, records in seen the r.Pattern
// it sees after a panic: it must be the router's own, "".
func CheckPatternAfterPanic(t *testing.T, h http.Handler, seen *[]string) {
	t.Helper()
	for range 2 {
		h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/users/1", nil))
	}
	if len(*seen) == 0 {
		t.Fatal("no panic reached the recoverer")
	}
	for _, p := range *seen {
		if p != "" {
			t.Errorf("the recoverer saw r.Pattern %q, want the router's own \"\"", p)
		}
	}
}
