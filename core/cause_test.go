package core

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// A decision that times out while go-redis cannot connect (it dials again
// until the send's context ends, then reports only that) says why: its
// error is context.DeadlineExceeded and wraps the refused dial.
func TestTimeoutWrapsDialError(t *testing.T) {
	rdb := redis.NewClient(&redis.Options{Addr: redistest.RefusedAddr(t)}) // go-redis's default retries
	t.Cleanup(func() { rdb.Close() })
	l, err := New(rdb, GCRA, PerSecond(10), WithTimeout(100*time.Millisecond), WithHealthCheck(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// The first decision may time out before the first dial has failed.
	for i := range 3 {
		_, err = l.Allow(context.Background(), "k")
		var op *net.OpError
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("decision %d: %v, want a timeout", i, err)
		}
		if i > 0 && !errors.As(err, &op) {
			t.Errorf("decision %d: %v, want it to wrap the refused dial", i, err)
		}
	}
}
