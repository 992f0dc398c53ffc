package core

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// Once the breaker opens, recover probes until Redis answers. A client that
// has been closed never answers again ("redis: client is closed"), so the
// probe goroutine, holding the whole Limiter, runs forever: a goroutine
// leak per limiter dropped while unhealthy (shutdown, a limiter per tenant).
func TestBreakerProbeStopsWhenClientIsClosed(t *testing.T) {
	c := redistest.RefusedClient(t)
	lim := newOn(t, c, GCRA, PerSecond(1), WithHealthCheck(1, 50*time.Millisecond))
	lim.Allow(context.Background(), "k")
	if lim.Health() != Unhealthy {
		t.Fatal("the breaker did not open")
	}
	c.Close()
	probing := func() bool {
		buf := make([]byte, 1<<20)
		return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "core.(*health).recover")
	}
	for deadline := time.Now().Add(5 * time.Second); probing(); {
		if time.Now().After(deadline) {
			t.Error("the health probe still runs 5s after the client was closed (probes every 50ms, forever)")
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
