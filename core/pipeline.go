package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
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
// is batched naturally by the round trip it waits for.
//
// At most flushers run at once, not counting those whose batch has been
// out for stallAfter (stalled: on a hung connection, most likely), and at
// most stalls of those (the client's pool size): a flusher stuck in a read
// on a dead connection leaves its place to a new one, so hung connections
// short of the whole pool hold back no decision on the others (see room).
// Flushers are started by do and the watchdog (expire), and end themselves
// once nothing is pending or in flight (flush).
//
// Because the caller waits on a channel rather than on the connection, its
// deadline holds whatever the client's own timeouts are (go-redis ignores
// context deadlines on reads unless ContextTimeoutEnabled is set): one
// watchdog timer per batcher ends the wait of every call whose deadline has
// passed (see expire), and a caller whose context can end watches it too. A
// call abandoned before its pipeline is built is never sent.
//
// When the client does enforce context deadlines (ContextTimeoutEnabled),
// a caller that finds nothing in flight sends its call itself, from its own
// goroutine: the deadline holds just the same, and a lone caller is spared
// the handoff to a flusher and back. Callers arriving meanwhile queue for a
// flusher as usual.
type batcher struct {
	client    redis.UniversalClient
	flushers  int // flushers running at once, not counting stalled sends (see newBatcher)
	stalls    int // stalled sends that may be out at once beyond flushers (see room)
	maxBatch  int
	execLimit time.Duration // bound of one pipeline's context
	inline    bool          // the client enforces context deadlines
	grouping  grouping      // which decisions may share a script call
	rules     int           // keys per decision
	ruleArgs  []interface{} // the script arguments every decision shares

	mu        sync.Mutex
	pending   []*call
	spare     []*call        // an emptied batch, reused as the next pending slice
	active    int            // flushers running (stalled ones too), and a caller sending inline
	parked    int            // flushers waiting on wake for another batch (see flush)
	wake      chan bool      // to a parked flusher: true, send; false, exit
	inflight  int            // calls in batches being sent, until their flusher next takes mu
	scratch   []*execScratch // idle flushers' scratch, reused by the next
	scratches []*execScratch // every scratch made, idle or sending

	watch    *time.Timer // the watchdog (expire), armed while watching
	watching bool
	watchAt  time.Time // when it fires, while watching

	failed sendFailure // why sends fail, for the calls that time out
}

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
	clear(x.others)
}

// call is one queued command: the policy script (EVALSHA, EVAL on NOSCRIPT),
// a DEL of keys (Reset) or a PING (the health probe).
//
// A call waits until one of three claims it (claim): its flusher, with an
// answer; the batcher's watchdog, at its deadline; or its caller, giving up
// when its context ends. Whoever claims it signals done, once; the others
// leave it alone. A call sent inline (sendInline) is neither queued nor
// claimed: its caller sends it and reads the answer itself.
//
// Script calls are pooled. A caller whose call was answered puts it back
// once it has read the answer; the flusher touches an answered call no more
// after signalling. A call that expired or was given up is never put back:
// it may still sit in a batch being sent. Nor is a DEL or a PING, answered
// while its batch's scripts are still out.
type call struct {
	kind callKind
	keys []keyArg      // the request's keys, one per rule (their buffers are kept)
	args []interface{} // the request's own script argument: its cost, negated for Peek
	unit bool          // it consumes 1 (Allow): a script call of such requests only needs their keys
	slot int           // the Redis Cluster slot of its keys, when grouped by slot

	scratch []interface{} // the inline path's full argument list

	deadline time.Time     // when the caller stops waiting; zero: never
	done     chan struct{} // buffered: signalled once per use, by whoever claims it
	ctx      execContext   // the inline path's context
	res      []int64
	err      error
	state    atomic.Uint32 // callWaiting until claimed
}

// The states of a call.
const (
	callWaiting   uint32 = iota
	callAnswered         // by its flusher: res and err hold the answer
	callExpired          // by the watchdog: its deadline passed first
	callAbandoned        // by its caller: its context ended first
)

