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

// sendsAgain reports whether resend would send g, or its calls, again.
func (g *scriptGroup) sendsAgain() bool { return g.next() != settled }

// resendStep is what resend does next with a group not yet answered.
type resendStep uint8

const (
	settled    resendStep = iota // answered with what its send got
	splitAlone                   // its calls go again, each in a group of its own (sendAlone)
	sendFresh                    // sent at once: made by sendAlone, never sent
	sendSource                   // sent again at once, with the script's source: Redis lost it
	sendLater                    // sent again after a pause: Redis could not take it, nothing ran
)

// next returns what resend does next with g, by how its last send failed.
// (The one place that says which failures are sent again, and how: answer
// leaves unanswered exactly the groups resend sends.)
//
// A replica (a master replaced, the slot map stale) refuses a cross-slot
// call whole, as it declares no keys; alone, with keys declared, each call
// is redirected to its master (MOVED), and go-redis learns the new map. A
// Redis without script flags refuses the node form too, having run
// nothing: its calls go alone, with the plain script's source, which may
// be new to it. A call of several requests refused for some of them (see
// splitsAlone) goes alone too.
func (g *scriptGroup) next() resendStep {
	if g.fresh {
		return sendFresh
	}
	switch err := g.cmd.Err(); {
	case g.cross && (redis.IsReadOnlyError(err) || noScriptFlags(err)), splitsAlone(g, err):
		return splitAlone
	case isNoScript(err):
		return sendSource
	case resendable(err, g.alone):
		return sendLater
	}
	return settled
}

// splitsAlone reports whether g's calls go again one by one after err, a
// refusal of the call as a whole that is about some of its requests only
// and ran nothing: TRYAGAIN (see isTryAgain), and the refusal of a key of
// a call that declares its keys (see isKeyNoPerm: an ACL user may touch
// some of them only; the node form declares none, and a key the user may
// not touch fails its own request inside).
func splitsAlone(g *scriptGroup, err error) bool {
	return len(g.calls) > 1 && (isTryAgain(err) || !g.cross && isKeyNoPerm(err))
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

// sendAlone moves calls into groups of their own, for resend to send with
// their keys declared (with the script's source when source): go-redis then
// routes each to the master of its slot and follows MOVED and ASK. Each new
// group holds err until it is sent.
func (x *execScratch) sendAlone(ctx context.Context, calls []*call, err error, source bool) {
	for _, c := range calls {
		g := x.group()
		g.calls, g.source = append(g.calls, c), source
		g.cmd = redis.NewIntSliceCmd(ctx)
		g.cmd.SetErr(err)
		g.fresh = true
	}
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
// saw it), and after a pause otherwise; and the groups made of requests a
// cluster master answered as not its own, at once. Each call is sent at
// most maxSends times, and only the decisions whose callers still wait go
// again: one whose caller was told it failed is not sent after that (but
// one whose deadline passes between that check and the write still goes,
// as with any client). What a round settles is answered at once, not held
// through the pauses and rounds that other groups still need.
//
// A cluster whose masters refuse the node form (Redis before 7 knows no
// script flags, and its refusal ran nothing) has its limiter group by slot
// from then on, and the calls of such a group go again one by one; so do
// those of a group refused by a replica (READONLY: the master it went to
// was replaced), at once.
func (b *batcher) resend(ctx context.Context, x *execScratch) {
	for sends := 1; sends < maxSends; sends++ {
		for _, g := range x.groups[:x.used] {
			if g.answered || g.next() != splitAlone {
				continue
			}
			err := g.cmd.Err()
			flags := g.cross && noScriptFlags(err)
			if flags {
				b.slotsOnly.Store(true)
			}
			x.sendAlone(ctx, g.calls, err, flags)
			clear(g.calls)
			g.calls, g.answered = g.calls[:0], true // emptied: nothing to answer
		}
		again, wait := 0, false
		for _, g := range x.groups[:x.used] {
			g.again = false
			if g.answered {
				continue
			}
			step := g.next()
			switch step {
			case settled:
				continue
			case sendSource:
				g.source = true
			}
			// Only the decisions whose callers still wait go again; a
			// group nobody waits for keeps its error, unsent.
			if g.keepWaiting() {
				g.again = true
				again++
				wait = wait || step == sendLater
			} else {
				g.fresh = false
			}
		}
		if again == 0 || wait && !pause(ctx, sends) {
			return
		}
		var sent []*scriptGroup
		for _, g := range x.groups[:x.used] {
			if g.again && g.keepWaiting() {
				sent = append(sent, g)
			} else if g.fresh {
				g.fresh = false // nobody waits: answered with its error
			}
		}
		pipe := b.client.Pipeline()
		for _, g := range sent {
			g.alone = len(sent) == 1
			g.build(ctx, b.script, b.ruleArgs)
			b.process(ctx, pipe, g)
		}
		execPipe(ctx, pipe)
		b.answer(ctx, x, true)
	}
}
