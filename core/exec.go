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
	byNode []nodeGroup
	others []redis.Cmder
	skip   []int64 // the answers of calls nobody waits for, read and dropped

	// pipe carries the batch's script calls, made once and reused: Exec
	// empties it, and a flusher holds its scratch alone. (A new pipeline
	// at each batch cost four allocations, at one caller a decision's.)
	pipe redis.Pipeliner

	moved    []*call // requests a master answered as not its own (see answer)
	movedErr error   // what it said

	share    bool    // its batch is one master's share of another's (see shareOut)
	own      []*call // the array of its batch when it is a share
	shareBuf []*call // a share being gathered (see shareOut)
}

// group returns an empty group of the current batch.
func (x *execScratch) group() *scriptGroup {
	if x.used == len(x.groups) {
		x.groups = append(x.groups, &scriptGroup{})
	}
	g := x.groups[x.used]
	x.used++
	// Every field but the arrays' room starts afresh: a group made during
	// answer (sendAlone) must not carry now, again or alone from a batch
	// before.
	*g = scriptGroup{calls: g.calls[:0], args: g.args[:0]}
	return g
}

// nodeGroup is the group of a batch bound for one cluster master.
type nodeGroup struct {
	node *redis.Client
	g    *scriptGroup
}

// groupOf returns the group of the current batch that c joins.
func (x *execScratch) groupOf(ctx context.Context, b *batcher, c *call) *scriptGroup {
	switch {
	case b.grouping == groupAll:
		if x.used > 0 {
			return x.groups[0]
		}
	case b.grouping == groupNode && !b.slotsOnly.Load():
		// By the master that the client's slot map names: the call goes
		// to that master, and a request whose slot has moved meanwhile is
		// answered by the script as such and sent again on its own.
		node := c.node.Load() // named by shareOut, most often
		if node == nil {
			if n, err := b.cluster.MasterForKey(ctx, slotKeys()[c.slot]); err == nil {
				node = n
				c.node.Store(n)
			}
		}
		if node != nil {
			for _, n := range x.byNode {
				if n.node == node {
					return n.g
				}
			}
			g := x.group()
			g.byNode = true
			x.byNode = append(x.byNode, nodeGroup{node, g})
			return g
		}
		fallthrough
	case b.grouping == groupNode:
		if x.bySlot == nil {
			x.bySlot = make(map[int]*scriptGroup)
		}
		g := x.bySlot[c.slot]
		if g == nil {
			g = x.group()
			x.bySlot[c.slot] = g
		}
		return g
	}
	return x.group()
}

// otherCmd sends c, a Reset's DEL or the health probe's SET, on via (a
// client, or a pipeline that queues it), and returns its command.
func otherCmd(ctx context.Context, via redis.Cmdable, c *call) redis.Cmder {
	if c.kind == callDel {
		return via.Del(ctx, keyStrings(c.keys)...)
	}
	return via.Set(ctx, keyStrings(c.keys)[0], "1", time.Second) // callProbe
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
	clear(x.byNode)
	x.byNode = x.byNode[:0]
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
func (b *batcher) exec(x *execScratch, batch []*call) (handed int) {
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

	if b.grouping == groupNode {
		if handed = b.shareOut(ctx, x); handed > 0 {
			batch = x.batch
		}
	}
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
		others[i] = otherCmd(ctx, other, c)
	}
	if other != nil {
		defer clear(others)
		execPipe(ctx, other)
		// Answered at once, not after the scripts: a slow script pipeline
		// must not hold a Reset that has been done (their callers never
		// put these calls back in the pool, so they may be signalled
		// while the batch still holds them).
		for i, c := range batch {
			if others[i] == nil {
				continue
			}
			err := others[i].Err()
			b.failed.sent(err)
			if c.claim(callAnswered) {
				c.err = err
				c.done <- struct{}{}
			}
		}
	}
	// The scripts go after: a decision whose caller stopped waiting during
	// that round trip (and was told it failed) is not sent.
	if x.pipe == nil {
		x.pipe = b.client.Pipeline()
	}
	pipe := x.pipe
	if other != nil {
		now = time.Now()
	}
	for _, c := range batch {
		if c.kind != callScript || !c.stillWaits(now) {
			continue // expired or given up: never sent
		}
		g := x.groupOf(ctx, b, c)
		g.calls = append(g.calls, c)
	}
	groups := x.groups[:x.used]
	for _, g := range groups {
		g.alone = len(groups) == 1
		g.build(ctx, b.script, b.ruleArgs)
		b.process(ctx, pipe, g)
	}
	execPipe(ctx, pipe) // errors are read per command below; an empty pipeline sends nothing
	// The groups already settled are answered before any resend: one
	// group's refusal (its pauses, its round trips) must not hold answers
	// that are in hand, on a healthy node, past their callers' deadlines.
	b.answer(ctx, x, true)
	b.resend(ctx, x)
	b.answer(ctx, x, false)
	return handed
}

