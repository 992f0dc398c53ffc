package flow

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
)

// When a decision times out while go-redis keeps failing to connect (it
// dials again and again until the caller's deadline), the error reported
// names the connection failure, not only "context deadline exceeded".
func TestTimeoutNamesConnectionFailure(t *testing.T) {
	lines := captureLog(t)
	rdb := redis.NewClient(&redis.Options{Addr: redistest.RefusedAddr(t)}) // go-redis's default dial retries
	t.Cleanup(func() { rdb.Close() })
	lim, err := core.New(rdb, core.GCRA, core.PerSecond(10), core.WithTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	f := New(lim, []Option(nil))
	f.errors.now = clock.get
	for range 20 {
		f.Admit(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil), nil)
	}
	clock.now = clock.now.Add(ErrorLogInterval)
	f.Admit(httptest.NewRecorder(), httptest.NewRequest("GET", "/", nil), nil)
	got := lines.all()
	if len(got) != 2 {
		t.Fatalf("%d lines, want 2:\n%s", len(got), strings.Join(got, "\n"))
	}
	if !strings.Contains(got[1], "connection refused") || !strings.Contains(got[1], "deadline exceeded") {
		t.Errorf("line after the outage began: %q; want it to name the refused connection behind the timeout", got[1])
	}
}
