package core

import (
	"context"
	"errors"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// The batcher coalesces concurrent decisions of one Limiter into pipelines.
//
// A caller queues its call and waits for its own result, or for its own
// deadline, whichever comes first. While no pipeline is in flight, a flusher
// goroutine sends what is queued at once; while one is in flight, the calls
// arriving meanwhile gather and go together in the next (see mayGo). No
// timer holds a call back: a lone caller is sent immediately, and a crowd
// is batched by the round trip it waits for (and, while the process is
// CPU-bound, by the turn of its run queues: see cpuBound).
//
// Because the caller waits on a channel rather than on the connection, its
// deadline holds whatever the client's own timeouts are (go-redis ignores
// context deadlines on reads unless ContextTimeoutEnabled is set): one
// watchdog timer per batcher ends the wait of every call whose deadline has
// passed (watchdog.go), and a caller whose context can end watches it too.
// A call abandoned before its pipeline is built is never sent. A caller
// that finds nothing in flight sends its call itself (inline.go), unless
// it could be canceled and its deadline is further than inlineLag away,
// or the client cannot end the call at its deadline (see inlineBound).
//
// Invariants. b.mu guards the fields of batcher from pending to watchAt,
// and the batch and sentAt of every execScratch (failed has its own lock).
//
//   - active counts the flushers that hold a place: running, sending, or
//     stalled in a send; plus a caller sending inline. A place is counted,
//     under b.mu, before its goroutine runs; it is given back, under b.mu,
//     by its holder only: a flusher when it parks or ends, an inline caller
//     when it is done (or handed to a flusher, see handOver).
//   - parked counts the flushers blocked on wake, holding no place. Only
//     handOver takes one (a place counted for it; wake <- wakeup{send:
//     true}), or newShare for a share of a batch (wake <- wakeup{share:
//     its scratch}), and only releaseParked lets them all go (wake <-
//     wakeup{}), once active is 0 or the batcher is closed.
//   - inflight counts the calls in batches taken by flushers, until their
//     flusher next takes b.mu: what mayGo weighs pending against.
//   - flushers bounds active, not counting stalled sends (a batch out for
//     stallAfter); stalls bounds the stalled sends beyond it, one per pooled
//     connection (of each cluster master): active <= flushers+stalls×masters
//     when a flusher starts (see room). A flusher that shares a batch out
//     to other masters starts one for each share (see shareOut), beyond
//     that bound: at most one per master per batch taken.
//   - A flusher is started only when its place has just been counted and no
//     flusher was parked to take it (handOver): by do, when canStart; by the
//     watchdog (expire), for calls queued behind a stalled batch; and by an
//     inline caller that finds calls queued when it is done.
//   - A flusher ends only itself, in flush: when it has nothing it may send
//     and either no other place is held or the batcher is closed (close),
//     or when woken with neither a share nor send. So none outlives the
//     traffic, nor Close.
//   - A call is claimed once (call.claim): by its flusher with an answer,
//     by the watchdog or stillWaits at its deadline, or by its caller giving
//     up. Only the claimer signals done, once; the others leave it alone.
//     A call sent inline is neither queued nor claimed: its caller sends it
//     and reads the answer itself.
//   - pending is empty whenever active is 0: a call is queued only with a
//     place held or counted for a flusher to send it (do's check for an
//     inline send reads active alone).
//   - A script call answered by a flusher leaves its scratch's batch,
//     under b.mu, before done is signalled (answer): its caller may then
//     put it back in the pool, where the watchdog must not find it. A DEL
//     or a probe's SET is signalled while its batch still holds it: their
//     callers never put them back in the pool.
//   - A batch's script call holds pointers to its calls' keys (codec.go),
//     which a pooled call reuses: a go-redis hook that keeps a pipeline's
//     commands past their send sees later requests' keys there (and a lone
//     call's, its arguments cleared).

// batcher is one Limiter's queue of calls and the flushers that send it.
type batcher struct {
	client    redis.UniversalClient
	flushers  int // flushers running at once, not counting stalled sends (see newBatcher)
	stalls    int // stalled sends that may be out at once beyond flushers (see room)
	maxBatch  int
	execLimit time.Duration // bound of one pipeline's context
	inline    bool          // the client enforces context deadlines
	// bounded: on a *redis.Client that does not (a default one), the copy
	// that does, which a lone caller's script call goes on (inlineBound)
	bounded  *redis.Client
	grouping grouping             // which decisions may share a script call
	cluster  *redis.ClusterClient // the client, when grouping is groupNode
	// slotsOnly: the cluster's servers refused the script's node form (Redis
	// before 7 knows no script flags); decisions then group by slot.
	slotsOnly atomic.Bool
	masters   atomic.Int32 // the cluster masters the last batch went to (see mayGo)
	// mostMasters: the most cluster masters one batch went to (see room)
	mostMasters atomic.Int32
	rules       int           // keys per decision
	script      *luaScript    // the script the limiter's decisions run (see scriptFor)
	ruleArgs    []interface{} // the script arguments every decision shares

	mu        sync.Mutex
	pending   []*call
	spare     []*call        // an emptied batch, reused as the next pending slice: none allocated per batch
	active    int            // flushers running (stalled ones too), and a caller sending inline
	parked    int            // flushers waiting on wake for another batch (see flush)
	wake      chan wakeup    // to a parked flusher: what to do
	closed    bool           // Close was called: flushers end rather than park
	inflight  int            // calls in batches being sent, until their flusher next takes mu
	scratch   []*execScratch // idle flushers' scratch, reused by the next
	scratches []*execScratch // every scratch made, idle or sending

	watch    *time.Timer // the watchdog (expire), armed while watching
	watching bool
	watchAt  time.Time // when it fires, while watching

	failed sendFailure // why sends fail, for the calls that time out
	load   *schedGauge // whether the process is CPU-bound: &cpuBound
}

// grouping says which decisions of a batch may share one script call: a
// script may only touch keys of one server.
type grouping uint8

const (
	groupAll  grouping = iota // one server (a Client, also with Sentinel): all together
	groupNode                 // a ClusterClient: by master (by slot on Redis before 7)
	groupNone                 // a Ring or another client: each alone
)

func newBatcher(client redis.UniversalClient, script *luaScript, rules int, ruleArgs []interface{}) *batcher {
	// Three flushers: a batch that mayGo lets go may leave while a flusher
	// whose batch has returned still hands out its answers.
	b := &batcher{client: client, flushers: 3, maxBatch: 512, execLimit: 30 * time.Second,
		inline: enforcesDeadlines(client), script: script, rules: rules, ruleArgs: ruleArgs, grouping: groupNone,
		stalls: poolSize(client), load: &cpuBound}
	b.wake = make(chan wakeup, b.flushers+b.stalls)
	b.failed.dials = watchDials(client)
	switch c := client.(type) {
	case *redis.Client:
		b.grouping = groupAll
		if !b.inline {
			b.bounded = boundedCopy(c) // sent on by watchDials's hook
		}
	case *redis.ClusterClient:
		b.grouping, b.cluster = groupNode, c
	}
	return b
}

// reloadSlots asks a cluster client to reload its slot map, in the
// background (go-redis runs one reload at a time, at most one every
// 200ms): called when a decision or the health probe fails for want of
// Redis. A master that is down refuses connections rather than answering
// MOVED, and go-redis otherwise reloads the map only once a minute
// (ClusterStateReloadInterval): decisions bound for its slots would go on
// failing long after its replica has taken over.
func (b *batcher) reloadSlots() {
	if b.cluster != nil {
		b.cluster.ReloadState(context.Background())
	}
}

// poolSize returns how many connections client keeps per server: as many
// sends as may be stalled at once, each on a connection of its own (see
// room).
func poolSize(client redis.UniversalClient) int {
	n := 0
	switch c := client.(type) {
	case *redis.Client:
		n = c.Options().PoolSize
	case *redis.ClusterClient:
		n = c.Options().PoolSize
	case *redis.Ring:
		n = c.Options().PoolSize
	}
	if n <= 0 {
		n = 10 * runtime.GOMAXPROCS(0) // go-redis's default
	}
	return n
}

// do queues c, or sends it itself (sendInline), and waits until it is
// answered, ctx is done, or timeout has passed (timeout <= 0: no bound but
// ctx's); sending it itself, it learns that ctx was canceled only with the
// answer or at the deadline (see inlineLag). It reports whether c was
// answered; when it was not, the caller must not reuse c.
func (b *batcher) do(ctx context.Context, timeout time.Duration, c *call) (answered bool, err error) {
	if err := ctx.Err(); err != nil {
		// Ended before it was queued: never sent. (Queued, it could be
		// answered before the wait below looks at ctx, and the select
		// there picks either when both are ready.)
		return false, err
	}
	now := time.Now()
	c.deadline = time.Time{}
	if timeout > 0 {
		c.deadline = now.Add(timeout)
	}
	if d, ok := ctx.Deadline(); ok && (c.deadline.IsZero() || d.Before(c.deadline)) {
		c.deadline = d
	}
	b.mu.Lock()
	// Inline only for a caller whose cancellation would come at most
	// inlineLag late: go-redis bounds the command by the deadline, but does
	// not watch cancellation while it reads.
	if b.active == 0 && !c.deadline.IsZero() && (ctx.Done() == nil || c.deadline.Sub(now) <= inlineLag) {
		if ok, bounded := b.inlineBound(c.kind); ok {
			// Callers arriving meanwhile do not send inline: they go through a
			// flusher, at once (an inline call is not in flight for mayGo),
			// and those after them gather behind that flusher's batch.
			b.active++
			b.mu.Unlock()
			return true, b.sendInline(ctx, c, bounded)
		}
	}
	b.pending = append(b.pending, c)
	start := b.canStart(now)
	if start {
		b.active++
		start = b.handOver()
	} else {
		b.holdBack(now)
	}
	// Deadlines mostly come in arrival order, but not always (the health
	// probe's is its context's): the watchdog fires at the earliest.
	if !c.deadline.IsZero() && (!b.watching || c.deadline.Before(b.watchAt)) {
		b.arm(c.deadline)
	}
	b.mu.Unlock()
	if start {
		go b.flush(nil, 0)
	}
	if done := ctx.Done(); done != nil {
		select {
		case <-c.done:
		case <-done:
			if c.claim(callAbandoned) {
				b.mu.Lock()
				b.endIdleSends()
				b.mu.Unlock()
				return false, ctx.Err()
			}
			<-c.done // answered or expired meanwhile: that is the outcome
		}
	} else {
		<-c.done
	}
	if c.state.Load() == callExpired {
		// At the caller's own deadline, say so as its context does (decide
		// must not count a caller's impatience against Redis): the
		// watchdog may have fired a moment before the context's timer.
		if ownDeadline(ctx, c) {
			return false, ctxErr(ctx)
		}
		return false, b.timeout(c)
	}
	if timedOutAtOwnDeadline(ctx, c, c.err) {
		return true, ctxErr(ctx)
	}
	if !c.deadline.IsZero() && timedOut(c, c.err) {
		// The send timed out at c's deadline, the limiter's timeout (its
		// context ended, or a read bounded by it failed), and answered
		// first, as the watchdog would have.
		return true, b.timeout(c)
	}
	return true, c.err
}

// timeout is the error of c, not answered within the limiter's timeout.
// On a cluster, when its master answered it (see slotCmd), with a refusal
// of its slot (MOVED or ASK while go-redis followed them, TRYAGAIN before
// a resend's pause) or with a reply read too late (its pipeline held by
// another call's redirects), it says so and counts against no master's
// health (see availability): one that a redirect led to and that does not
// answer is seen by the decisions sent to it directly.
func (b *batcher) timeout(c *call) error {
	if e := c.refused.Load(); e != nil {
		return e
	}
	return b.failed.timeout()
}

// ownDeadline reports whether c's deadline is ctx's own (the timeout did
// not come first), so that ctx will say when it passes.
func ownDeadline(ctx context.Context, c *call) bool {
	d, ok := ctx.Deadline()
	return ok && !d.After(c.deadline) && ctx.Done() != nil
}

// timedOutAtOwnDeadline reports whether err, the failure of c's send, is a
// timeout at ctx's own deadline, which has passed. go-redis's read
// deadline and the send's context end at that instant, and the failed
// read may wake before ctx's own timer: its caller then waits for ctx to
// say so (decide must not count a caller's impatience against Redis, and
// its error must be its context's).
func timedOutAtOwnDeadline(ctx context.Context, c *call, err error) bool {
	return ownDeadline(ctx, c) && timedOut(c, err)
}

// timedOut reports whether err, the failure of c's send, is a timeout at
// c's deadline, which has passed.
func timedOut(c *call, err error) bool {
	if err == nil || time.Now().Before(c.deadline) {
		return false
	}
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout()
}

// canStart reports whether a flusher may start on what is pending now, with
// b.mu held. With nothing in flight, always: a lone caller is sent at once.
// With a batch in flight, only if there is room (see room) and once mayGo.
func (b *batcher) canStart(now time.Time) bool {
	return b.room(now) && (b.active == 0 || b.mayGo(now))
}

// room reports whether another flusher may start, with b.mu held: fewer
// than flushers are running, not counting those whose batch has stalled
// (been out for stallAfter), and at most stalls of those.
//
// A stalled send holds no place: a connection that silently stopped
// forwarding (a NAT or load balancer that dropped its state) holds its
// flusher in a read until the client's ReadTimeout, since go-redis ignores
// context deadlines on reads unless ContextTimeoutEnabled is set. Were it
// to keep its place, a few hung pooled connections would stop every
// decision, and the health probe's write, while Redis answers on every
// other connection. Each stalled send holds a connection of its own, so
// no more of them may be out than the pool has connections: the flushers
// running are at most flushers + stalls. On a cluster each master has a
// pool of its own, and a master that hangs holds only its own: stalls per
// master (the most a batch has been bound for), so that its stalled sends
// never take the places of the live masters' batches.
func (b *batcher) room(now time.Time) bool {
	if b.active < b.flushers {
		return true
	}
	if b.active >= b.flushers+b.stalls*max(1, int(b.mostMasters.Load())) {
		return false
	}
	stalled := 0
	for _, x := range b.scratches {
		if x.stalled(now) {
			stalled++
		}
	}
	return b.active-stalled < b.flushers
}

// mayGo reports whether what is pending may go while other batches are in
// flight, with b.mu held: once as many calls are pending as are in flight
// in batches that have not stalled (been out for stallAfter), or twice as
// many (see below). Redis runs one script call after the other, so a
// second pipeline sent early would only queue behind the first; a few
// calls sent alone would each pay a whole script call and round trip, and
// hold a flusher that a larger batch could use. (A call sent inline is
// not in flight here: it is one caller's, which no batch waits for.) What
// does not go now goes when a batch in flight returns (its flusher giving
// up its turn first while the process is CPU-bound in quick turns, see
// flush), or when the watchdog finds it stalled (see holdBack): a pipeline
// hung on a dead connection must not hold back every call behind it while
// another connection could answer.
func (b *batcher) mayGo(now time.Time) bool {
	// On a cluster of several masters a batch becomes one script call per
	// master, each with its master's share only: there a batch waits until
	// twice what is in flight is pending, so that each call still decides
	// many requests. So does a batch while fewer than smallBatch calls are
	// in flight and the process is CPU-bound (see cpuBound): a script call
	// saved is CPU its requests are waiting for. (Otherwise, waiting
	// longer only leaves Redis idle.)
	spread := 1
	if b.grouping == groupNode && b.masters.Load() > 1 || b.inflight < smallBatch && b.load.busy.Load() {
		spread = 2
	}
	if b.inflight == 0 || len(b.pending) >= b.inflight*spread {
		return true
	}
	live := b.inflight
	for _, x := range b.scratches {
		if x.stalled(now) {
			live -= len(x.batch)
		}
	}
	return len(b.pending) >= live*spread
}

// smallBatch: a CPU-bound process (see cpuBound) holds a second batch
// while fewer calls than this are in flight (mayGo), and a flusher gives
// up its turn after a batch of fewer (flush). Beyond it a script call's
// fixed cost (on the client and in Redis) is already spread over many
// decisions, and holding calls back only leaves Redis idle: measured
// with 256 callers deciding as fast as Redis answers, a third fewer
// decisions.
const smallBatch = 16

// stallAfter is how long a batch may be out before the calls behind it
// stop waiting for it to return, and before it stops holding a flusher's
// place (see room): well beyond a round trip of a large batch.
const stallAfter = 5 * time.Millisecond

// stalled reports whether x is sending a batch that has been out for
// stallAfter, with b.mu held.
func (x *execScratch) stalled(now time.Time) bool {
	return x.batch != nil && now.Sub(x.sentAt) >= stallAfter
}
