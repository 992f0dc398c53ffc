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
// calls whether the last reply it got refused them for their slot (see
// slotRefusal). go-redis follows MOVED and ASK itself within a send,
// pausing 10ms and more between them, and sluice pauses before it sends a
// call refused so again: a call whose deadline passes meanwhile was
// refused by a master that answered. Its caller gets the limiter's
// timeout naming that refusal, which counts against no master's health
// (see batcher.timeout). One is made at each send: a hook may keep the
// command.
type slotCmd struct {
	scriptCmd
	calls []*call
}

// SetErr sets the call's error, as go-redis does with every reply it
// reads, the redirects it follows included, and notes the refusal of
// their slot on the calls (see slotCmd). The error of the send's own
// context, ended at a deadline, leaves the note as it is; an answer, or
// any other error (a connection's, another refusal), replaces it with
// none.
func (c *slotCmd) SetErr(err error) {
	c.IntSliceCmd.SetErr(err)
	if err == nil {
		for _, x := range c.calls {
			if x.refused.Load() != nil {
				x.refused.Store(nil)
			}
		}
		return
	}
	var n *timeoutError // none
	if slotRefusal(err) {
		n = newTimeoutError(err)
		n.slot = true
	} else if errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) {
		return
	}
	for _, x := range c.calls {
		x.refused.Store(n)
	}
}

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