// claim moves c from waiting to s, and reports whether it did: false when
// someone else claimed c first.
func (c *call) claim(s uint32) bool {
	return c.state.CompareAndSwap(callWaiting, s)
}

// stillWaits reports whether c's caller still waits at now. A call past its
// deadline is expired here and then, rather than sent in the moments before
// the watchdog's next round: its caller would be told it failed while
// Redis counted it.
func (c *call) stillWaits(now time.Time) bool {
	if c.state.Load() != callWaiting {
		return false
	}
	if !c.deadline.IsZero() && !now.Before(c.deadline) {
		if c.claim(callExpired) {
			c.done <- struct{}{} // expired calls are never reused: signalled at once
		}
		return false
	}
	return true
}

var callPool = sync.Pool{New: func() any { return &call{done: make(chan struct{}, 1)} }}

// getCall returns an empty call of kind k.
func getCall(k callKind) *call {
	c := callPool.Get().(*call)
	c.kind = k
	c.keys, c.args, c.unit = c.keys[:0], c.args[:0], false
	c.res, c.err = c.res[:0], nil
	c.state.Store(callWaiting)
	return c
}

// putCall returns a call whose done signal its caller has received, and
// whose reply the caller has finished reading.
func putCall(c *call) {
	c.res = c.res[:0]
	clear(c.args) // let go of the boxed arguments
	callPool.Put(c)
}

var timerPool = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

type callKind uint8

const (
	callScript callKind = iota
	callDel
	callPing
	callProbe // the health probe's write: SET <its key> 1 PX 1000
)

// grouping says which decisions of a batch may share one script call: a
// script may only touch keys of one node (of one slot, on a cluster).
type grouping uint8

const (
	groupAll  grouping = iota // one server (a Client, also with Sentinel): all together
	groupSlot                 // a ClusterClient: by hash slot
	groupNone                 // a Ring or another client: each alone
)

