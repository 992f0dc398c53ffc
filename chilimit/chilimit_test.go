package chilimit_test

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/sluicehq/sluice/chilimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/flow/flowtest"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfunc"
)

func TestMain(m *testing.M) { flowtest.Main(m) }

type middleware = func(http.Handler) http.Handler

func ok(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }

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
	flowtest.Run(t, flowtest.Adapter[chilimit.Option, middleware]{
		Name:        "chilimit",
		FixedWindow: chilimit.FixedWindow, SlidingWindowLog: chilimit.SlidingWindowLog,
		SlidingWindowCounter: chilimit.SlidingWindowCounter, LeakyBucket: chilimit.LeakyBucket,
		TokenBucket: chilimit.TokenBucket, GCRA: chilimit.GCRA, New: chilimit.New,

		UserKey: chilimit.WithKey(keyfunc.User()),
		RouteKey: func(with ...keyfunc.Func) chilimit.Option {
			return chilimit.WithKey(chilimit.RouteKey(with...))
		},
		// Global middlewares are mounted with r.Use, before routing.
		Server: func(global, route []middleware) http.Handler {
			r := chi.NewRouter()
			r.Use(auth)
			r.Use(global...)
			r.Get("/", ok)
			r.Get("/users/{id}", ok)
			r.Get("/items/{id}", ok)
			r.With(route...).Get("/limited/{id}", ok)
			return r
		},
	})
}

// TestRouteKeyMounting checks that RouteKey, and keyfunc.Route under the
// chilimit middleware, see the full route pattern wherever the middleware
// is mounted: r.Use on the root, r.Use in a sub-router (r.Route, Mount) and
// in a group, r.With, and around a handler.
func TestRouteKeyMounting(t *testing.T) {
	for _, kf := range []struct {
		name string
		f    keyfunc.Func
	}{
		{"chilimit.RouteKey", chilimit.RouteKey()},
		{"keyfunc.Route", keyfunc.Route()},
	} {
		t.Run(kf.name, func(t *testing.T) { testRouteKeyMounting(t, kf.f) })
	}
}

func testRouteKeyMounting(t *testing.T, routeKey keyfunc.Func) {
	rdb := redistest.Client(t)
	prefix := flowtest.Prefix(t)
	var mu sync.Mutex
	var keys []string
	record := func(r *http.Request) (string, error) {
		k, err := routeKey(r)
		if err != nil {
			k = err.Error()
		}
		mu.Lock()
		keys = append(keys, k)
		mu.Unlock()
		return k, err
	}
	limit := func(name string) middleware {
		return chilimit.GCRA(rdb, core.PerMinute(100), chilimit.WithPrefix(prefix+name),
			chilimit.WithKey(record), chilimit.WithTimeout(flowtest.Timeout))
	}
	handle := func(mw middleware) http.Handler { return mw(http.HandlerFunc(ok)) }

	r := chi.NewRouter()
	r.Use(limit("root"))
	r.Get("/", ok)
	r.Route("/api", func(r chi.Router) {
		r.Use(limit("api"))
		r.Get("/users/{id}", ok)
		r.Route("/orgs/{org}", func(r chi.Router) {
			r.Get("/projects/{project}", ok)
		})
	})
	r.Group(func(r chi.Router) {
		r.Use(limit("group"))
		r.Get("/group/{id}", ok)
	})
	r.With(limit("with")).Post("/login", ok)
	r.Method("GET", "/handler/{id}", handle(limit("handler")))
	sub := chi.NewRouter()
	sub.Get("/files/*", ok)
	r.Mount("/static", sub)

	for _, c := range []struct {
		method, path string
		want         []string // the key seen by each limiter on the way
	}{
		{"GET", "/", []string{"route:GET /"}},
		{"GET", "/api/users/7", []string{"route:GET /api/users/{id}", "route:GET /api/users/{id}"}},
		{"GET", "/api/orgs/a/projects/b", []string{"route:GET /api/orgs/{org}/projects/{project}", "route:GET /api/orgs/{org}/projects/{project}"}},
		{"GET", "/group/1", []string{"route:GET /group/{id}", "route:GET /group/{id}"}},
		{"POST", "/login", []string{"route:POST /login", "route:POST /login"}},
		{"GET", "/handler/9", []string{"route:GET /handler/{id}", "route:GET /handler/{id}"}},
		{"GET", "/static/files/a/b.css", []string{"route:GET /static/files/*"}},
		{"GET", "/missing", []string{"route:(no route)"}},
		{"XYZ1", "/missing", []string{"route:(no route)"}},
		{"XYZ2", "/api/users/7", []string{"route:(no route)"}}, // a made-up method matches no route
	} {
		keys = nil
		rec := httptest.NewRecorder()
		r.ServeHTTP(rec, httptest.NewRequest(c.method, c.path, nil))
		if strings.Join(keys, ",") != strings.Join(c.want, ",") {
			t.Errorf("%s %s: keys %q, want %q", c.method, c.path, keys, c.want)
		}
	}
}

// TestRouteKeyOutsideChi: without a chi router there is no pattern, a key
// error; the request is limited by its peer address and the error reported.
func TestRouteKeyOutsideChi(t *testing.T) {
	rdb := redistest.Client(t)
	var got []error
	h := chilimit.GCRA(rdb, core.PerMinute(1), chilimit.WithPrefix(flowtest.Prefix(t)),
		chilimit.WithKey(chilimit.RouteKey()), chilimit.WithTimeout(flowtest.Timeout),
		chilimit.WithErrorHandler(func(_ *http.Request, err error) { got = append(got, err) }))(http.HandlerFunc(ok))
	for i, want := range []int{200, 429} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", "/x", nil))
		if rec.Code != want {
			t.Errorf("request %d: status %d, want %d", i, rec.Code, want)
		}
	}
	if len(got) != 2 || !errors.Is(got[0], keyfunc.ErrNoKey) || !errors.Is(got[0], chilimit.ErrKey) {
		t.Errorf("errors %v, want two key errors", got)
	}
}
