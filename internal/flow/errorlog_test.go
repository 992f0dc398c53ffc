package flow

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
)

// logLines is a slog.Handler that keeps every record as one line of text.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logLines) WithGroup(string) slog.Handler            { return l }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	var b strings.Builder
	b.WriteString(r.Message)
	r.Attrs(func(a slog.Attr) bool {
		b.WriteString(" " + a.Key + "=" + a.Value.String())
		return true
	})
	l.mu.Lock()
	l.lines = append(l.lines, b.String())
	l.mu.Unlock()
	return nil
}

func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// captureLog makes the default slog logger write to the returned lines
// until t ends.
func captureLog(t *testing.T) *logLines {
	l := &logLines{}
	prev := slog.Default()
	slog.SetDefault(slog.New(l))
	t.Cleanup(func() { slog.SetDefault(prev) })
	return l
}

// fakeClock is the time of a flow's error log, moved by hand.
type fakeClock struct{ now time.Time }

func (c *fakeClock) get() time.Time { return c.now }

// The default error handler does not write a line per failed request:
// the first of each kind (a failed decision, a key error), then at most
// one per interval, counting the ones it left out.
func TestErrorLogSampled(t *testing.T) {
	lines := captureLog(t)
	lim, err := core.New(redistest.RefusedClient(t), core.GCRA, core.PerSecond(10), core.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	clock := &fakeClock{now: time.Unix(1_700_000_000, 0)}
	anonymous := WithKey(func(*http.Request) (string, error) { return "", errors.New("anonymous request") })
	f := New(lim, []Option{anonymous})
	f.errors.now = clock.get
	serve := func(n int) {
		for range n {
			rec := httptest.NewRecorder()
			if !f.Admit(rec, httptest.NewRequest("GET", "/", nil), nil) {
				t.Fatalf("not served, status %d: fail open expected", rec.Code)
			}
		}
	}
	serve(200) // every one a key error and a failed decision
	if got := lines.all(); len(got) != 2 {
		t.Fatalf("%d lines for 200 failing requests, want 2 (one per kind):\n%s", len(got), strings.Join(got, "\n"))
	}
	clock.now = clock.now.Add(5 * time.Second)
	serve(100)
	if got := lines.all(); len(got) != 2 {
		t.Fatalf("%d lines, want still 2 within the interval:\n%s", len(got), strings.Join(got, "\n"))
	}
	clock.now = clock.now.Add(ErrorLogInterval)
	serve(1)
	got := lines.all()
	if len(got) != 4 {
		t.Fatalf("%d lines, want 4 after the interval:\n%s", len(got), strings.Join(got, "\n"))
	}
	for _, line := range got[2:] {
		if !strings.Contains(line, "suppressed=299") {
			t.Errorf("line %q does not count the 299 left out", line)
		}
	}
	if !strings.Contains(strings.Join(got, "\n"), "connection refused") {
		t.Errorf("no line names the refused connection:\n%s", strings.Join(got, "\n"))
	}
}

// The interval is measured on the monotonic clock: a step back of the
// wall clock (NTP, a VM resumed) does not silence the log until the wall
// clock has caught up.
func TestErrorLogSurvivesClockStepBack(t *testing.T) {
	lines := captureLog(t)
	// time.Now's monotonic reading never steps back; a wall reading alone
	// (Round(0) drops the other) is what steps, as a clock without one.
	clock := &fakeClock{now: time.Now().Round(0)}
	el := errorLog{now: clock.get}
	r := httptest.NewRequest("GET", "/", nil)
	fail := errors.New("redis down")
	el.log(r, fail)
	clock.now = clock.now.Add(-time.Hour) // as a stepped wall clock reads
	for range 30 {
		clock.now = clock.now.Add(time.Second)
		el.log(r, fail)
	}
	if got := lines.all(); len(got) < 3 {
		t.Errorf("30s of errors after the clock stepped back wrote %d line(s), want 3 or more:\n%s", len(got), strings.Join(got, "\n"))
	}
}

// Errors that come together with the first line of their kind are counted
// in the next line, whose "since" is when the first was written: the
// first line has no "since", as no line came before it.
func TestErrorLogFirstLineHasNoSince(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	fail := errors.New("redis down")
	for range 300 {
		lines := &logLines{}
		prev := slog.Default()
		slog.SetDefault(slog.New(lines))
		el := errorLog{now: time.Now}
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 16 {
			wg.Add(1)
			go func() { defer wg.Done(); <-start; el.log(r, fail) }()
		}
		close(start)
		wg.Wait()
		slog.SetDefault(prev)
		got := lines.all()
		if len(got) != 1 || strings.Contains(got[0], "since") || strings.Contains(got[0], "suppressed") {
			t.Fatalf("16 errors at once wrote %q; want one line without suppressed or since", got)
		}
	}
}

// Callers racing over one kind's line write one line: a caller whose clock
// was read before another's line was written (its time a little before
// that line's) is counted, not written.
func TestErrorLogRaceWritesOneLine(t *testing.T) {
	lines := captureLog(t)
	base := time.Now()
	var el errorLog
	r := httptest.NewRequest("GET", "/", nil)
	fail := errors.New("redis down")
	calls := 0
	el.now = func() time.Time {
		calls++
		if calls == 1 {
			// This caller's clock is read; before it goes on, another
			// caller reads a later time and writes the line.
			el.log(r, fail)
			return base
		}
		return base.Add(time.Microsecond)
	}
	// The outer caller then finds a line written after its own time:
	// counted, not written again.
	el.log(r, fail)
	if got := lines.all(); len(got) != 1 {
		t.Errorf("two racing errors wrote %d lines, want 1:\n%s", len(got), strings.Join(got, "\n"))
	}
}
