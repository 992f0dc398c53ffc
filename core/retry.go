package core

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
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

// resendable reports whether a script call that failed with err may be
// sent again without counting twice: no connection could be made or taken
// from the pool; Redis refused the command before running it (loading its
// data, a replica, a cluster slot moving or down, too many clients); or,
// when the call went alone, its write failed (a command written in part
// never runs) or its new connection was closed during the handshake. A
// script that failed inside (a key of the wrong type) answers per
// request, not with an error of the call. Nothing after the
// write is resendable: a read timeout, a connection reset, a connection
// closed by go-redis under the call (as a failover client does to its
// connections to a replaced master): the script may have run, and on a
// master whose writes reached the new one before the switch. Nor a write
// that failed after other script calls of its pipeline went out whole.
func resendable(err error, alone bool) bool {
	if err == nil {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) {
		switch op.Op {
		case "dial":
			return true
		case "write":
			return alone
		}
		return false // a read, or a deadline set after the write
	}
	// Bare, not in a net.OpError: go-redis's report of a new connection
	// whose handshake failed because it was closed under it (a failover
	// client closing its connections to a replaced master), where the
	// script was never written; but also a TLS connection's write cut
	// short by such a close (crypto/tls reports it bare), after which
	// other script calls of the pipeline may have gone out whole. So, as
	// for a failed write, only a call that went alone.
	if errors.Is(err, net.ErrClosed) {
		return alone
	}
	return errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted) ||
		redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsMasterDownError(err) ||
		redis.IsTryAgainError(err) || redis.IsClusterDownError(err) || redis.IsMaxClientsError(err)
}

// pause waits before the next send of a call that Redis could not take:
// 8ms, 16ms, 32ms. It reports false, at once, when ctx ends first.
func pause(ctx context.Context, sends int) bool {
	t := timerPool.Get().(*time.Timer)
	defer func() { t.Stop(); timerPool.Put(t) }()
	t.Reset(8 * time.Millisecond << (sends - 1))
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

var timerPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
