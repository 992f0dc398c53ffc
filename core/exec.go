package core

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// execScratch is what a flusher needs to send batches, kept from one
// flusher to the next so that sending a batch allocates nothing of ours.
type execScratch struct {
	batch  []*call   // the batch being sent, for the watchdog; nil when idle
	sentAt time.Time // when batch was taken
	ctx    execContext
	groups []*scriptGroup // groups[:used] are in use for the current batch
	used   int
	bySlot map[int]*scriptGroup
	others []redis.Cmder
	skip   []int64 // the answers of calls nobody waits for, read and dropped
}

// group returns an empty group of the current batch.
func (x *execScratch) group() *scriptGroup {
	if x.used == len(x.groups) {
		x.groups = append(x.groups, &scriptGroup{})
	}
	g := x.groups[x.used]
	x.used++
	g.calls, g.args, g.cmd, g.source, g.answered = g.calls[:0], g.args[:0], nil, false, false
	return g
}

// reset lets go of everything the last batch held.
func (x *execScratch) reset() {
	for _, g := range x.groups[:x.used] {
		clear(g.calls)
		clear(g.args)
		g.cmd = nil
	}
	x.used = 0
	clear(x.bySlot)
}

// exec sends one batch and answers every call in it. The decisions of a
// batch travel in as few script calls as the client allows (see grouping):
// one script call decides many requests, each all or nothing and in order,
// so Redis pays the cost of starting a script once per group rather than
// once per request. DELs and the probe's SET go in a pipeline of their
// own, sent first: go-redis retries none of a pipeline that holds a script (see
// scriptCmd), and those are safe to retry. The scripts are grouped
// after it, of the calls still waiting then. Errors are per call: one
// call's error never fails another.
//
// The pipeline's context ends when the last of its callers stops waiting
// (its deadline passes, or endIdleSends finds none waiting): go-redis then
// stops dialling or waiting for a connection, so a decision
// nobody waits for any more is not sent late (say, to a Redis that has just
// restarted) to consume quota for a request long gone.
func (b *batcher) exec(x *execScratch, batch []*call) {
	defer x.reset()
	ctx := &x.ctx
	deadline := time.Now().Add(b.execLimit)
	latest := time.Time{}
	for _, c := range batch {
		if c.deadline.IsZero() {
			latest = deadline
			break
		}
		if c.deadline.After(latest) {
			latest = c.deadline
		}
	}
	if latest.After(deadline) {
		latest = deadline
	}
	ctx.arm(latest)
	defer ctx.disarm()

	if cap(x.others) < len(batch) {
		x.others = make([]redis.Cmder, len(batch))
	}
	others := x.others[:len(batch)] // DEL and the probe's SET, by position
	var other redis.Pipeliner
	now := time.Now()
	for i, c := range batch {
		if c.kind == callScript || !c.stillWaits(now) {
			continue
		}
		if other == nil {
			other = b.client.Pipeline()
		}
		if c.kind == callDel {
			others[i] = other.Del(ctx, keyStrings(c.keys)...)
		} else {
			others[i] = other.Set(ctx, keyStrings(c.keys)[0], "1", time.Second) // callProbe
		}
	}
	if other != nil {
		defer clear(others)
		_, _ = other.Exec(ctx)
		// Answered at once, not after the scripts: a slow script pipeline
		// must not hold a Reset that has been done (their callers never
		// put these calls back in the pool, so they may be signalled
		// while the batch still holds them).
		for i, c := range batch {
			if others[i] != nil && c.claim(callAnswered) {
				c.err = others[i].Err()
				c.done <- struct{}{}
			}
		}
	}
	// The scripts go after: a decision whose caller stopped waiting during
	// that round trip (and was told it failed) is not sent.
	pipe := b.client.Pipeline()
	if other != nil {
		now = time.Now()
	}
	for _, c := range batch {
		if c.kind != callScript || !c.stillWaits(now) {
			continue // expired or given up: never sent
		}
		var g *scriptGroup
		switch {
		case b.grouping == groupAll && x.used > 0:
			g = x.groups[0]
		case b.grouping == groupSlot:
			if x.bySlot == nil {
				x.bySlot = make(map[int]*scriptGroup)
			}
			if g = x.bySlot[c.slot]; g == nil {
				g = x.group()
				x.bySlot[c.slot] = g
			}
		}
		if g == nil {
			g = x.group()
		}
		g.calls = append(g.calls, c)
	}
	groups := x.groups[:x.used]
	for _, g := range groups {
		g.alone = len(groups) == 1
		g.build(ctx, b.ruleArgs)
		_ = pipe.Process(ctx, scriptCmd{g.cmd})
	}
	_, _ = pipe.Exec(ctx) // errors are read per command below; an empty pipeline sends nothing
	// The groups already settled are answered before any resend: one
	// group's refusal (its pauses, its round trips) must not hold answers
	// that are in hand, on a healthy node, past their callers' deadlines.
	b.answer(x, groups, true)
	b.resend(ctx, x, groups)
	b.answer(x, groups, false)
}

