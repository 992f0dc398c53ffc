package nethttp_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/nethttp"
)

// BenchmarkMiddleware measures one request through the middleware against
// a real redis-server, next to the same handler without it.
func BenchmarkMiddleware(b *testing.B) {
	rdb := redistest.Client(b)
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(200) })
	prefix := nethttp.WithPrefix("bench-mw-" + strconv.FormatInt(time.Now().UnixNano(), 36))
	for _, tc := range []struct {
		name string
		h    http.Handler
	}{
		{"handler alone", ok},
		{"gcra", nethttp.GCRA(rdb, core.PerHour(1<<30), prefix)(ok)},
	} {
		b.Run(tc.name, func(b *testing.B) {
			req := httptest.NewRequest("GET", "/", nil)
			req.RemoteAddr = "203.0.113.7:4711"
			b.ReportAllocs()
			for b.Loop() {
				tc.h.ServeHTTP(httptest.NewRecorder(), req)
			}
		})
	}
}