func newBatcher(client redis.UniversalClient, rules int, ruleArgs []interface{}) *batcher {
	// Three flushers: a batch that mayGo lets go may leave while a flusher
	// whose batch has returned still hands out its answers (with two, it
	// mostly waited for that flusher); now and then three batches are out
	// at once. GCRA at 64 callers, runs of 2s alternated eight times: 157k
	// decisions/s on average against 145k with two, and with
	// ContextTimeoutEnabled 165k against 140k; 1, 16 and 256 callers
	// within the runs' spread.
	b := &batcher{client: client, flushers: 3, maxBatch: 512, execLimit: 30 * time.Second,
		inline: enforcesDeadlines(client), rules: rules, ruleArgs: ruleArgs, grouping: groupNone,
		stalls: poolSize(client)}
	b.wake = make(chan bool, b.flushers+b.stalls)
	b.failed.dials = watchDials(client)
	switch client.(type) {
	case *redis.Client:
		b.grouping = groupAll
	case *redis.ClusterClient:
		b.grouping = groupSlot
	}
	return b
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

// enforcesDeadlines reports whether go-redis itself ends a command at its
// context's deadline.
func enforcesDeadlines(client redis.UniversalClient) bool {
	switch c := client.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

// do queues c, or sends it itself (sendInline), and waits until it is
// answered, ctx is done, or timeout has passed (timeout <= 0: no bound but
// ctx's). It reports whether c was
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
	// Inline only for a caller that cannot cancel: go-redis bounds the
	// command by the deadline, but does not watch cancellation while it
	// reads; a caller that can cancel waits on its own answer instead.
	if b.inline && b.active == 0 && !c.deadline.IsZero() && ctx.Done() == nil {
		b.active++ // callers arriving meanwhile queue behind this one
		b.mu.Unlock()
		return b.sendInline(c)
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
		go b.flush()
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
		if d, ok := ctx.Deadline(); ok && !d.After(c.deadline) && ctx.Done() != nil {
			<-ctx.Done()
			return false, ctx.Err()
		}
		return false, b.failed.timeout()
	}
	if c.err == context.DeadlineExceeded {
		// The send's own context ended with the caller's deadline and
		// answered first, as the watchdog would have.
		return true, b.failed.timeout()
	}
	return true, c.err
}

// arm starts the watchdog for a deadline, with b.mu held.
func (b *batcher) arm(deadline time.Time) {
	b.watching, b.watchAt = true, deadline
	if b.watch == nil {
		b.watch = time.AfterFunc(time.Until(deadline), b.expire)
	} else {
		b.watch.Reset(time.Until(deadline))
	}
}

// expire is the watchdog: it ends the wait of every call whose deadline has
// passed, queued or in a batch being sent, and arms itself again for the
// earliest deadline still ahead. One timer per batcher thus bounds every
// caller's wait, instead of a timer per call: calls wait in arrival order,
// so the watchdog wakes about once per timeout however many calls pass.
// A caller whose context can end also watches it.
func (b *batcher) expire() {
	now := time.Now()
	var next time.Time
	// waiting reports whether c still waits (stillWaits ends the wait of a
	// call past its deadline), keeping the earliest deadline ahead.
	waiting := func(c *call) bool {
		if !c.stillWaits(now) {
			return false
		}
		if !c.deadline.IsZero() && (next.IsZero() || c.deadline.Before(next)) {
			next = c.deadline
		}
		return true
	}
	b.mu.Lock()
	// Queued calls that no longer wait leave the queue: while Redis hangs,
	// it holds at most a timeout's worth of callers.
	kept := b.pending[:0]
	for _, c := range b.pending {
		if waiting(c) {
			kept = append(kept, c)
		}
	}
	clear(b.pending[len(kept):])
	b.pending = kept
	for _, x := range b.scratches {
		for _, c := range x.batch {
			if c != nil { // nil: answered already (see answer)
				waiting(c)
			}
		}
	}
	b.endIdleSends()
	b.watching = false
	start := len(b.pending) > 0 && b.canStart(now)
	if start {
		b.active++
		start = b.handOver()
	}
	if !next.IsZero() {
		// At most one round a millisecond, however the deadlines fall.
		if soon := now.Add(time.Millisecond); next.Before(soon) {
			next = soon
		}
		b.arm(next)
	}
	if !start && len(b.pending) > 0 {
		b.holdBack(now)
	}
	b.mu.Unlock()
	if start {
		go b.flush() // what waits behind a stalled batch
	}
}

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
		args := appendScriptCall(c.scratch[:0], false, one[:], b.ruleArgs)
		var cmd *redis.IntSliceCmd
		for sends := 1; ; sends++ {
			cmd = redis.NewIntSliceCmd(ctx, args...)
			_ = b.client.Process(ctx, scriptCmd{cmd})
			err := cmd.Err()
			if sends >= maxSends {
				break
			}
			if isNoScript(err) {
				args[0], args[1] = "eval", scriptSrcArg
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
	case callPing:
		c.err = b.client.Ping(ctx).Err()
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

// handOver gives a place in active, just counted, to a parked flusher, with
// b.mu held. It reports false when one took it, and true when none was
// parked: the caller then starts a flusher (go b.flush()) once it has
// released b.mu.
func (b *batcher) handOver() bool {
	if b.parked == 0 {
		return true
	}
	b.parked--
	// Each signal has a flusher waiting for it or about to, which needs
	// no lock to take it: wake's room only spares the wait.
	b.wake <- true
	return false
}

// releaseParked lets the parked flushers go, with b.mu held, once nothing
// is active: a flusher only waits while another batch is in flight, so none
// outlives the batcher's traffic.
func (b *batcher) releaseParked() {
	if b.active > 0 {
		return
	}
	for ; b.parked > 0; b.parked-- {
		b.wake <- false
	}
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
// decision, and the health probe's PING, while Redis answers on every
// other connection. Each stalled send holds a connection of its own, so
// no more of them may be out than the pool has connections: the flushers
// running are at most flushers + stalls.
func (b *batcher) room(now time.Time) bool {
	if b.active < b.flushers {
		return true
	}
	if b.active >= b.flushers+b.stalls {
		return false
	}
	stalled := 0
	for _, x := range b.scratches {
		if x.batch != nil && now.Sub(x.sentAt) >= stallAfter {
			stalled++
		}
	}
	return b.active-stalled < b.flushers
}

// mayGo reports whether what is pending may go while other batches are in
// flight, with b.mu held: once as many calls are pending as are in flight
// in batches that have not stalled (been out for stallAfter). Redis runs
// one script call after the other, so a second pipeline sent early would
// only queue behind the first; a few calls sent alone would each pay a
// whole script call and round trip, and hold a flusher that a larger batch
// could use. (Measured at 64 callers: a fifth of the batches were single
// calls without this, and 15-25% fewer decisions per second.) What does
// not go now goes when a batch in flight returns, or when the watchdog
// finds it stalled (see holdBack): a pipeline hung on a dead connection
// must not hold back every call behind it while another connection could
// answer.
func (b *batcher) mayGo(now time.Time) bool {
	if b.inflight == 0 || len(b.pending) >= b.inflight {
		return true
	}
	live := b.inflight
	for _, x := range b.scratches {
		if x.batch != nil && now.Sub(x.sentAt) >= stallAfter {
			live -= len(x.batch)
		}
	}
	return len(b.pending) >= live
}

// stallAfter is how long a batch may be out before the calls behind it
// stop waiting for it to return, and before it stops holding a flusher's
// place (see room): well beyond a round trip of a large batch (about 1ms
// at 256 callers on the machine of BENCHMARKS.md).
const stallAfter = 5 * time.Millisecond

// endIdleSends ends the context of every batch being sent in which no call
// waits any more, with b.mu held: go-redis then stops waiting for a
// connection or dialling, and a decision whose caller was told it failed
// is not sent late.
func (b *batcher) endIdleSends() {
	for _, x := range b.scratches {
		if x.batch == nil {
			continue
		}
		idle := true
		for _, c := range x.batch {
			if c != nil && c.state.Load() == callWaiting {
				idle = false
				break
			}
		}
		if idle {
			x.ctx.end()
		}
	}
}

// holdBack makes the watchdog look again when the next batch in flight
// will count as stalled, with b.mu held, for a call that pending could not
// send at now.
func (b *batcher) holdBack(now time.Time) {
	var sent time.Time
	for _, x := range b.scratches {
		if x.batch != nil && now.Sub(x.sentAt) < stallAfter && (sent.IsZero() || x.sentAt.Before(sent)) {
			sent = x.sentAt
		}
	}
	if sent.IsZero() {
		return // none left to stall: a flusher returning, or a deadline, comes next
	}
	if at := sent.Add(stallAfter); !b.watching || at.Before(b.watchAt) {
		b.arm(at)
	}
}

// flush sends batches until the queue is empty, or until what is left may
// wait for a batch in flight (see mayGo). While another batch is in
// flight, it then parks until handOver wakes it for the next batch, rather
// than end and let a new goroutine take its place: at 64 callers a batch
// went out about every 140µs, and each new flusher grew its stack again
// through go-redis's calls (6% of the client's CPU). It ends once nothing
// is in flight (releaseParked).
func (b *batcher) flush() {
	var x *execScratch
	var done []*call // the batch just sent, to give back as spare
	sent := 0        // its length
	for {
		b.mu.Lock()
		b.inflight -= sent
		if x == nil {
			if n := len(b.scratch); n > 0 {
				x, b.scratch = b.scratch[n-1], b.scratch[:n-1]
			} else {
				x = &execScratch{}
				b.scratches = append(b.scratches, x)
			}
		}
		if done != nil && b.spare == nil {
			clear(done)
			b.spare = done[:0]
		}
		// Another flusher in flight picks up what is pending when it
		// returns, unless it may go now (see mayGo).
		if len(b.pending) == 0 || b.active > 1 && !b.mayGo(time.Now()) {
			b.active--
			if len(b.pending) > 0 {
				b.holdBack(time.Now()) // in case the batch in flight stalls
			}
			b.scratch = append(b.scratch, x)
			if b.active == 0 {
				b.releaseParked()
				b.mu.Unlock()
				return
			}
			b.parked++
			b.mu.Unlock()
			if !<-b.wake {
				return
			}
			x, done, sent = nil, nil, 0 // woken with a place in active
			continue
		}
		batch := b.pending
		if len(batch) > b.maxBatch {
			batch = batch[:b.maxBatch:b.maxBatch]
			b.pending = b.pending[b.maxBatch:]
			done = nil // a window into pending: not reusable
		} else {
			b.pending, b.spare = b.spare, nil
			done = batch
		}
		sent = len(batch)
		b.inflight += sent
		x.batch, x.sentAt = batch, time.Now()
		b.mu.Unlock()
		b.exec(x, batch)
	}
}

// execContext is the context of one send: a flusher's batch, or an inline
// call. It ends (Done is closed) at the send's deadline, so go-redis gives
// up dialling or waiting for a pooled connection once nobody waits for the
// answer any more; with ContextTimeoutEnabled it also bounds the read.
//
// It is reused from send to send, so a send allocates no context and no
// timer: arm starts a send, disarm ends it. A timer that fires late, after
// its send has ended, ends nothing: fire checks the current deadline.
type execContext struct {
	mu       sync.Mutex
	deadline time.Time
	armed    bool
	expired  bool
	done     chan struct{}
	timer    *time.Timer
}

// arm makes c the context of a send that ends at deadline.
func (c *execContext) arm(deadline time.Time) {
	c.mu.Lock()
	if c.done == nil || c.expired {
		c.done = make(chan struct{}) // the last one was closed
		c.expired = false
	}
	c.deadline, c.armed = deadline, true
	c.mu.Unlock()
	if c.timer == nil {
		c.timer = time.AfterFunc(time.Until(deadline), c.fire)
	} else {
		c.timer.Reset(time.Until(deadline))
	}
}

// disarm ends the send.
func (c *execContext) disarm() {
	c.mu.Lock()
	c.armed = false
	c.mu.Unlock()
	c.timer.Stop()
}

// end ends the send at once: nobody waits for its answer any more.
func (c *execContext) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed && !c.expired {
		c.expired = true
		close(c.done)
	}
}

func (c *execContext) fire() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.armed && !c.expired && !time.Now().Before(c.deadline) {
		c.expired = true
		close(c.done)
	}
}

// Deadline returns the send's deadline.
func (c *execContext) Deadline() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.deadline, true
}

// Done is closed when the send's deadline has passed.
func (c *execContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done
}

// Value holds nothing.
func (c *execContext) Value(any) any { return nil }

// Err is context.DeadlineExceeded once the deadline has passed.
func (c *execContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.expired {
		return context.DeadlineExceeded
	}
	return nil
}

// exec sends one batch and answers every call in it. The decisions of a
// batch travel in as few script calls as the client allows (see grouping):
// one script call decides many requests, each all or nothing and in order,
// so Redis pays the cost of starting a script once per group rather than
// once per request. DELs, PINGs and the probe's SET go in a pipeline of
// their own, sent
// first: go-redis retries none of a pipeline that holds a script (see
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
	others := x.others[:len(batch)] // DEL and PING, by position
	var other redis.Pipeliner
	now := time.Now()
	for i, c := range batch {
		if c.kind == callScript || !c.stillWaits(now) {
			continue
		}
		if other == nil {
			other = b.client.Pipeline()
		}
		switch c.kind {
		case callDel:
			others[i] = other.Del(ctx, keyStrings(c.keys)...)
		case callProbe:
			others[i] = other.Set(ctx, keyStrings(c.keys)[0], "1", time.Second)
		default:
			others[i] = other.Ping(ctx)
		}
	}
	if other != nil {
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
		{
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

// appendScriptCall appends to dst the whole command that decides calls in
// one script call: EVALSHA and the hash (EVAL and the source when source),
// the number of keys, every call's keys (by pointer: see keyArg), the
// arguments every decision shares, then each call's own argument unless
// all consume 1 (see allUnit).
func appendScriptCall(dst []interface{}, source bool, calls []*call, ruleArgs []interface{}) []interface{} {
	if source {
		dst = append(dst, "eval", scriptSrcArg, 0)
	} else {
		dst = append(dst, "evalsha", scriptHashArg, 0)
	}
	for _, c := range calls {
		for i := range c.keys {
			dst = append(dst, &c.keys[i])
		}
	}
	dst[2] = len(dst) - 3 // the number of keys
	dst = append(dst, ruleArgs...)
	if !allUnit(calls) {
		for _, c := range calls {
			dst = append(dst, c.args...)
		}
	}
	return dst
}

// allUnit reports whether every call consumes 1, so that the script call
// needs no argument per request (see lua/policy.lua).
func allUnit(calls []*call) bool {
	for _, c := range calls {
		if !c.unit {
			return false
		}
	}
	return true
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

// parseReply reads the next request's answer from the script's flat reply
// (see lua/policy.lua), two or three integers per rule, or an error message
// in integers. It appends the answer to dst in the form buildResult reads
// (allowed, then per rule allowed, remaining, retry, reset, delay) and
// returns the rest of the reply.
func parseReply(reply []int64, rules int, dst []int64) ([]int64, []int64, error) {
	if len(reply) > 0 && reply[0] < 0 {
		msg, rest, err := scriptErrorIn(reply)
		if err != nil {
			return dst, nil, err
		}
		return dst, rest, msg
	}
	start := len(dst)
	dst = append(dst, 1)
	for i := 0; i < rules; i++ {
		if len(reply) < 2 || reply[0] < 0 || reply[0]&1 == 1 && len(reply) < 3 {
			return dst[:start], nil, fmt.Errorf("sluice: script reply too short or malformed for rule %d of %d (%d values left)", i+1, rules, len(reply))
		}
		h, reset, extra := reply[0], reply[1], int64(0)
		if h&1 == 1 {
			extra, reply = reply[2], reply[3:]
		} else {
			reply = reply[2:]
		}
		if h&2 == 0 { // denied: extra is the retry
			dst[start] = 0
			dst = append(dst, 0, h>>2, extra, reset, 0)
		} else { // admitted: extra is the delay
			dst = append(dst, 1, h>>2, 0, reset, extra)
		}
	}
	return dst, reply, nil
}

// scriptErrorIn decodes the error message that begins reply: -(length+1),
// then the message's bytes six to an integer (see put_error in
// lua/policy.lua). It returns the error and the rest of the reply.
func scriptErrorIn(reply []int64) (scriptError, []int64, error) {
	n := int(-reply[0] - 1)
	words := (n + 5) / 6
	if n < 0 || n > maxScriptError || len(reply) < 1+words {
		return "", nil, fmt.Errorf("sluice: script reply holds a malformed error of %d bytes", n)
	}
	msg := make([]byte, 0, 6*words)
	for _, w := range reply[1 : 1+words] {
		for shift := 40; shift >= 0; shift -= 8 {
			msg = append(msg, byte(w>>shift))
		}
	}
	return scriptError(msg[:n]), reply[1+words:], nil
}

// maxScriptError is the longest error message the script sends whole.
const maxScriptError = 600

// scriptError is one request's error inside a script reply, such as
// "WRONGTYPE Operation against a key holding the wrong kind of value". It
// is a reply from Redis (redis.Error), so it says nothing about Redis's
// health.
type scriptError string

func (e scriptError) Error() string { return string(e) }

// RedisError marks scriptError as an error Redis replied with.
func (scriptError) RedisError() {}

func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT")
}
