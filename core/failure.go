package core

import (
	"context"
	"errors"
	"time"
)

// FailureMode says how a Limiter decides when Redis cannot be asked: it is
// unreachable, too slow for the timeout, or taken for unhealthy. In every
// mode AllowN still returns the error, so it can be logged or counted. A
// decision that the caller's own context ends (canceled, or past its own
// deadline) is no such failure: it is not admitted, whatever the mode
// (see Limiter.AllowN).
type FailureMode int

const (
	// FailOpen admits the request (Result.Allowed true). Availability comes
	// first; the limit is not enforced during the outage.
	FailOpen FailureMode = iota
	// FailClosed denies the request. The limit is never exceeded, and
	// nothing is served during the outage.
	FailClosed
	// FailLocal decides with the limiter's in-process twin (see Local), on
	// this process's clock. Each instance then enforces the limit on its
	// own: N instances admit up to N times the limit between them, and a
	// window that spans the outage's start up to N+1 times (the twin does
	// not see what Redis admitted before it). When Redis is back, decisions
	// go to Redis again; what the instances admitted locally is not carried
	// over to Redis.
	//
	// The twin keeps what it admitted until each key is back at its
	// untouched state, as a Redis key's TTL would run out; Redis coming
	// back does not clear it. So a Redis that fails again, or that answers
	// the probe and still refuses decisions, never hands out a key's budget
	// afresh. It holds at most DefaultLocalKeys keys: when full, it forgets
	// first the keys closest to untouched.
	FailLocal
)

// String returns "fail-open", "fail-closed" or "fail-local".
func (m FailureMode) String() string {
	switch m {
	case FailOpen:
		return "fail-open"
	case FailClosed:
		return "fail-closed"
	case FailLocal:
		return "fail-local"
	}
	return "FailureMode(?)"
}

// Health is the state of a Limiter's Redis, as its decisions see it.
type Health int

const (
	// Healthy: decisions go to Redis.
	Healthy Health = iota
	// Unhealthy: decisions are made by the FailureMode without asking
	// Redis, while a background probe waits for Redis to answer.
	Unhealthy
)

// String returns "healthy" or "unhealthy".
func (h Health) String() string {
	if h == Healthy {
		return "healthy"
	}
	return "unhealthy"
}

// ErrUnavailable is returned, wrapping the last Redis error, for decisions
// made while Redis is taken for unhealthy (see WithHealthCheck).
var ErrUnavailable = errors.New("sluice: redis unavailable")

type unavailableError struct{ cause error }

func (e *unavailableError) Error() string {
	return ErrUnavailable.Error() + ": " + e.cause.Error()
}

func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.cause} }

// ctxErr returns the error of ctx, which gaveUp reports ended: once ctx
// says so, as its timer may fire a moment after its deadline has passed
// (see gaveUp), so that a decision cut short returns ctx.Err() itself,
// set by then when ctx's timer fires within ctxGrace. It waits ctxGrace at
// most: a context may report a deadline it never acts on (one that can
// never be canceled, Done nil, or a WithCancel of it, whose Done closes
// only at cancel); its deadline has passed all the same.
func ctxErr(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if done := ctx.Done(); done != nil {
		t := time.NewTimer(ctxGrace)
		defer t.Stop()
		select {
		case <-done:
			if err := ctx.Err(); err != nil {
				return err
			}
		case <-t.C:
		}
	}
	return context.DeadlineExceeded
}

// ctxGrace is how long ctxErr waits for a context past its deadline to say
// it has ended: a timer's moment, with room for a loaded machine.
const ctxGrace = 50 * time.Millisecond

// gaveUp reports whether the caller's context has ended or reached its
// deadline.
func gaveUp(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}

// failed answers a decision (or a Peek) that Redis did not make, with err,
// by the failure mode; or, when the caller's own context ended it
// (canceled, or past its own deadline; whether or not Redis was asked: a
// canceled caller is not even sent), cut short: not admitted, whatever the
// failure mode, and nothing taken from the twin. The caller is gone, and
// Redis may yet count its decision; a failure mode admitting it (fail
// open, or the twin's own budget with FailLocal) would let through, while
// Redis is healthy and denying, every caller that sets a deadline shorter
// than Redis's answer takes: one a client may choose (a gRPC deadline). To
// bound how long a decision may take, WithTimeout is the limiter's own
// timeout, after which the failure mode decides. A Peek gets the answer an
// Allow would.
func (l *Limiter) failed(ctx context.Context, key string, consume bool, n int, err error) (Result, error) {
	if gaveUp(ctx) {
		return l.undecided(false), ctxErr(ctx)
	}
	return l.fallback(key, consume, n, err)
}

// fallback is the failure mode's answer to a decision Redis did not make:
// the twin's (FailLocal), or admitted or not as the mode says; for a Peek,
// what an Allow would get.
func (l *Limiter) fallback(key string, consume bool, n int, err error) (Result, error) {
	if l.local != nil {
		if consume {
			res, _ := l.local.AllowN(time.Now(), key, n)
			return res, err
		}
		return l.local.Peek(time.Now(), key), err
	}
	return l.undecided(l.opts.failure == FailOpen), err
}

// undecided is the Result of a decision (or a Peek) that neither Redis
// nor the twin made (Rules nil), admitted or not; it names the policy's
// first rule.
func (l *Limiter) undecided(admitted bool) Result {
	r := l.rules[0]
	return Result{Allowed: admitted, Limit: r.Limit, Rule: r.Name}
}