// answer claims the calls of groups and writes their answers, then
// signals them: with settled, only groups that resend would not send again;
// otherwise every group left. A call the watchdog or its caller claimed
// first is nobody's to answer any more (its reply is skipped).
func (b *batcher) answer(x *execScratch, groups []*scriptGroup, settled bool) {
	n := 0
	for _, g := range groups {
		g.now = false
		if g.answered {
			continue
		}
		if err := g.cmd.Err(); settled && (isNoScript(err) || resendable(err, g.alone)) {
			continue
		}
		g.answered, g.now = true, true
		n++
		reply, err := g.cmd.Result()
		if err != nil {
			b.failed.note(err)
		} else {
			b.failed.clear()
		}
		for _, c := range g.calls {
			mine := c.claim(callAnswered)
			switch {
			case err != nil:
				if mine {
					c.err = err // the whole call failed: a connection, a timeout
				}
			case mine:
				c.res, reply, c.err = parseReply(reply, b.rules, c.res[:0])
			default:
				x.skip, reply, _ = parseReply(reply, b.rules, x.skip[:0])
			}
		}
	}
	left := false // a group still to answer after resend
	for _, g := range groups {
		left = left || !g.answered
	}
	if n == 0 && (settled || x.batch == nil) {
		return
	}
	// The watchdog lets go of answered calls before their callers may
	// reuse them: of the whole batch once every group is answered (most
	// often in the first pass), of each answered script call before.
	b.mu.Lock()
	if left {
		for i, c := range x.batch {
			if c != nil && c.kind == callScript && c.state.Load() == callAnswered {
				x.batch[i] = nil
			}
		}
	} else {
		x.batch = nil
	}
	b.mu.Unlock()
	for _, g := range groups {
		if !g.now {
			continue
		}
		for _, c := range g.calls {
			if c.state.Load() == callAnswered {
				c.done <- struct{}{} // the last touch of c
			}
		}
	}
}

// scriptGroup is the decisions of a batch that go in one script call.
type scriptGroup struct {
	calls  []*call
	args   []interface{} // the whole command: EVALSHA, the hash, the keys, ARGV
	cmd    *redis.IntSliceCmd
	source bool // Redis lost the script: send EVAL with the source
	again  bool // to be sent again (resend)
	alone  bool // it went alone in the pipeline of its last send

	answered bool // its calls have been answered (answer)
	now      bool // in the current answer pass
}

// build makes the group's script call of its calls: EVALSHA, or EVAL with
// the source once Redis has answered NOSCRIPT.
func (g *scriptGroup) build(ctx context.Context, ruleArgs []interface{}) {
	clear(g.args)
	g.args = appendScriptCall(g.args[:0], g.source, g.calls, ruleArgs)
	g.cmd = redis.NewIntSliceCmd(ctx, g.args...)
}

// keepWaiting drops from the group the calls whose wait has ended (their
// deadline passed, or their caller gave up), and reports whether any is
// left.
func (g *scriptGroup) keepWaiting() bool {
	kept := g.calls[:0]
	now := time.Now()
	for _, c := range g.calls {
		if c.stillWaits(now) {
			kept = append(kept, c)
		}
	}
	clear(g.calls[len(kept):])
	g.calls = kept
	return len(kept) > 0
}

// resend sends again the script calls of groups that failed in a way that
// cannot have counted (see resendable): with the script's source when Redis
// had lost it (a restart, SCRIPT FLUSH, a failover to a replica that never
// saw it), and after a pause otherwise. Each call is sent at most maxSends
// times, and only the decisions whose callers still wait go again: one
// whose caller was told it failed is not sent after that (but one whose
// deadline passes between that check and the write still goes, as with any
// client). What a round settles is answered at once, not held through
// the pauses and rounds that other groups still need.
func (b *batcher) resend(ctx context.Context, x *execScratch, groups []*scriptGroup) {
	for sends := 1; sends < maxSends; sends++ {
		again, wait := 0, false
		for _, g := range groups {
			g.again = false
			refused := false // Redis could not take it: wait a little
			switch err := g.cmd.Err(); {
			case isNoScript(err):
				g.source = true
			case resendable(err, g.alone):
				refused = true
			default:
				continue
			}
			// Only the decisions whose callers still wait go again; a
			// group nobody waits for keeps its error, unsent.
			if g.keepWaiting() {
				g.again = true
				again++
				wait = wait || refused
			}
		}
		if again == 0 || wait && !pause(ctx, sends) {
			return
		}
		var sent []*scriptGroup
		for _, g := range groups {
			if g.again && g.keepWaiting() {
				sent = append(sent, g)
			}
		}
		pipe := b.client.Pipeline()
		for _, g := range sent {
			g.alone = len(sent) == 1
			g.build(ctx, b.ruleArgs)
			_ = pipe.Process(ctx, scriptCmd{g.cmd})
		}
		_, _ = pipe.Exec(ctx)
		b.answer(x, groups, true)
	}
}
