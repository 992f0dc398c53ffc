package flow

import (
	"errors"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
)

// ErrorLogInterval is the shortest time between two lines of one kind
// written by the default error handler.
const ErrorLogInterval = 10 * time.Second

// The kinds of error the default handler tells apart: each has its own
// first line and its own interval, so a flood of one (every anonymous
// request's key error) hides no other (Redis failing).
const (
	kindDecision  = iota // Redis failed or was too slow
	kindKey              // the key function failed
	kindLate             // the request's own deadline ended first
	kindCost             // a cost larger than a rule admits at once
	kindNoLimiter        // no limiter for the request
	kinds
)

var kindNames = [kinds]string{"decision", "key", "late", "cost", "no-limiter"}

// errorLog is the default error handler of a Flow: it logs the first
// error of each kind with log/slog at once, then at most one line per
// ErrorLogInterval per kind, written when an error comes after the
// interval has passed (no goroutine, no timer), with the number of errors
// of that kind left out since the previous line ("suppressed") and when
// that line was written ("since"). A Redis outage or a crowd of anonymous
// requests thus costs a few lines, not one per request.
//
// An error left out costs a clock read and two atomic operations.
type errorLog struct {
	now   func() time.Time // time.Now; tests move it by hand
	kinds [kinds]kindLog
}

type kindLog struct {
	last       atomic.Int64 // the last line's time, as logTime; 0 before the first
	suppressed atomic.Int64 // errors left out since the last line
}

// logStart is what logTime counts from.
var logStart = time.Now()

// logTime returns t as nanoseconds since logStart, on the monotonic clock
// when t has a reading of it (time.Now's has): a step of the wall clock
// (NTP, a machine resumed) neither silences the log nor floods it. It is
// never 0 for a time after start-up, which is when errors come.
func logTime(t time.Time) int64 { return int64(t.Sub(logStart)) }

// lateError marks the errors of requests answered 503 because their own
// deadline ended before they could be served: it is errLate (see kindOf).
type lateError struct{ error }

func (e lateError) Unwrap() error        { return e.error }
func (e lateError) Is(target error) bool { return target == errLate }

// errLate is what a lateError is, for kindOf, which finds it with
// errors.Is: errors.As would move its target to the heap, an allocation
// per error.
var errLate = errors.New("sluice: the request's deadline came first")

func kindOf(err error) int {
	switch {
	case errors.Is(err, errLate):
		return kindLate
	case errors.Is(err, ErrKey):
		return kindKey
	case errors.Is(err, core.ErrCostExceedsLimit):
		return kindCost
	case errors.Is(err, ErrNoLimiter):
		return kindNoLimiter
	}
	return kindDecision
}

// log is the error hook: it logs err, or counts it when a line of its kind
// was written less than ErrorLogInterval ago.
func (l *errorLog) log(r *http.Request, err error) {
	kind := kindOf(err)
	k := &l.kinds[kind]
	// last is read before the clock: a line written in between fails the
	// CompareAndSwap below, so a time before last can only be a clock gone
	// back, or a race within a clock reading of another caller's.
	last := k.last.Load()
	now := l.now()
	at := logTime(now)
	// A time a little before the last line's is a race: a caller that read
	// the clock before another wrote that line. One more than an interval
	// before it is a clock without a monotonic reading that went back: the
	// interval counts as past.
	if d := at - last; last != 0 && d > -int64(ErrorLogInterval) && d < int64(ErrorLogInterval) || !k.last.CompareAndSwap(last, at) {
		k.suppressed.Add(1)
		return
	}
	attrs := []any{"err", err, "kind", kindNames[kind], "method", r.Method, "path", r.URL.Path}
	// The first line says nothing of errors that came with it: the next
	// line counts them, since this one.
	if last != 0 {
		if n := k.suppressed.Swap(0); n > 0 {
			attrs = append(attrs, "suppressed", n, "since", now.Add(-time.Duration(at-last)).UTC())
		}
	}
	slog.ErrorContext(r.Context(), "sluice: rate limiting failed", attrs...)
}
