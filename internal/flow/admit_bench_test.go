package flow

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfunc"
)

// benchWriter is a ResponseWriter that allocates nothing once its header
// map exists, so that only the flow's allocations are counted.
type benchWriter struct{ h http.Header }

func (w *benchWriter) Header() http.Header         { return w.h }
func (w *benchWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *benchWriter) WriteHeader(int)             {}

// BenchmarkAdmit measures one request through Admit, one at a time, against
// a real redis-server, next to the decision alone ("decision"); the
// difference is the flow's own cost. The parts ("key", "headers", ...) are
// the pieces of that cost, measured on their own with a Result of a real
// decision.
func BenchmarkAdmit(b *testing.B) {
	rdb := redistest.Client(b)
	lim, err := core.New(rdb, core.GCRA, core.PerHour(1<<30), core.WithPrefix("bench-admit"), core.WithTimeout(time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	req := httptest.NewRequest("GET", "/", nil)
	req.RemoteAddr = "203.0.113.7:4711"
	req.Header.Set("X-Api-Key", "k-0123456789")
	res, err := lim.Allow(ctx, "ip:203.0.113.7")
	if err != nil {
		b.Fatal(err)
	}
	header := New(lim, []Option{WithKey(keyfunc.Header("X-Api-Key"))})
	peer := New[Option](lim, nil)
	anonymous := httptest.NewRequest("GET", "/", nil) // no X-Api-Key: a key error, then the peer address
	anonymous.RemoteAddr = req.RemoteAddr
	quiet := New(lim, []Option{WithKey(keyfunc.Header("X-Api-Key")), WithErrorHandler(func(*http.Request, error) {})})
	w := &benchWriter{h: http.Header{}}
	for _, tc := range []struct {
		name string
		f    func()
	}{
		{"decision", func() { lim.Allow(ctx, "ip:203.0.113.7") }},
		{"admit/peer", func() { clear(w.h); peer.Admit(w, req, nil) }},
		{"admit/header", func() { clear(w.h); header.Admit(w, req, nil) }},
		{"key/peer", func() { peer.key(w, req, nil) }},
		{"key/header", func() { header.key(w, req, nil) }},
		{"key/header missing, default error log", func() { header.key(w, anonymous, nil) }},
		{"key/header missing, error handler", func() { quiet.key(w, anonymous, nil) }},
		{"policy", func() { peer.policy(res) }},
		{"headers", func() { clear(w.h); setHeaders(w.h, HeadersDraft, res, peer.policy(res), time.Now()) }},
		{"context", func() { req.Context().Err() }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tc.f()
			}
		})
	}
}
