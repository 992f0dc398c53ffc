package chilimit_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/sluicehq/sluice/chilimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/flow/flowtest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestPatternRestoredAfterPanic: the middleware sets r.Pattern while it
// decides; when a function of the user's panics during the decision, a
// recoverer mounted before the middleware still sees r.Pattern as the
// router left it.
func TestPatternRestoredAfterPanic(t *testing.T) {
	rdb := redistest.Client(t)
	boom := func() { panic("a bug in a user function") }
	for _, c := range []struct {
		name string
		opt  chilimit.Option
	}{
		{"key", chilimit.WithKey(func(*http.Request) (string, error) { boom(); return "", nil })},
		{"limiter", chilimit.WithLimiterFunc(func(*http.Request) *core.Limiter { boom(); return nil })},
		{"deny", chilimit.WithDenyHandler(func(http.ResponseWriter, *http.Request, core.Result) { boom() })},
	} {
		t.Run(c.name, func(t *testing.T) {
			var seen []string
			mux := chi.NewRouter()
			mux.Use(func(next http.Handler) http.Handler {
				return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					defer func() {
						if recover() != nil {
							seen = append(seen, r.Pattern)
							w.WriteHeader(http.StatusInternalServerError)
						}
					}()
					next.ServeHTTP(w, r)
				})
			})
			// One request per minute: the second is denied, so that the
			// deny handler runs.
			mux.Use(chilimit.GCRA(rdb, core.PerMinute(1), chilimit.WithPrefix(flowtest.Prefix(t)),
				chilimit.WithTimeout(flowtest.Timeout), chilimit.WithKey(func(*http.Request) (string, error) { return "k", nil }), c.opt))
			mux.Get("/users/{id}", ok)
			for range 2 {
				mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/users/1", nil))
			}
			if len(seen) == 0 {
				t.Fatal("no panic reached the recoverer")
			}
			for _, p := range seen {
				if p != "" {
					t.Errorf("the recoverer saw r.Pattern %q, want the router's own \"\"", p)
				}
			}
		})
	}
}
