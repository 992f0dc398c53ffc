package core

import (
	"time"

	"github.com/redis/go-redis/v9"
)

// sendInline sends c alone from the caller's goroutine, as a plain command
// (no pipeline): go-redis ends it at c's deadline. Then it hands what queued
// meanwhile to a flusher.
func (b *batcher) sendInline(c *call) (bool, error) {
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
			_ = b.client.Process(ctx, scriptCmd{cmd})
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
