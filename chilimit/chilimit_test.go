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
	chimw "github.com/go-chi/chi/v5/middleware"

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
func TestRouteKeyMounting(t *testing.T) { eachRouteKey(t, testRouteKeyMounting) }

// eachRouteKey runs test with chilimit.RouteKey, and with keyfunc.Route,
// which the middleware must make give the same keys.
func eachRouteKey(t *testing.T, test func(t *testing.T, routeKey keyfunc.Func)) {
	for _, kf := range []struct {
		name string
		f    keyfunc.Func
	}{
		{"chilimit.RouteKey", chilimit.RouteKey()},
		{"keyfunc.Route", keyfunc.Route()},
	} {
		t.Run(kf.name, func(t *testing.T) { test(t, kf.f) })
	}
}

// routeKeys makes limiters (GCRA, never reached) whose key is routeKey,
// each recording the key it sees, and checks the keys the limiters on a
// request's way saw, in order.
type routeKeys struct {
	t        *testing.T
	routeKey keyfunc.Func
	prefix   string
	mu       sync.Mutex
	keys     []string
}

func newRouteKeys(t *testing.T, routeKey keyfunc.Func) *routeKeys {
	return &routeKeys{t: t, routeKey: routeKey, prefix: flowtest.Prefix(t)}
}

// limit returns a limiter that records its key.
func (k *routeKeys) limit(name string) middleware {
	record := func(r *http.Request) (string, error) {
		key, err := k.routeKey(r)
		if err != nil {
			key = err.Error()
		}
		k.mu.Lock()
		k.keys = append(k.keys, key)
		k.mu.Unlock()
		return key, err
	}
	return chilimit.GCRA(redistest.Client(k.t), core.PerMinute(100), chilimit.WithPrefix(k.prefix+name),
		chilimit.WithKey(record), chilimit.WithTimeout(flowtest.Timeout))
}

// check serves method path on h and compares the keys seen with want.
func (k *routeKeys) check(h http.Handler, method, path string, want ...string) {
	k.t.Helper()
	k.keys = nil
	h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(method, path, nil))
	if strings.Join(k.keys, ",") != strings.Join(want, ",") {
		k.t.Errorf("%s %s: keys %q, want %q", method, path, k.keys, want)
	}
}

func testRouteKeyMounting(t *testing.T, routeKey keyfunc.Func) {
	k := newRouteKeys(t, routeKey)
	handle := func(mw middleware) http.Handler { return mw(http.HandlerFunc(ok)) }

	r := chi.NewRouter()
	r.Use(k.limit("root"))
	r.Get("/", ok)
	r.Route("/api", func(r chi.Router) {
		r.Use(k.limit("api"))
		r.Get("/users/{id}", ok)
		r.Route("/orgs/{org}", func(r chi.Router) {
			r.Get("/projects/{project}", ok)
		})
	})
	r.Group(func(r chi.Router) {
		r.Use(k.limit("group"))
		r.Get("/group/{id}", ok)
	})
	r.With(k.limit("with")).Post("/login", ok)
	r.Method("GET", "/handler/{id}", handle(k.limit("handler")))
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
		k.check(r, c.method, c.path, c.want...)
	}
}

// TestRouteKeyAroundAMount: a limiter that wraps a mount (r.Use in a
// Group around r.Route, or r.With before Mount or Route) runs after chi
// matched the mount and before it leaves the sub-router the rest of the
// path: the key is still the route the sub-router chooses. It was
// "(no route)" for every request under the mount, one budget for all.
func TestRouteKeyAroundAMount(t *testing.T) { eachRouteKey(t, testRouteKeyAroundAMount) }

func testRouteKeyAroundAMount(t *testing.T, routeKey keyfunc.Func) {
	k := newRouteKeys(t, routeKey)
	r := chi.NewRouter()
	r.Group(func(r chi.Router) {
		r.Use(k.limit("group"))
		r.Route("/api", func(r chi.Router) {
			r.Get("/", ok)
			r.Get("/users/{id}", ok)
			r.With(k.limit("inner")).Route("/orgs/{org}", func(r chi.Router) {
				r.Get("/projects/{project}", ok)
			})
		})
	})
	shop := chi.NewRouter()
	shop.Get("/items/{id}", ok)
	r.With(k.limit("with")).Mount("/shop", shop)

	for _, c := range []struct {
		path string
		want []string
	}{
		{"/api/users/7", []string{"route:GET /api/users/{id}"}},
		{"/api/", []string{"route:GET /api"}}, // as chi names it (RoutePattern)
		{"/api/orgs/a/projects/b", []string{"route:GET /api/orgs/{org}/projects/{project}", "route:GET /api/orgs/{org}/projects/{project}"}},
		{"/api/nothing", []string{"route:(no route)"}},
		{"/shop/items/7", []string{"route:GET /shop/items/{id}"}},
	} {
		k.check(r, "GET", c.path, c.want...)
	}

	// The key is the route as chi names it once routed (RoutePattern):
	// a route of a trailing slash under a wrapping limiter too.
	k = newRouteKeys(t, routeKey)
	r = chi.NewRouter()
	r.Group(func(r chi.Router) {
		r.Use(k.limit("group"))
		r.Route("/a", func(r chi.Router) {
			r.Route("/b", func(r chi.Router) {
				r.Get("/", ok)
			})
		})
	})
	k.check(r, "GET", "/a/b/", "route:GET /a/b")
	k.check(r, "GET", "/a/b", "route:GET /a/b")
}

// TestRouteKeyFollowsChisRouting: a middleware before routing may change
// the path and method chi routes by (middleware.StripSlashes and
// CleanPath the path, GetHead a HEAD to GET); wherever the limiter is
// mounted, the key is the route chi chooses, so that one route has one
// key however its requests are written.
func TestRouteKeyFollowsChisRouting(t *testing.T) {
	eachRouteKey(t, func(t *testing.T, routeKey keyfunc.Func) {
		k := newRouteKeys(t, routeKey)
		r := chi.NewRouter()
		r.Use(chimw.StripSlashes, chimw.CleanPath, chimw.GetHead)
		r.Use(k.limit("root"))
		r.Route("/api", func(r chi.Router) {
			r.Use(k.limit("api"))
			r.Get("/items/{id}", ok)
			r.With(k.limit("with")).Get("/things/{id}", ok)
			r.Route("/orgs/{org}", func(r chi.Router) {
				r.Use(k.limit("org"))
				r.Get("/projects/{project}", ok)
			})
		})
		r.With(k.limit("rootwith")).Get("/login/{x}", ok)

		items := "route:GET /api/items/{id}"
		things := "route:GET /api/things/{id}"
		projects := "route:GET /api/orgs/{org}/projects/{project}"
		login := "route:GET /login/{x}"
		for _, path := range []string{"/api/items/5", "/api/items/5/", "/api//items/5"} {
			k.check(r, "GET", path, items, items)
			k.check(r, "HEAD", path, items, items)
		}
		for _, path := range []string{"/api/things/5", "/api/things/5/", "/api//things/5"} {
			k.check(r, "GET", path, things, things, things)
			k.check(r, "HEAD", path, things, things, things)
		}
		for _, path := range []string{"/api/orgs/a/projects/b", "/api/orgs/a/projects/b/", "/api/orgs//a/projects/b"} {
			k.check(r, "GET", path, projects, projects, projects)
			k.check(r, "HEAD", path, projects, projects, projects)
		}
		for _, path := range []string{"/login/x", "/login/x/", "//login/x"} {
			k.check(r, "GET", path, login, login)
			k.check(r, "HEAD", path, login, login)
		}
	})
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
