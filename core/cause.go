package core

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"weak"

	"github.com/redis/go-redis/v9"
)

// Why a decision timed out. A caller's wait ends at the limiter's timeout
// (the batcher's watchdog), while the batch's send may still be failing:
// go-redis dials again and again until the batch's context ends, and then
// reports the context's end, not the refused dial (its retry loop replaces
// the error), or the dial error arrives when nobody waits for it any more.
// The caller would only learn "context deadline exceeded". So the batcher
// remembers the last error that failed a whole send (sendFailure), and a
// hook on a *redis.Client (one per client, however many limiters share
// it: dialWatch) the last failed dial; a timed-out call's error wraps
// context.DeadlineExceeded with the more telling of the two.

// ErrTimeout is wrapped by the error of a decision that Redis did not
// answer within the limiter's timeout (see WithTimeout), which wraps
// context.DeadlineExceeded too. A decision cut short by the caller's own
// context returns ctx.Err() instead, which is not ErrTimeout.
var ErrTimeout = errors.New("sluice: no answer from redis within the limiter's timeout")

// timeoutError is the error of a decision that Redis did not answer
// within the limiter's timeout: context.DeadlineExceeded, saying that it
// was the limiter's timeout (a caller's own deadline returns its
// context's error itself), with the last Redis error seen when there was
// one.
type timeoutError struct {
	cause error
	// answered: the master answered the call, with a refusal of its
	// slot (the cause) or with its reply, read too late (see slotCmd); the
	// timeout does not count against Redis's health
	answered bool
	// What Error and Unwrap return, made once: reading or inspecting the
	// error allocates nothing.
	msg    string
	unwrap []error
}

func newTimeoutError(cause error) *timeoutError {
	const text = "context deadline exceeded (no answer from redis within the limiter's timeout"
	e := &timeoutError{cause: cause, msg: text + ")", unwrap: []error{context.DeadlineExceeded, ErrTimeout}}
	if cause != nil {
		e.msg = text + "; last redis error: " + cause.Error() + ")"
		e.unwrap = append(e.unwrap, cause)
	}
	return e
}

// errTimeout is the timeoutError of a Redis that said nothing: it
// accepted the call and never answered.
var errTimeout error = newTimeoutError(nil)

func (e *timeoutError) Error() string { return e.msg }

func (e *timeoutError) Unwrap() []error { return e.unwrap }

// lastError holds a timeoutError built once per distinct error, so that
// timing out allocates nothing.
type lastError struct{ last atomic.Pointer[timeoutError] }

// note remembers err, unless it only says that a context ended.
func (l *lastError) note(err error) {
	if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return
	}
	if last := l.last.Load(); last == nil || last.cause.Error() != err.Error() {
		l.last.Store(newTimeoutError(err))
	}
}

// clear forgets the last error: Redis has answered (or accepted) since.
func (l *lastError) clear() {
	if l.last.Load() != nil {
		l.last.Store(nil)
	}
}

// sendFailure is the batcher's memory of why sends fail.
type sendFailure struct {
	lastError
	dials *dialWatch // nil when the client is not a *redis.Client
}

// sent records what a command that went to Redis returned, whatever the
// path (a batch's or a lone caller's) and the kind (a script call, a
// Reset's DEL, the probe's SET): its error, or that Redis answered.
func (s *sendFailure) sent(err error) {
	if err != nil {
		s.note(err)
	} else {
		s.clear()
	}
}

// clear forgets the last send error and the last failed dial: Redis has
// answered since, so neither says why a later call times out.
func (s *sendFailure) clear() {
	s.lastError.clear()
	if s.dials != nil {
		s.dials.clear()
	}
}

// timeout is the error of a call that timed out: context.DeadlineExceeded
// at the limiter's timeout, naming the last send error, or else the last
// failed dial, if any.
func (s *sendFailure) timeout() error {
	if e := s.last.Load(); e != nil {
		return e
	}
	if s.dials != nil {
		if e := s.dials.last.Load(); e != nil {
			return e
		}
	}
	return errTimeout
}

// dialWatch is a go-redis hook that remembers whether the client's last
// dial failed, and why. It also sends a lone caller's call on the copy of
// the client that bounds it (see inlineBound); every other command, and
// every pipeline, passes through untouched.
type dialWatch struct{ lastError }

func (w *dialWatch) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := next(ctx, network, addr)
		if err != nil {
			w.note(err)
		} else {
			w.clear()
		}
		return conn, err
	}
}

// ProcessHook sends a lone caller's bounded call on its copy of the
// client (see boundedCmd), and every other command on.
func (w *dialWatch) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if b, ok := cmd.(*boundedCmd); ok {
			return b.via.Process(ctx, b.scriptCmd)
		}
		return next(ctx, cmd)
	}
}

func (w *dialWatch) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// dialWatches holds the dialWatch of each *redis.Client a limiter uses,
// keyed weakly: an entry goes when its client is collected.
var dialWatches sync.Map // weak.Pointer[redis.Client] → *dialWatch

// watchDials returns the dialWatch of client, adding it to the client's
// hooks the first time; nil for other clients.
func watchDials(client redis.UniversalClient) *dialWatch {
	c, ok := client.(*redis.Client)
	if !ok || c == nil {
		return nil
	}
	key := weak.Make(c)
	if w, ok := dialWatches.Load(key); ok {
		return w.(*dialWatch)
	}
	w := &dialWatch{}
	if prev, loaded := dialWatches.LoadOrStore(key, w); loaded {
		return prev.(*dialWatch)
	}
	c.AddHook(w)
	runtime.AddCleanup(c, func(key weak.Pointer[redis.Client]) { dialWatches.Delete(key) }, key)
	return w
}
