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

	// (WithFailureMode(core.FailLocal) panics: TestOptionsThatCannotApplyPanic.)

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

// An option that cannot apply where it is given, or that is given what is
// not one of its values, panics at construction with a message naming it,
// by the algorithm constructors and New alike: each was once taken
// silently, the middleware then doing something else than its user meant.
func TestOptionsThatCannotApplyPanic(t *testing.T) {
	rdb := redistest.Client(t)
	built := func(t *testing.T, alg core.Algorithm) *core.Limiter {
		l, err := core.New(rdb, alg, core.PerSecond(1))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	perRequest := WithLimiterFunc(func(*http.Request) *core.Limiter { return nil })
	panics := func(t *testing.T, what, want string, build func()) {
		t.Helper()
		defer func() {
			t.Helper()
			if msg := fmt.Sprint(recover()); !strings.Contains(msg, want) {
				t.Errorf("%s: panic %q; want one saying %q", what, msg, want)
			}
		}()
		build()
	}
	must := func(alg core.Algorithm, opts ...Option) func() {
		return func() { Must("test.Algorithm", rdb, alg, core.PerSecond(1), opts) }
	}
	mustNew := func(l *core.Limiter, opts ...Option) func() {
		return func() { MustNew("test.New", l, opts) }
	}
	gcra, leaky := built(t, core.GCRA), built(t, core.LeakyBucket)

	// An empty prefix is core's mistake too; it used to become "sluice",
	// sharing the budgets of every limiter of the default prefix.
	panics(t, `WithPrefix("")`, "empty key prefix", must(core.GCRA, WithPrefix("")))

	panics(t, "an unknown failure mode, constructor", "unknown failure mode 42", must(core.GCRA, WithFailureMode(42)))
	panics(t, "an unknown failure mode, New", "unknown failure mode 42", mustNew(gcra, WithFailureMode(42)))

	// A built limiter cannot be given a twin: New used to serve without
	// headers, failing open, whatever Redis did.
	panics(t, "FailLocal, New", "core.WithFailureMode(core.FailLocal)", mustNew(gcra, WithFailureMode(core.FailLocal)))
	panics(t, "FailLocal, New with a limiter function", "core.WithFailureMode(core.FailLocal)", mustNew(nil, perRequest, WithFailureMode(core.FailLocal)))
	local, err := core.New(rdb, core.GCRA, core.PerSecond(1), core.WithFailureMode(core.FailLocal))
	if err != nil {
		t.Fatal(err)
	}
	defer local.Close()
	panics(t, "FailLocal, New of a FailLocal limiter", "leave the option out", mustNew(local, WithFailureMode(core.FailLocal)))

	// Only a LeakyBucket holds a request.
	panics(t, "WithMaxHold, GCRA", "WithMaxHold", must(core.GCRA, WithMaxHold(time.Second)))
	panics(t, "WithMaxHold, New of a GCRA limiter", "WithMaxHold", mustNew(gcra, WithMaxHold(time.Second)))
	mustNew(leaky, WithMaxHold(time.Second))()
	mustNew(nil, perRequest, WithMaxHold(time.Second))() // its limiters may hold
	must(core.GCRA, perRequest, WithMaxHold(time.Second))()
	must(core.LeakyBucket, WithMaxHold(0))()
	panics(t, "a negative WithMaxHold", "WithMaxHold(-1s)", must(core.LeakyBucket, WithMaxHold(-time.Second)))
	panics(t, "a negative WithMaxHold, New", "WithMaxHold(-1s)", mustNew(leaky, WithMaxHold(-time.Second)))

	// A nil function used to leave the default in place: a per-user key
	// built conditionally became the peer address, with no sign.
	for name, opt := range map[string]Option{
		"WithKey":          WithKey(nil),
		"WithContextKey":   WithContextKey(nil),
		"WithDenyHandler":  WithDenyHandler(nil),
		"WithErrorHandler": WithErrorHandler(nil),
		"WithCost":         WithCost(nil),
		"WithSkip":         WithSkip(nil),
		"WithLimiterFunc":  WithLimiterFunc(nil),
	} {
		panics(t, name+"(nil)", name+"(nil)", must(core.GCRA, opt))
		panics(t, name+"(nil), New", name+"(nil)", mustNew(gcra, opt))
	}

	// The last value given to an option is the one that counts, a mistake
	// included: defaults overridden by a caller's options are common.
	key := func(*http.Request) (string, error) { return "k", nil }
	must(core.GCRA, WithKey(nil), WithKey(key))()
	must(core.LeakyBucket, WithMaxHold(-time.Second), WithMaxHold(time.Second))()
	must(core.GCRA, WithHeaders(99), WithHeaders(HeadersDraft))()
	mustNew(gcra, WithFailureMode(42), WithFailureMode(core.FailOpen))()
	mustNew(gcra, WithFailureMode(core.FailLocal), WithFailureMode(core.FailOpen))()
	panics(t, "a valid key, then nil", "WithKey(nil)", must(core.GCRA, WithKey(key), WithKey(nil)))
}
