package keyfunc

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
)

// syncBuffer is a bytes.Buffer safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestForwardingWarning(t *testing.T) {
	for _, header := range []string{"X-Forwarded-For", "Forwarded", "X-Real-IP", "CF-Connecting-IP", "Fly-Client-IP", "True-Client-IP"} {
		t.Run(header, func(t *testing.T) {
			t.Parallel()
			var buf syncBuffer
			w := &forwardingWarning{logger: func() *slog.Logger { return slog.New(slog.NewTextHandler(&buf, nil)) }}
			f := IPv6Grouping{}.remoteIP(w)

			if _, err := f(newRequest("10.0.0.1:1")); err != nil || buf.String() != "" {
				t.Fatalf("request without forwarding header: err %v, log %q", err, buf.String())
			}
			var wg sync.WaitGroup
			for range 20 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					key, err := f(newRequest("10.0.0.1:1", hdr{header, "203.0.113.7"}))
					if err != nil || key != "ip:10.0.0.1" {
						t.Errorf("got %q, %v; want the peer", key, err)
					}
				}()
			}
			wg.Wait()
			out := buf.String()
			if n := strings.Count(out, "level=WARN"); n != 1 {
				t.Fatalf("logged %d warnings; want 1:\n%s", n, out)
			}
			for _, want := range []string{"shares one rate-limit key", "header=" + canonicalHeader("", header), "peer=10.0.0.1", "ForwardedFor(trustedProxies...)"} {
				if !strings.Contains(out, want) {
					t.Errorf("warning lacks %q:\n%s", want, out)
				}
			}
		})
	}
}
