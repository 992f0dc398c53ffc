package flow

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/sluicehq/sluice/core"
)

// Shadow mode never denies: not for a key error with WithKeyErrorReject,
// nor for a missing limiter when failing closed. A limiter built with
// core.WithShadow tells the client nothing of a denial it does not enforce.
func TestShadowNeverDenies(t *testing.T) {
	log := &errs{}
	noKey := WithKey(func(*http.Request) (string, error) { return "", errors.New("no key") })
	f := New(miniLimiter(t, core.GCRA, core.PerMinute(1)), []Option{WithShadow(), WithKeyErrorReject(), noKey, WithErrorHandler(log.hook)})
	if rec, next := admit(f, context.Background()); !next || rec.Code != http.StatusOK || log.count() != 1 {
		t.Errorf("shadow mode, key error: next %v, status %d, %d error(s); want served, reported", next, rec.Code, log.count())
	}
	none := New(nil, []Option{WithShadow(), WithFailureMode(core.FailClosed), WithErrorHandler(log.hook)})
	if rec, next := admit(none, context.Background()); !next || rec.Code != http.StatusOK || log.count() != 2 {
		t.Errorf("shadow mode, no limiter: next %v, status %d, %d error(s); want served, reported", next, rec.Code, log.count())
	}
	shadowed := New(miniLimiter(t, core.GCRA, core.PerMinute(1), core.WithShadow()), []Option(nil))
	admit(shadowed, context.Background())
	if rec, next := admit(shadowed, context.Background()); !next || rec.Header().Get("RateLimit") != "" || rec.Header().Get("Retry-After") != "" {
		t.Errorf("core shadow limiter, would-be denial: next %v, headers %v; want served without rate-limit headers", next, rec.Header())
	}
	// A cost no rule can admit is an error, reported; a shadow limiter
	// serves it all the same (a 413 would deny).
	heavy := New(miniLimiter(t, core.GCRA, core.PerMinute(5), core.WithShadow()),
		[]Option{WithCost(func(*http.Request) int { return 10 }), WithErrorHandler(log.hook)})
	if rec, next := admit(heavy, context.Background()); !next || rec.Code != http.StatusOK || rec.Header().Get("RateLimit") != "" || log.count() != 3 {
		t.Errorf("core shadow limiter, cost over the limit: next %v, status %d, headers %v, %d error(s); want served without headers, reported",
			next, rec.Code, rec.Header(), log.count())
	}
}
