package chilimit_test

import (
	"net/http"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/sluicehq/sluice/chilimit"
	"github.com/sluicehq/sluice/internal/flow/flowtest"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestPatternRestoredAfterPanic: the middleware sets r.Pattern while it
// decides; when a function of the user's panics during the decision, a
// recoverer mounted before the middleware still sees r.Pattern as the
// router left it.
func TestPatternRestoredAfterPanic(t *testing.T) {
	rdb := redistest.Client(t)
	for _, c := range flowtest.PanicCases[chilimit.Option]() {
		t.Run(c.Name, func(t *testing.T) {
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
			limit, opts := flowtest.PanicLimit(t, c)
			mux.Use(chilimit.GCRA(rdb, limit, opts...))
			mux.Get("/users/{id}", ok)
			flowtest.CheckPatternAfterPanic(t, mux, &seen)
		})
	}
}
