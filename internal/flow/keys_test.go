package flow

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/keyfunc"
)

// TestContextRouteKeyAllocations: inside an adapter, which has set
// r.Pattern to the route, a router-native route key allocates only the
// key, not a copy of the request.
func TestContextRouteKeyAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts differ under -race")
	}
	key := ContextRouteKey(nil)
	for _, pattern := range []string{"/users/:id", ""} {
		r := httptest.NewRequest("GET", "/users/7", nil)
		previous := SetPattern(r, pattern)
		if k, err := key(r, pattern); err != nil || k == "" {
			t.Fatalf("pattern %q: key %q, %v", pattern, k, err)
		}
		n := testing.AllocsPerRun(100, func() { key(r, pattern) })
		RestorePattern(r, previous)
		if n > 1 {
			t.Errorf("pattern %q: %v allocations per key; want at most 1, the key", pattern, n)
		}
	}
}

// TestReadsRoute: the adapters look the route up only for a function of
// the user's that sees the request; the defaults read none.
func TestReadsRoute(t *testing.T) {
	key := func(*http.Request) (string, error) { return "k", nil }
	for _, c := range []struct {
		name string
		opts []Option
		want bool
	}{
		{"defaults", nil, false},
		{"nil key", []Option{WithKey(nil), WithContextKey(nil), WithDenyHandler(nil)}, false},
		{"problem details", []Option{WithProblemDetails()}, false},
		{"key", []Option{WithKey(key)}, true},
		{"context key", []Option{WithContextKey(func(*http.Request, any) (string, error) { return "k", nil })}, true},
		{"cost", []Option{WithCost(func(*http.Request) int { return 1 })}, true},
		{"skip", []Option{WithSkip(func(*http.Request) bool { return false })}, true},
		{"limiter", []Option{WithLimiterFunc(nil)}, false},
		{"deny", []Option{WithDenyHandler(DenyPlain)}, true},
		{"deny, then problem details", []Option{WithDenyHandler(DenyPlain), WithProblemDetails()}, false},
	} {
		if got := New(nil, c.opts).ReadsRoute(); got != c.want {
			t.Errorf("%s: ReadsRoute() = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestKeyErrorCost: a request whose key function fails (every anonymous
// request under an API-key key) is limited by its peer address for two
// allocations, the error handed to the error handler and the peer's key,
// and the error reads and unwraps as "%w: %w" of ErrKey and the key
// function's error.
func TestKeyErrorCost(t *testing.T) {
	var got error
	f := New(nil, []Option{
		WithKey(keyfunc.Header("X-Api-Key")),
		WithErrorHandler(func(_ *http.Request, err error) { got = err }),
	})
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "203.0.113.7:4711"
	if key, ok := f.key(httptest.NewRecorder(), r, nil); !ok || key != "ip:203.0.113.7" {
		t.Fatalf("key %q, %v; want the peer's", key, ok)
	}
	_, cause := keyfunc.Header("X-Api-Key")(r)
	want := fmt.Errorf("%w: %w", ErrKey, cause)
	if got == nil || got.Error() != want.Error() || !errors.Is(got, ErrKey) || !errors.Is(got, keyfunc.ErrNoKey) {
		t.Errorf("error %v; want %v, wrapping ErrKey and keyfunc.ErrNoKey", got, want)
	}
	var ke *keyfunc.KeyError
	if !errors.As(got, &ke) || ke.Source != "X-Api-Key" {
		t.Errorf("error %v: want a *keyfunc.KeyError from X-Api-Key in its chain", got)
	}
	if kindOf(got) != kindKey {
		t.Errorf("kind %s, want key", kindNames[kindOf(got)])
	}
	if raceEnabled {
		return // allocation counts differ under -race
	}
	w := &benchWriter{h: http.Header{}}
	if n := testing.AllocsPerRun(100, func() { f.key(w, r, nil) }); n > 2 {
		t.Errorf("%.0f allocations per key error; want at most 2 (the error and the peer's key)", n)
	}
	// The default error handler, past its first line, only counts.
	captureLog(t)
	logged := New(nil, []Option{WithKey(keyfunc.Header("X-Api-Key"))})
	if n := testing.AllocsPerRun(100, func() { logged.key(w, r, nil) }); n > 2 {
		t.Errorf("%.0f allocations per key error with the default error handler; want at most 2 (the error and the peer's key)", n)
	}
}

// TestPrefixError: the error of a failed decision reads and unwraps as
// fmt.Errorf(prefix+"%w", err).
func TestPrefixError(t *testing.T) {
	cause := fmt.Errorf("dial: %w", errors.ErrUnsupported)
	got := error(&prefixError{"sluice: rate-limit decision failed: ", cause})
	want := fmt.Errorf("sluice: rate-limit decision failed: %w", cause)
	if got.Error() != want.Error() || !errors.Is(got, errors.ErrUnsupported) || errors.Unwrap(got) != cause || kindOf(got) != kindDecision {
		t.Errorf("%v; want %v, wrapping its cause, of kind decision", got, want)
	}
}

// TestKeyErrorFallbackDoesNotWarn: a request whose configured key fails
// (a trusted proxy forwarding a header that is not an address) is limited
// by its peer address, and that fallback does not log keyfunc.RemoteIP's
// warning that no trusted proxy is configured: one is. The warning is
// logged once per process, so a child process checks it afresh.
func TestKeyErrorFallbackDoesNotWarn(t *testing.T) {
	if os.Getenv("SLUICE_FALLBACK_WARNING_CHILD") == "1" {
		lines := captureLog(t)
		f := New(nil, []Option{WithKey(keyfunc.ForwardedFor(netip.MustParsePrefix("10.0.0.0/8")))})
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "10.1.1.1:4711"
		r.Header.Set("X-Forwarded-For", "garbage")
		if key, ok := f.key(httptest.NewRecorder(), r, nil); !ok || key != "ip:10.1.1.1" {
			t.Fatalf("key %q, %v; want the peer's", key, ok)
		}
		for _, l := range lines.all() {
			if strings.Contains(l, "no trusted proxy") {
				t.Errorf("logged %q; a trusted proxy is configured", l)
			}
		}
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestKeyErrorFallbackDoesNotWarn$", "-test.count=1")
	cmd.Env = append(os.Environ(), "SLUICE_FALLBACK_WARNING_CHILD=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Errorf("%v\n%s", err, out)
	}
}
