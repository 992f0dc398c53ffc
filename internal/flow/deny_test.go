package flow

import (
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
)

// TestDenyPlainAnswersAsHTTPError: the default denial is http.Error's
// answer, headers and body, even over a Content-Length and Content-Type a
// handler set before.
func TestDenyPlainAnswersAsHTTPError(t *testing.T) {
	prepare := func() *httptest.ResponseRecorder {
		w := httptest.NewRecorder()
		w.Header().Set("Content-Length", "42")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "3")
		return w
	}
	want, got := prepare(), prepare()
	http.Error(want, "Too Many Requests", http.StatusTooManyRequests)
	DenyPlain(got, nil, denied())
	if got.Code != want.Code || got.Body.String() != want.Body.String() || !reflect.DeepEqual(got.Header(), want.Header()) {
		t.Errorf("DenyPlain: %d %q %v; http.Error: %d %q %v", got.Code, got.Body, got.Header(), want.Code, want.Body, want.Header())
	}
}

// TestDenyPlainAllocations: the default denial costs one allocation, one
// array for its two header values, so that a flood of denied requests
// costs little more than admitted ones.
func TestDenyPlainAllocations(t *testing.T) {
	w := &benchWriter{h: http.Header{}}
	res := denied()
	n := testing.AllocsPerRun(100, func() {
		clear(w.h)
		DenyPlain(w, nil, res)
	})
	if n > 1 {
		t.Errorf("DenyPlain: %.0f allocations, want at most 1", n)
	}
}

// denied returns the Result of a denial by one rule.
func denied() core.Result {
	rr := rule("gcra", 10, time.Second)
	rr.Allowed, rr.RetryAfter = false, 2500*time.Millisecond
	return core.Result{Limit: rr.Limit, Rule: rr.Name, RetryAfter: rr.RetryAfter, Rules: []core.RuleResult{rr}}
}

// A Content-Length set before the denial (by a middleware, for content of
// its own) goes, as http.Error drops it: it would cut the body short.
func TestDenyProblemDropsAContentLength(t *testing.T) {
	rec := httptest.NewRecorder()
	rec.Header().Set("Content-Length", "5")
	DenyProblem(rec, httptest.NewRequest("GET", "/", nil), core.Result{RetryAfter: time.Second})
	if cl := rec.Header().Get("Content-Length"); cl != "" {
		t.Errorf("Content-Length %q kept for a %d-byte body", cl, rec.Body.Len())
	}
}
