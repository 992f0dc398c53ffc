package flow

import (
	"context"
	"fmt"
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

// TestOptionsPassedToNew pins what the option docs say about options given
// to New: those that only shape the limiter an algorithm constructor
// builds make New panic; the others do what their docs say.
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
	ctx := context.Background()

	// The options that only shape a constructor's limiter cannot apply to
	// the limiter given to New: New refuses them at construction, naming
	// the option and what to use instead.
	for _, c := range []struct {
		opt     Option
		name    string
		instead string
	}{
		{WithPrefix(prefix + "-option"), "WithPrefix", "core.WithPrefix"},
		{WithDenyCache(100), "WithDenyCache", "core.WithDenyCache"},
		{WithTimeout(time.Nanosecond), "WithTimeout", "core.WithTimeout"},
		{WithLimiterOptions(core.WithObserver(func(core.Event) {})), "WithLimiterOptions", "core.New or core.NewPolicy"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l := limiter(t, core.WithPrefix(prefix+"-"+c.name))
			defer func() {
				msg, _ := recover().(string)
				if !strings.Contains(msg, "test: "+c.name+" configures the limiter") || !strings.Contains(msg, c.instead) {
					t.Errorf("New with %s: panic %q; want one naming %s and %s", c.name, msg, c.name, c.instead)
				}
			}()
			MustNew("test", l, []Option{c.opt})
		})
	}
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

// An unknown header mode is a mistake, refused at construction as an
// unknown failure mode is, by the algorithm constructors and New alike:
// it would otherwise send no rate-limit headers at all, silently.
func TestUnknownHeaderModePanics(t *testing.T) {
	rdb := redistest.Client(t)
	l, err := core.New(rdb, core.GCRA, core.PerSecond(1))
	if err != nil {
		t.Fatal(err)
	}
	for name, build := range map[string]func(){
		"Must":    func() { Must("test.GCRA", rdb, core.GCRA, core.PerSecond(1), []Option{WithHeaders(99)}) },
		"MustNew": func() { MustNew("test.New", l, []Option{WithHeaders(99)}) },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if msg := fmt.Sprint(recover()); !strings.Contains(msg, "unknown header mode 99") {
					t.Errorf("WithHeaders(99): panic %q; want one naming the unknown header mode", msg)
				}
			}()
			build()
		})
	}
}
