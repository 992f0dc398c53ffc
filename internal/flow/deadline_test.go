package flow

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/core"
)

// miniLimiter returns a limiter on a miniredis of its own, with a timeout
// of 10s unless opts say otherwise: the tests count errors, and a first
// decision (the script compiled by miniredis, under the race detector, on
// a loaded machine) may take longer than the default 100ms.
func miniLimiter(t *testing.T, alg core.Algorithm, l core.Limit, opts ...core.Option) *core.Limiter {
	t.Helper()
	m := miniredis.RunT(t)
	c := redis.NewClient(&redis.Options{Addr: m.Addr()})
	t.Cleanup(func() { c.Close() })
	lim, err := core.New(c, alg, l, append([]core.Option{core.WithTimeout(10 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// errs counts the calls of the error hook.
type errs struct{ n atomic.Int32 }

func (e *errs) hook(*http.Request, error) { e.n.Add(1) }
func (e *errs) count() int                { return int(e.n.Load()) }

// admit runs one request through f with ctx, and returns the response and
// whether the next handler would run.
func admit(f *Flow, ctx context.Context) (*httptest.ResponseRecorder, bool) {
	rec := httptest.NewRecorder()
	return rec, f.Admit(rec, httptest.NewRequest("GET", "/", nil).WithContext(ctx), nil)
}

// A request whose own deadline (set by an earlier middleware) passes while
// Redis decides, or before its LeakyBucket turn, is answered 503 and
// reported: not left an empty 200 without being served. A request whose
// client has gone, during the decision or while held, is answered 499
// (client closed request) with no body, so that an access log does not
// record it as served: no rate-limit headers during the decision, and
// those of its counted place when held.
func TestRequestDeadline(t *testing.T) {
	bg := context.Background()
	past, cancel := context.WithDeadline(bg, time.Now().Add(-time.Second))
	defer cancel()
	gone, stop := context.WithCancel(bg)
	stop()

	log := &errs{}
	f := New(miniLimiter(t, core.GCRA, core.PerMinute(10)), []Option{WithErrorHandler(log.hook)})
	if rec, next := admit(f, past); next || rec.Code != http.StatusServiceUnavailable || log.count() != 1 {
		t.Errorf("deadline passed during the decision: next %v, status %d, %d error(s) reported; want 503 and one", next, rec.Code, log.count())
	}
	if rec, next := admit(f, gone); next || rec.Code != 499 || rec.Body.Len() != 0 || len(rec.Header()) != 0 || log.count() != 1 {
		t.Errorf("client gone: next %v, status %d, %q %v written, %d error(s); want 499 alone", next, rec.Code, rec.Body, rec.Header(), log.count())
	}

	held := 0
	leaky := New(miniLimiter(t, core.LeakyBucket, core.Limit{Rate: 1, Period: time.Second, Burst: 5}),
		[]Option{WithErrorHandler(log.hook), func(c *Config) {
			c.Sleep = func(context.Context, time.Duration) error { held++; return nil }
		}})
	if _, next := admit(leaky, bg); !next {
		t.Fatal("first request not admitted")
	}
	soon, cancel2 := context.WithTimeout(bg, 200*time.Millisecond)
	defer cancel2()
	// Its turn is a second away, past its deadline: answered at once.
	if rec, next := admit(leaky, soon); next || rec.Code != http.StatusServiceUnavailable || held != 0 || log.count() != 2 {
		t.Errorf("turn after the deadline: next %v, status %d, held %d times, %d error(s); want 503 at once, reported", next, rec.Code, held, log.count())
	}
	sleeper := New(miniLimiter(t, core.LeakyBucket, core.Limit{Rate: 1, Period: time.Second, Burst: 5}),
		[]Option{WithErrorHandler(log.hook), func(c *Config) {
			c.Sleep = func(context.Context, time.Duration) error { return context.DeadlineExceeded }
		}})
	admit(sleeper, bg)
	if rec, next := admit(sleeper, bg); next || rec.Code != http.StatusServiceUnavailable || log.count() != 3 {
		t.Errorf("deadline passed while held: next %v, status %d, %d error(s); want 503, reported", next, rec.Code, log.count())
	}
	leaver := New(miniLimiter(t, core.LeakyBucket, core.Limit{Rate: 1, Period: time.Second, Burst: 5}),
		[]Option{WithErrorHandler(log.hook), func(c *Config) {
			c.Sleep = func(context.Context, time.Duration) error { return context.Canceled }
		}})
	admit(leaver, bg)
	if rec, next := admit(leaver, bg); next || rec.Code != 499 || rec.Body.Len() != 0 || log.count() != 3 {
		t.Errorf("client gone while held: next %v, status %d, body %q, %d error(s); want 499, nothing reported", next, rec.Code, rec.Body, log.count())
	}
}