// answer claims the calls of the batch's groups and writes their answers,
// then signals them: with settled, only groups that resend would not send
// again (see sendsAgain); otherwise every group left. A call the watchdog
// or its caller claimed first is nobody's to answer any more (its reply is
// skipped). A request that a cluster master answered as not its own (its
// slot has moved) is not answered: it goes to a group of its own, which
// resend sends.
func (b *batcher) answer(ctx context.Context, x *execScratch, settled bool) {
	n := 0
	for _, g := range x.groups[:x.used] {
		g.now = false
		if g.answered || settled && g.sendsAgain() {
			continue
		}
		g.answered, g.now = true, true
		n++
		reply, err := g.cmd.Result()
		b.failed.sent(err)
		for _, c := range g.calls {
			if g.cross && err == nil && len(reply) > 0 && reply[0] < 0 {
				if _, rest, e := parseReply(reply, b.rules, nil); isNotHere(e) && c.state.Load() == callWaiting {
					reply = rest
					x.moved = append(x.moved, c)
					x.movedErr = e
					continue
				}
			}
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
	if len(x.moved) > 0 {
		x.sendAlone(ctx, x.moved, x.movedErr, false)
		clear(x.moved)
		x.moved, x.movedErr = x.moved[:0], nil
	}
	left := false // a group still to answer after resend
	for _, g := range x.groups[:x.used] {
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
	for _, g := range x.groups[:x.used] {
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
	byNode bool // its calls are bound for one cluster master, of any slots
	cross  bool // its last send was the script's node form: its calls lie in several slots
	fresh  bool // made of calls of another group, for resend to send

	answered bool // its calls have been answered (answer)
	now      bool // in the current answer pass
}

// build makes the group's script call of its calls: EVALSHA, or EVAL with
// the source once Redis has answered NOSCRIPT. A group bound for a cluster
// master whose calls lie in several slots sends the script's node form.
func (g *scriptGroup) build(ctx context.Context, s *luaScript, ruleArgs []interface{}) {
	g.cross = false
	if g.byNode {
		for _, c := range g.calls[1:] {
			if c.slot != g.calls[0].slot {
				g.cross = true
				break
			}
		}
	}
	clear(g.args)
	g.args = appendScriptCall(g.args[:0], s, g.source, g.cross, g.calls, ruleArgs)
	g.cmd = redis.NewIntSliceCmd(ctx, g.args...)
	if g.cross {
		// Routed by its first key, which it does not declare (see
		// appendScriptCall): go-redis sends it to that key's master.
		g.cmd.SetFirstKeyPos(crossKeyPos)
	}
	g.fresh = false
}

// process adds g's script call to pipe: on a cluster, as a slotCmd. A
// call sent again (answered "not here" inside a call of several slots, or
// after NOSCRIPT) no longer counts as answered: only what this send is
// told will say so (see slotCmd).
func (b *batcher) process(ctx context.Context, pipe redis.Pipeliner, g *scriptGroup) {
	if b.cluster != nil {
		for _, c := range g.calls {
			if c.refused.Load() == errAnsweredLate {
				c.refused.Store(nil)
			}
		}
		_ = pipe.Process(ctx, &slotCmd{scriptCmd{g.cmd}, g.calls})
	} else {
		_ = pipe.Process(ctx, scriptCmd{g.cmd})
	}
}
