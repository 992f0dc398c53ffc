package chilimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/go-chi/chi/v5"
)

// rootRequest returns a request as a middleware mounted with r.Use on the
// root router sees it: in chi's routing context, before routing.
func rootRequest(mux *chi.Mux, method, path string) *http.Request {
	rctx := chi.NewRouteContext()
	rctx.Routes = mux
	r := httptest.NewRequest(method, path, nil)
	return r.WithContext(context.WithValue(r.Context(), chi.RouteCtxKey, rctx))
}

// TestSetPatternAllocations: the middleware looks every request up in the
// router to set its Pattern; for a route outside mounted sub-routers that
// allocates nothing.
func TestSetPatternAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts (sync.Pool drops items)")
	}
	mux := chi.NewRouter()
	mux.Get("/users/{id}", func(http.ResponseWriter, *http.Request) {})
	r := rootRequest(mux, "GET", "/users/7")
	if setPattern(r); r.Pattern != "/users/{id}" {
		t.Fatalf("Pattern %q", r.Pattern)
	}
	if n := testing.AllocsPerRun(100, func() { r.Pattern = setPattern(r) }); n != 0 {
		t.Errorf("%v allocations per request; want 0", n)
	}
}

func BenchmarkSetPattern(b *testing.B) {
	mux := chi.NewRouter()
	for _, p := range []string{"/", "/users/{id}", "/items/{id}", "/orgs/{org}/projects/{project}", "/static/*"} {
		mux.Get(p, func(http.ResponseWriter, *http.Request) {})
	}
	r := rootRequest(mux, "GET", "/orgs/a/projects/b")
	b.ReportAllocs()
	for b.Loop() {
		r.Pattern = setPattern(r)
	}
}

// TestSetPatternInSubRouterAllocations: in a sub-router, the lookup
// allocates only the joined pattern.
func TestSetPatternInSubRouterAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts (sync.Pool drops items)")
	}
	mux := chi.NewRouter()
	var r *http.Request
	mux.Route("/api", func(sub chi.Router) {
		sub.Use(func(http.Handler) http.Handler {
			return http.HandlerFunc(func(_ http.ResponseWriter, req *http.Request) { r = req })
		})
		sub.Get("/users/{id}", func(http.ResponseWriter, *http.Request) {})
	})
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/api/users/7", nil))
	if setPattern(r); r.Pattern != "/api/users/{id}" {
		t.Fatalf("Pattern %q", r.Pattern)
	}
	if n := testing.AllocsPerRun(100, func() { r.Pattern = setPattern(r) }); n != 1 {
		t.Errorf("%v allocations per request; want 1", n)
	}
}
