package flow

import (
	"context"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
)

// TestOptionDocsSayWhatHappens: the docs of the options (re-exported by
// every adapter) say what an option does where it is accepted, never that
// it is "ignored" there.
func TestOptionDocsSayWhatHappens(t *testing.T) {
	b, err := os.ReadFile("options.go")
	if err != nil {
		t.Fatal(err)
	}
	vague := regexp.MustCompile(`(?i)\bignor(e|es|ed)\b[^\n]*(\n//[^\n]*){0,1}`)
	for _, m := range vague.FindAll(b, -1) {
		t.Errorf("options.go: %q: say what happens instead", m)
	}
}

// TestOptionsPassedToNew pins what the option docs say about the options
// that only shape the limiter an algorithm constructor builds: passed to
// New, they have no effect, and the limiter's own settings apply.
func TestOptionsPassedToNew(t *testing.T) {
	rdb := redistest.Client(t)
	prefix := "flow-new-" + strings.ReplaceAll(t.Name(), "/", "-")
	limiter := func(t *testing.T, opts ...core.Option) *core.Limiter {
		t.Helper()
		l, err := core.New(rdb, core.FixedWindow, core.PerMinute(1), append([]core.Option{core.WithTimeout(10 * time.Second)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	keys := func(t *testing.T, p string) int {
		t.Helper()
		ks, err := rdb.Keys(context.Background(), p+":*").Result()
		if err != nil {
			t.Fatal(err)
		}
		return len(ks)
	}
	ctx := context.Background()

	t.Run("WithPrefix", func(t *testing.T) {
		f := MustNew("test", limiter(t, core.WithPrefix(prefix+"-own")), []Option{WithPrefix(prefix + "-option")})
		if _, ok := admit(f, ctx); !ok {
			t.Fatal("first request denied")
		}
		if own, opt := keys(t, prefix+"-own"), keys(t, prefix+"-option"); own == 0 || opt != 0 {
			t.Errorf("keys under the limiter's prefix: %d, under WithPrefix's: %d; want some and none", own, opt)
		}
	})

	t.Run("WithDenyCache", func(t *testing.T) {
		p := prefix + "-denycache"
		f := MustNew("test", limiter(t, core.WithPrefix(p)), []Option{WithDenyCache(100)})
		if _, ok := admit(f, ctx); !ok {
			t.Fatal("first request denied")
		}
		if _, ok := admit(f, ctx); ok {
			t.Fatal("second request of PerMinute(1) admitted")
		}
		// Forget the key behind the limiter's back: a deny cache would
		// still deny; the limiter given to New has none.
		ks, _ := rdb.Keys(ctx, p+":*").Result()
		if len(ks) == 0 || rdb.Del(ctx, ks...).Err() != nil {
			t.Fatalf("cannot delete the keys %v", ks)
		}
		if _, ok := admit(f, ctx); !ok {
			t.Error("denied after the key was deleted: WithDenyCache took effect with New")
		}
	})

	t.Run("WithTimeout", func(t *testing.T) {
		var e errs
		f := MustNew("test", limiter(t, core.WithPrefix(prefix+"-timeout")), []Option{WithTimeout(time.Nanosecond), WithErrorHandler(e.hook)})
		rec, ok := admit(f, ctx)
		if !ok || e.count() != 0 || rec.Header().Get("RateLimit") == "" {
			t.Errorf("admitted %v, %d errors, RateLimit %q: want a decision by the limiter's own 10s timeout", ok, e.count(), rec.Header().Get("RateLimit"))
		}
	})

	t.Run("WithLimiterOptions", func(t *testing.T) {
		var seen atomic.Int32
		observer := core.WithObserver(func(core.Event) { seen.Add(1) })
		f := MustNew("test", limiter(t, core.WithPrefix(prefix+"-limopts")), []Option{WithLimiterOptions(observer)})
		admit(f, ctx)
		if n := seen.Load(); n != 0 {
			t.Errorf("WithLimiterOptions' observer saw %d events with New", n)
		}
	})

	t.Run("WithShadow", func(t *testing.T) {
		var shadow, events atomic.Int32
		observer := core.WithObserver(func(e core.Event) {
			events.Add(1)
			if e.Shadow {
				shadow.Add(1)
			}
		})
		f := MustNew("test", limiter(t, core.WithPrefix(prefix+"-shadow"), observer), []Option{WithShadow()})
		for range 3 {
			if _, ok := admit(f, ctx); !ok {
				t.Fatal("shadow mode denied")
			}
		}
		if events.Load() != 3 || shadow.Load() != 0 {
			t.Errorf("observer: %d events, %d with Shadow; want 3 and 0 (the limiter was built without core.WithShadow)", events.Load(), shadow.Load())
		}
	})

	t.Run("WithFailureMode", func(t *testing.T) {
		refused := redistest.RefusedClient(t)
		for _, c := range []struct {
			own, option core.FailureMode
			served      bool
			headers     bool
		}{
			{core.FailOpen, core.FailOpen, true, false},
			{core.FailOpen, core.FailLocal, true, false},
			{core.FailOpen, core.FailClosed, false, false},
			{core.FailClosed, core.FailOpen, false, false},
			{core.FailLocal, core.FailOpen, true, true},
			{core.FailLocal, core.FailClosed, true, true},
		} {
			l, err := core.New(refused, core.FixedWindow, core.PerMinute(5), core.WithFailureMode(c.own))
			if err != nil {
				t.Fatal(err)
			}
			var e errs
			f := MustNew("test", l, []Option{WithFailureMode(c.option), WithErrorHandler(e.hook)})
			rec, ok := admit(f, ctx)
			headers := rec.Header().Get("RateLimit") != ""
			if ok != c.served || headers != c.headers || e.count() != 1 {
				t.Errorf("limiter %v, option %v: served %v (status %d), headers %v, %d errors; want served %v, headers %v, 1 error",
					c.own, c.option, ok, rec.Code, headers, e.count(), c.served, c.headers)
			}
			if !ok && rec.Code != http.StatusServiceUnavailable {
				t.Errorf("limiter %v, option %v: status %d, want 503", c.own, c.option, rec.Code)
			}
			l.Close()
		}
	})
}
