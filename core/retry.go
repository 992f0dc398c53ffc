package core

import (
	"context"
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
