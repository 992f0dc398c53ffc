package keyfunc

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestRoute(t *testing.T) {
	mux := http.NewServeMux()
	var got string
	var gotErr error
	handler := func(w http.ResponseWriter, r *http.Request) { got, gotErr = Route()(r) }
	mux.HandleFunc("GET /reports/{id}", handler)
	mux.HandleFunc("/static/", handler)
	mux.HandleFunc("POST\t /upload", handler)
	for _, tc := range []struct{ method, path, want string }{
		{"GET", "/reports/42", "route:GET /reports/{id}"},
		{"HEAD", "/reports/42", "route:GET /reports/{id}"}, // served by the GET pattern: one budget
		{"GET", "/static/a.css", "route:GET /static/"},     // no method in the pattern: the request's
		{"DELETE", "/static/a.css", "route:DELETE /static/"},
		{"MADEUP", "/static/a.css", "route:OTHER /static/"}, // at most ten methods per route
		{"POST", "/upload", "route:POST /upload"},
	} {
		got, gotErr = "", nil
		mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(tc.method, tc.path, nil))
		if gotErr != nil || got != tc.want {
			t.Errorf("%s %s: got %q, %v; want %q", tc.method, tc.path, got, gotErr, tc.want)
		}
	}
	long := "/" + strings.Repeat("a", 60)
	runKeyCases(t, Route(), []keyCase{
		{name: "outside the mux", req: newRequest("203.0.113.7:1"), wantErr: ErrNoKey},
		// Patterns as the router adapters set them: no method.
		{name: "gin pattern", req: routed("GET", "/users/:id"), wantKey: "route:GET /users/:id"},
		{name: "path with a space", req: routed("GET", "/a b/:id"), wantKey: "route:GET /a b/:id"},
		{name: "no route", req: routed("GET", NoRoute), wantKey: "route:(no route)"},
		{name: "no route, any method", req: routed("XYZ", NoRoute), wantKey: "route:(no route)"},
		{name: "long pattern is hashed", req: routed("GET", long), wantKey: "route#" + sha16("GET "+long)},
		{name: "long ServeMux pattern is hashed", req: routed("GET", "GET "+long), wantKey: "route#" + sha16("GET "+long)},
		{name: "non-ASCII pattern is hashed", req: routed("GET", "/caf\u00e9"), wantKey: "route#" + sha16("GET /caf\u00e9")},
	})
	// The key of a pattern with its method and of the same route without
	// one, under the request of that method, is the key RouteFrom makes of
	// "<METHOD> <pattern>" (the router adapters' RouteKey).
	viaFrom := RouteFrom(func(r *http.Request) string { return RouteMethod(r.Method) + " " + r.Pattern })
	for _, p := range []string{"/users/{id}", long, "/caf\u00e9"} {
		a, _ := Route()(routed("PUT", p))
		b, _ := viaFrom(routed("PUT", p))
		c, _ := Route()(routed("GET", "PUT "+p))
		if a != b || a != c {
			t.Errorf("%q: Route %q, RouteFrom %q, Route with the method in the pattern %q", p, a, b, c)
		}
	}
}

func TestRouteMethod(t *testing.T) {
	for _, m := range []string{"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "CONNECT", "OPTIONS", "TRACE"} {
		if got := RouteMethod(m); got != m {
			t.Errorf("RouteMethod(%q) = %q", m, got)
		}
	}
	for _, m := range []string{"", "get", "PROPFIND", "XYZ", strings.Repeat("A", 1000)} {
		if got := RouteMethod(m); got != "OTHER" {
			t.Errorf("RouteMethod(%q) = %q; want OTHER", m, got)
		}
	}
}

func TestRouteFrom(t *testing.T) {
	f := RouteFrom(func(r *http.Request) string { return r.Header.Get("Test-Pattern") })
	runKeyCases(t, f, []keyCase{
		{name: "pattern", req: newRequest("203.0.113.7:1", hdr{"Test-Pattern", "/users/{id}"}), wantKey: "route:/users/{id}"},
		{name: "empty", req: newRequest("203.0.113.7:1"), wantErr: ErrNoKey},
		{
			name:    "long pattern is hashed",
			req:     newRequest("203.0.113.7:1", hdr{"Test-Pattern", strings.Repeat("/a", 40)}),
			wantKey: "route#" + sha16(strings.Repeat("/a", 40)),
		},
	})
}
