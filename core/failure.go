package core

import "errors"

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
	// own: N instances admit up to N times the limit between them. When
	// Redis is back, decisions go to Redis again; what the instances
	// admitted locally is not carried over to Redis.
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
