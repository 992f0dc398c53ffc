package core

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// maxSends bounds how many times one script call is sent.
const maxSends = 4

// scriptCmd is a script call that go-redis must send once only.
//
// go-redis resends a command (MaxRetries, 3 by default) when its reply is
// lost: a read timeout, a connection that died after the write. A script
// that has already run then runs again, and a decision counts twice. So
// sluice turns go-redis's retries off for its scripts and resends one
// itself only when the failure cannot have counted (resendable). A reply
// lost after the send is an error, answered by the failure mode: the
// decision may or may not have been counted, but never twice.
type scriptCmd struct{ *redis.IntSliceCmd }

// NoRetry tells go-redis not to resend the command, nor the pipeline
// holding it.
func (scriptCmd) NoRetry() bool { return true }

// slotCmd is a script call to a cluster master, which notes on each of its
// calls whether its master answered it: with its reply, or with a refusal
// of its slot (see slotRefusal). go-redis follows MOVED and ASK itself
// within a send, pausing 10ms and more between them, and sluice pauses
// before it sends a call refused so again; and a pipeline returns only
// when every call of it is settled, so a call answered at once waits for
// another's redirects. A call whose deadline passes meanwhile was answered
// by a master: its caller gets the limiter's timeout, naming the refusal
// when there was one, which counts against no master's health (see
// batcher.timeout). One is made at each send: a hook may keep the command.
// calls is its group's, read by SetErr only while go-redis sends it.
type slotCmd struct {
	scriptCmd
	calls []*call
}

// SetErr sets the call's error, as go-redis does with every reply it
// reads, the redirects it follows included, and notes on the calls what
// it says (see slotCmd): a reply, or a refusal of their slot. The error of
// the send's own context, ended at a deadline, and NOSCRIPT (a master that
// a redirect led to lacks the script, sent again with its source) leave
// the note as it is; any other error (a connection's, another refusal)
// replaces it with none.
func (c *slotCmd) SetErr(err error) {
	c.IntSliceCmd.SetErr(err)
	n := errAnsweredLate
	switch {
	case err == nil:
	case slotRefusal(err):
		n = newTimeoutError(err)
		n.answered = true
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || isNoScript(err):
		return
	default:
		n = nil
	}
	for _, x := range c.calls {
		if x.refused.Load() != n {
			x.refused.Store(n)
		}
	}
}

// errAnsweredLate is the timeout of a call whose master answered it, the
// answer read too late (see slotCmd).
var errAnsweredLate = func() *timeoutError {
	e := newTimeoutError(errors.New("redis answered, but the answer was read after the timeout"))
	e.answered = true
	return e
}()

// pause waits before the next send of a call that Redis could not take:
// 8ms, 16ms, 32ms. It reports false, at once, when ctx ends first.
func pause(ctx context.Context, sends int) bool {
	t := time.NewTimer(8 * time.Millisecond << (sends - 1))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
