package nethttp_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/flow/flowtest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/nethttp"
)

func TestMain(m *testing.M) { flowtest.Main(m) }

type middleware = func(http.Handler) http.Handler

func ok(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }

// routes registers the routes of the shared test server on mux; route
// wraps the handler of /limited/{id}.
func routes(mux *http.ServeMux, route []middleware) *http.ServeMux {
	mux.HandleFunc("GET /{$}", ok)
	mux.HandleFunc("GET /users/{id}", ok)
	mux.HandleFunc("GET /items/{id}", ok)
	mux.Handle("GET /limited/{id}", chain(route, http.HandlerFunc(ok)))
	return mux
}

// patterns has the routes of the test server, for RouteKey around the mux.
var patterns = routes(http.NewServeMux(), nil)

func chain(mws []middleware, h http.Handler) http.Handler {
	for i := len(mws) - 1; i >= 0; i-- {
		h = mws[i](h)
	}
	return h
}

// auth stores the user of "Authorization: Bearer <user>" with keyfunc.WithUser.
func auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if user, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
			r = r.WithContext(keyfunc.WithUser(r.Context(), user))
		}
		next.ServeHTTP(w, r)
	})
}

func TestMiddleware(t *testing.T) {
	flowtest.Run(t, flowtest.Adapter[nethttp.Option, middleware]{
		Name:        "nethttp",
		FixedWindow: nethttp.FixedWindow, SlidingWindowLog: nethttp.SlidingWindowLog,
		SlidingWindowCounter: nethttp.SlidingWindowCounter, LeakyBucket: nethttp.LeakyBucket,
		TokenBucket: nethttp.TokenBucket, GCRA: nethttp.GCRA, New: nethttp.New,

		UserKey: nethttp.WithKey(keyfunc.User()),
		RouteKey: func(with ...keyfunc.Func) nethttp.Option {
			return nethttp.WithKey(nethttp.RouteKey(patterns, with...))
		},
		// Global middlewares wrap the whole mux, as a router's Use would.
		GlobalBeforeRouting: true,
		Server: func(global, route []middleware) http.Handler {
			return auth(chain(global, routes(http.NewServeMux(), route)))
		},
	})
}

// TestRouteKeyInsideMux keys by r.Pattern when the middleware wraps the
// handlers registered on the mux, by the method the pattern was registered
// with, if any.
func TestRouteKeyInsideMux(t *testing.T) {
	rdb := redistest.Client(t)
	limit := nethttp.GCRA(rdb, core.PerMinute(1), nethttp.WithPrefix(flowtest.Prefix(t)),
		nethttp.WithKey(nethttp.RouteKey(nil)), nethttp.WithTimeout(flowtest.Timeout))
	mux := http.NewServeMux()
	mux.Handle("GET /users/{id}", limit(http.HandlerFunc(ok)))
	mux.Handle("/items/{id}", limit(http.HandlerFunc(ok)))
	for i, s := range []struct {
		method, path string
		want         int
	}{
		{"GET", "/users/1", 200}, {"GET", "/users/2", 429},
		{"HEAD", "/users/3", 429}, // "GET /users/{id}" serves HEAD too: one budget
		{"GET", "/items/1", 200}, {"GET", "/items/2", 429},
		{"POST", "/items/3", 200}, {"POST", "/items/4", 429},
	} {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest(s.method, s.path, nil))
		if rec.Code != s.want {
			t.Errorf("%d: %s %s: status %d, want %d", i, s.method, s.path, rec.Code, s.want)
		}
	}
}
