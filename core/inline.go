package core

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// enforcesDeadlines reports whether go-redis itself ends a command at its
// context's deadline: with ContextTimeoutEnabled, on a client that sets
// deadlines on its connections at all. A ReadTimeout or WriteTimeout of -2
// sets none, and go-redis then ignores the context's; -1 leaves the
// context's. A Client stores -2 as -1 and -1 as 0, a ClusterClient keeps
// -2 and stores -1 as 0, a Ring keeps both as given (its shards store them
// as a Client does).
func enforcesDeadlines(client redis.UniversalClient) bool {
	enforces := func(ctxTimeout bool, read, write, least time.Duration) bool {
		return ctxTimeout && read >= least && write >= least
	}
	switch c := client.(type) {
	case *redis.Client:
		o := c.Options()
		return enforces(o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout, 0)
	case *redis.ClusterClient:
		o := c.Options()
		return enforces(o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout, 0)
	case *redis.Ring:
		o := c.Options()
		return enforces(o.ContextTimeoutEnabled, o.ReadTimeout, o.WriteTimeout, -1)
	}
	return false
}

// inlineLag is how late a caller whose context can be canceled may learn
// of it, when it sends its own call (sendInline): it does only when its
// deadline is at most inlineLag away, and learns of a cancellation with
// the answer, or at that deadline. (DefaultTimeout is well within it: a
// request's lone decision is sent from its own goroutine.) A caller with a
// later deadline waits on its answer through a flusher, and gives up at
// once when canceled.
const inlineLag = time.Second

// sendInline sends c alone from its caller's goroutine (see do), as a
// plain command (no pipeline): go-redis ends it at c's deadline, on b's
// client or, with bounded set, on that copy of it (see inlineBound). Then
// it hands what queued meanwhile to a flusher, and returns c's error as do
// does: ctx's when it was canceled, or ran out of time at its own
// deadline, while the call was out; the watchdog's at the limiter's
// timeout.
func (b *batcher) sendInline(ctx context.Context, c *call, bounded *redis.Client) error {
	err := b.sendOwn(c, bounded)
	if err != nil && (ctx.Err() != nil || timedOutAtOwnDeadline(ctx, c, err)) {
		return ctxErr(ctx)
	}
	if timedOut(c, err) {
		return b.timeout(c)
	}
	return err
}

// sendOwn sends c and reports its error, then gives back the caller's
// place in active (see sendInline).
func (b *batcher) sendOwn(c *call, bounded *redis.Client) error {
	ctx := &c.ctx
	ctx.arm(c.deadline)
	defer ctx.disarm()
	var err error // the call's own failure, as a batch's (see answer)
	switch c.kind {
	case callScript:
		if b.cluster != nil {
			// the master its failure counts against (see masterHealth)
			if node, e := b.cluster.MasterForKey(ctx, slotKeys()[c.slot]); e == nil {
				c.node.Store(node)
			}
		}
		one := [1]*call{c}
		args := appendScriptCall(c.scratch[:0], b.script, false, false, one[:], b.ruleArgs)
		var cmd *redis.IntSliceCmd
		for sends := 1; ; sends++ {
			cmd = redis.NewIntSliceCmd(ctx, args...)
			if bounded != nil {
				// A command of its own (a hook may keep it)
				_ = b.client.Process(ctx, &boundedCmd{scriptCmd{cmd}, bounded})
			} else {
				_ = b.client.Process(ctx, scriptCmd{cmd})
			}
			err := cmd.Err()
			if sends >= maxSends {
				break
			}
			if isNoScript(err) {
				args[0], args[1] = "eval", b.script.src
			} else if !resendable(err, true) || !pause(ctx, sends) {
				break
			}
		}
		clear(args)
		c.scratch = args[:0]
		var reply []int64
		if reply, err = cmd.Result(); err == nil {
			c.res, _, c.err = parseReply(reply, b.rules, c.res[:0])
		} else {
			c.err = err
		}
	default: // callDel, callProbe
		err = otherCmd(ctx, b.client, c).Err()
		c.err = err
	}
	b.failed.sent(err) // what a timeout names as its cause follows lone calls too
	b.mu.Lock()
	start := len(b.pending) > 0
	if start {
		start = b.handOver() // a flusher takes over this caller's place in active
	} else {
		b.active--
		b.releaseParked()
	}
	b.mu.Unlock()
	if start {
		go b.flush(nil, 0)
	}
	return c.err
}

// A default go-redis client (ContextTimeoutEnabled unset) ignores context
// deadlines while it reads: it ends a command at its own read timeout
// (seconds, by default). So a lone caller's script call on a default
// *redis.Client goes through the client's hooks as every command does and
// is then sent, by the innermost hook (sluice's: see dialWatch), on the
// batcher's copy of the client (boundedCopy), which shares its connection
// pool and enforces context deadlines: go-redis ends every read and write
// of the call (a new connection's handshake too) at the call's deadline,
// as on a client with ContextTimeoutEnabled. A hook added to the client
// after its first limiter was made (and sluice's hook with it) sits inside
// sluice's and is passed over by such a call.

// boundedCmd is a script call that the innermost hook sends on via.
type boundedCmd struct {
	scriptCmd
	via *redis.Client
}

// boundedCopy returns a copy of c that enforces context deadlines, or nil
// when a lone caller must hand its call to a flusher instead:
//   - when c never sets a deadline on its connections (a read or write
//     timeout of -2, stored as -1), the copy's deadlines would outlive
//     its calls on the connections they share;
//   - a CredentialsProvider (or a StreamingCredentialsProvider) runs when
//     a connection is made and takes no context: the call could not end
//     at its deadline while it runs. (The Dialer, OnConnect and
//     CredentialsProviderContext are handed the call's context.)
//
// The copy is made by WithTimeout: it shares c's pool and none of its
// hooks (sluice's hook on c sends the call on it: see boundedCmd). Its
// own Options, a clone of c's that nothing else holds, get c's read and
// write timeouts back and ContextTimeoutEnabled before its first use;
// go-redis reads them at every command: the tests hold the copy to the
// call's deadline, a new connection's handshake included
// (TestLoneCallerOnDefaultClientSendsInline), and to c's own read timeout
// (TestLoneCallerKeepsTheClientsReadTimeout).
func boundedCopy(c *redis.Client) *redis.Client {
	opt := c.Options()
	if opt.ReadTimeout < 0 || opt.WriteTimeout < 0 || opt.CredentialsProvider != nil || opt.StreamingCredentialsProvider != nil {
		return nil
	}
	cp := c.WithTimeout(opt.ReadTimeout)
	own := cp.Options()
	own.ReadTimeout, own.WriteTimeout = opt.ReadTimeout, opt.WriteTimeout
	own.ContextTimeoutEnabled = true
	return cp
}

// inlineBound reports whether a lone caller sends a call of kind itself,
// and on which client: nil for the batcher's own, which enforces context
// deadlines, or the copy that does (a script call on a default
// *redis.Client). Other calls on other clients go to a flusher.
func (b *batcher) inlineBound(kind callKind) (bool, *redis.Client) {
	if b.inline {
		return true, nil
	}
	if b.bounded != nil && kind == callScript {
		return true, b.bounded
	}
	return false, nil
}
