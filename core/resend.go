package core

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file holds what a batch does with its script calls that failed in
// a way that cannot have counted: which go again, and how (next), and
// their sending (resend). exec.go sends the batch and answers it.

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
