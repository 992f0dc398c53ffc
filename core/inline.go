package core

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// sendInline sends c alone from the caller's goroutine, as a plain command
// (no pipeline): go-redis ends it at c's deadline, itself or, with bounded
// set, on that copy of the client (see inlineBound). Then it hands what
// queued meanwhile to a flusher.
func (b *batcher) sendInline(c *call, bounded *redis.Client) (bool, error) {
	ctx := &c.ctx
	ctx.arm(c.deadline)
	defer ctx.disarm()
	switch c.kind {
	case callScript:
		one := [1]*call{c}
		args := appendScriptCall(c.scratch[:0], b.script, false, false, one[:], b.ruleArgs)
		var cmd *redis.IntSliceCmd
		for sends := 1; ; sends++ {
			cmd = redis.NewIntSliceCmd(ctx, args...)
			if bounded != nil {
				c.bounded = boundedCmd{scriptCmd{cmd}, bounded}
				_ = b.client.Process(ctx, &c.bounded) // (a pointer: nothing boxed)
				c.bounded = boundedCmd{}
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
		if reply, c.err = cmd.Result(); c.err == nil {
			c.res, _, c.err = parseReply(reply, b.rules, c.res[:0])
		}
	case callDel:
		c.err = b.client.Del(ctx, keyStrings(c.keys)...).Err()
	case callProbe:
		c.err = b.client.Set(ctx, keyStrings(c.keys)[0], "1", time.Second).Err()
	}
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
		go b.flush()
	}
	return true, c.err
}

// A default go-redis client (ContextTimeoutEnabled unset) ignores context
// deadlines while it reads: it ends a command at its own read timeout
// (seconds, by default). So a lone caller's script call on a default
// *redis.Client goes through the client's hooks as every command does and
// is then sent, by the innermost hook (sluice's: see dialWatch), on a copy
// of the client made by WithTimeout, which shares its connection pool and
// whose read and write timeouts are the limiter's timeout: go-redis ends
// the write and the read each within that timeout of its start, that is at
// the call's deadline (to within the microseconds between the call's start
// and the read's). It holds only for a deadline timeout from now: a caller
// whose context ends earlier hands its call to a flusher, as does every
// caller on another kind of client (a ClusterClient, a Ring) that does not
// enforce deadlines. A hook added to the client after the limiter was made
// sits inside sluice's and is passed over by such a call.

// boundedClient is the copy of a default *redis.Client that sends a lone
// caller's call within timeout.
type boundedClient struct {
	timeout time.Duration
	client  *redis.Client
}

// boundedCmd is a script call that the innermost hook sends on via.
type boundedCmd struct {
	scriptCmd
	via *redis.Client
}

// inlineBound reports whether a lone caller whose call is due within
// timeout sends it itself, and on which copy of the client when the client
// does not enforce deadlines (nil when it does). sinceNow says the call's
// deadline is timeout from now, not an earlier one of its context's.
func (b *batcher) inlineBound(kind callKind, timeout time.Duration, sinceNow bool) (bool, *redis.Client) {
	if b.inline {
		return true, nil
	}
	c, ok := b.client.(*redis.Client)
	if !ok || !b.boundable || kind != callScript || !sinceNow || timeout <= 0 {
		return false, nil
	}
	if bc := b.bounded.Load(); bc != nil && bc.timeout == timeout {
		return true, bc.client
	}
	t := timeout // or the client's own timeouts, when shorter
	opt := c.Options()
	for _, own := range []time.Duration{opt.ReadTimeout, opt.WriteTimeout} {
		if own > 0 && own < t {
			t = own
		}
	}
	bc := &boundedClient{timeout: timeout, client: c.WithTimeout(t)}
	b.bounded.Store(bc)
	return true, bc.client
}
