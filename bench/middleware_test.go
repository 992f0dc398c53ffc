package bench

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/nethttp"
)

// BenchmarkMiddleware measures the whole middleware path of sluice GCRA
// around an empty handler: key from an API-key header, the decision, the
// RateLimit headers, with the same timeout as BenchmarkAllow's limiters. Each goroutine reuses its request and response writer,
// so the allocations reported are the middleware's and the decision's.
func BenchmarkMiddleware(b *testing.B) {
	rdb := newClient()
	defer rdb.Close()
	l, err := core.New(rdb, core.GCRA, core.Limit{Rate: rate, Period: time.Second}, core.WithTimeout(*sluiceTimeout))
	if err != nil {
		b.Fatal(err)
	}
	// The middleware reports a failed decision to its error handler and
	// serves the request without RateLimit headers (fail open); the decider
	// below turns that into an error of the call.
	var lastErr atomic.Pointer[error]
	h := nethttp.New(l,
		nethttp.WithKey(keyfunc.Header("X-Api-Key")),
		nethttp.WithErrorHandler(func(_ *http.Request, err error) { lastErr.Store(&err) }),
	)(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	newDecider := func() decider {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		key := []string{""}
		req.Header["X-Api-Key"] = key
		w := &discardWriter{h: http.Header{}}
		return func(_ context.Context, k string) (bool, error) {
			key[0] = k
			clear(w.h)
			w.status = http.StatusOK
			h.ServeHTTP(w, req)
			if w.h.Get("RateLimit") == "" {
				var err error
				if p := lastErr.Load(); p != nil {
					err = *p
				}
				return false, fmt.Errorf("no RateLimit header (status %d; the last error reported: %v)", w.status, err)
			}
			return w.status == http.StatusOK, nil
		}
	}
	for _, c := range []int{1, 64} {
		b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
			flush(b, rdb)
			runConcurrent(b, c, rdb, newDecider)
		})
	}
}

// discardWriter is a reusable http.ResponseWriter that keeps only the
// headers and the status.
type discardWriter struct {
	h      http.Header
	status int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(status int)      { w.status = status }
