package core

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// ringOfTwo returns a Ring of two shards, "near" and "far", on the shared
// server; the one named proxied goes through a droppingProxy. Every
// pipeline on the far shard passes through farHook; its connections are
// made by farDial, when set.
func ringOfTwo(t *testing.T, proxied string, farHook redis.Hook,
	farDial func(ctx context.Context, network, addr string) (net.Conn, error)) (*redis.Ring, *droppingProxy) {
	t.Helper()
	direct := redistest.Options(t).Addr
	p := startDroppingProxy(t, direct)
	addrs := map[string]string{"near": direct, "far": direct + "?far"}
	addrs[proxied] = p.addr
	farAddr := addrs["far"]
	ring := redis.NewRing(&redis.RingOptions{
		Addrs: addrs,
		NewClient: func(opt *redis.Options) *redis.Client {
			far := opt.Addr == farAddr
			if far && proxied != "far" {
				opt.Addr = direct
				if farDial != nil {
					opt.Dialer = farDial
				}
			}
			c := redis.NewClient(opt)
			if far {
				c.AddHook(farHook)
			}
			return c
		},
	})
	t.Cleanup(func() { ring.Close() })
	ctx := context.Background()
	if err := ring.ForEachShard(ctx, func(ctx context.Context, c *redis.Client) error {
		for _, src := range everyScript() {
			if err := c.ScriptLoad(ctx, src).Err(); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return ring, p
}

// farHook records the pipelines sent to the far shard, and calls hold,
// when set, before each.
type farHook struct {
	pipelineOnly
	mu   sync.Mutex
	seen []string
	hold func(args string)
}

func (h *farHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		args := pipelineArgs(cmds)
		h.mu.Lock()
		h.seen = append(h.seen, args)
		hold := h.hold
		h.mu.Unlock()
		if hold != nil {
			hold(args)
		}
		return next(ctx, cmds)
	}
}

// holdSend makes the n-th pipeline to the far shard that holds key's call
// wait until release is closed, 10s at most. The function it returns
// reports whether that send was released in time.
func (h *farHook) holdSend(key string, n int, release <-chan struct{}) (releasedInTime func() bool) {
	var released atomic.Bool
	sends := 0
	h.mu.Lock()
	h.hold = func(args string) {
		if !strings.Contains(args, "{"+key+"}") {
			return
		}
		h.mu.Lock()
		sends++
		hold := sends == n
		h.mu.Unlock()
		if hold {
			select {
			case <-release:
				released.Store(true)
			case <-time.After(10 * time.Second):
			}
		}
	}
	h.mu.Unlock()
	return released.Load
}

// onFar reports whether a Peek of key goes to the far shard.
func (h *farHook) onFar(t *testing.T, lim *Limiter, key string) bool {
	t.Helper()
	h.mu.Lock()
	h.seen = h.seen[:0]
	h.mu.Unlock()
	if _, err := lim.Peek(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, a := range h.seen {
		if strings.Contains(a, "{"+key+"}") {
			return true
		}
	}
	return false
}

// shardKeys returns keys of lim on the near shard and on the far one.
func shardKeys(t *testing.T, lim *Limiter, h *farHook, nearN, farN int) (near, far []string) {
	t.Helper()
	for i := 0; i < 500 && (len(near) < nearN || len(far) < farN); i++ {
		k := fmt.Sprintf("k%d", i)
		if h.onFar(t, lim, k) {
			if len(far) < farN {
				far = append(far, k)
			}
		} else if len(near) < nearN {
			near = append(near, k)
		}
	}
	if len(near) < nearN || len(far) < farN {
		t.Fatal("not enough keys found on each shard")
	}
	return near, far
}

// In a batch of several script calls (a Ring, a cluster), an answer in
// hand does not wait for the resends of the others: here the far shard
// refuses its call (LOADING) and its resend is slow, while the near
// decision, counted, is answered at once.
func TestAnswerNotHeldByAnotherGroupsResend(t *testing.T) {
	h := &farHook{}
	ring, p := ringOfTwo(t, "far", h, nil)
	// (The timeout only ends the wait should the near answer be held: it is
	// shorter than holdSend's 10s, and long enough for a loaded machine.)
	lim := newOn(t, ring, FixedWindow, PerHour(10), WithTimeout(5*time.Second), WithHealthCheck(1<<30, 0),
		WithPrefix(fmt.Sprintf("held-answer-%d", time.Now().UnixNano())))
	if lim.batch.grouping != groupNone {
		t.Fatal("a Ring is not grouped call by call")
	}
	nears, fars := shardKeys(t, lim, h, 1, 1)
	near, far := nears[0], fars[0]

	release := make(chan struct{})
	var releaseOnce sync.Once
	defer releaseOnce.Do(func() { close(release) })
	h.holdSend(far, 2, release) // the resend, after a refusal
	done := queueTogether(t, lim, func() {
		p.mu.Lock()
		p.refuse = 1 // the far shard's first script call is refused: it never ran
		p.mu.Unlock()
	}, near, far)
	nearErr := <-done[near]
	releaseOnce.Do(func() { close(release) })
	<-done[far]
	waitBatcherIdle(t, lim.batch)
	v, _ := redistest.Client(t).Get(context.Background(), lim.keys(near)[0]).Result()
	if nearErr != nil && fwCount(v) == 1 {
		t.Errorf("the near decision ran and counted (Redis holds %q), its answer back at once, yet its caller was told %q after waiting for the far shard's resend (%d failure(s) counted against Redis's health)",
			v, nearErr, lim.health.failures.Load())
	}
}

// An answer that a resend round brings in does not wait for the rounds
// after it: here Redis lost the script (SCRIPT FLUSH), so the near
// decision is sent again as EVAL in the first round and counted, while the
// far shard refuses every send (LOADING) and its rounds go on for 8, 16 and
// 32ms more. The near caller has its answer before the far shard's second
// resend goes out.
func TestAnswerNotHeldByLaterResendRounds(t *testing.T) {
	h := &farHook{}
	ring, p := ringOfTwo(t, "far", h, nil)
	lim := newOn(t, ring, FixedWindow, PerHour(10), WithTimeout(30*time.Second), WithHealthCheck(1<<30, 0),
		WithPrefix(fmt.Sprintf("held-rounds-%d", time.Now().UnixNano())))
	nears, fars := shardKeys(t, lim, h, 1, 1)
	near, far := nears[0], fars[0]
	if err := redistest.Client(t).ScriptFlush(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { loadScript(t, redistest.Client(t)) }) // for the tests that count sends

	nearAnswered := make(chan struct{})
	heldUntilAnswered := h.holdSend(far, 3, nearAnswered) // the second resend round
	done := queueTogether(t, lim, func() {
		p.mu.Lock()
		p.refuse = maxSends // every send to the far shard is refused: none runs
		p.mu.Unlock()
	}, near, far)
	nearErr := <-done[near]
	close(nearAnswered)
	farErr := <-done[far]
	waitBatcherIdle(t, lim.batch)
	v, _ := redistest.Client(t).Get(context.Background(), lim.keys(near)[0]).Result()
	if nearErr != nil || fwCount(v) != 1 {
		t.Errorf("near decision: %v, Redis holds %q; want admitted and counted once", nearErr, v)
	}
	if !heldUntilAnswered() {
		t.Error("the near decision, answered by the first resend round, was held until the far shard's rounds ended")
	}
	if farErr == nil || !strings.Contains(farErr.Error(), "LOADING") {
		t.Errorf("far decision: %v; want the shard's LOADING refusal", farErr)
	}
}

// halfWriter is a dialer whose connections, once armed, fail the first
// write holding two script calls after writing the first one whole: a
// connection reset in the middle of a pipeline.
type halfWriter struct {
	armed atomic.Bool
	done  atomic.Bool
}

type halfConn struct {
	net.Conn
	w *halfWriter
}

func (w *halfWriter) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return &halfConn{Conn: c, w: w}, nil
}

func (c *halfConn) Write(b []byte) (int, error) {
	marker := []byte("$7\r\nevalsha\r\n")
	first := bytes.Index(bytes.ToLower(b), marker)
	if first < 0 || !c.w.armed.Load() {
		return c.Conn.Write(b)
	}
	second := bytes.Index(bytes.ToLower(b[first+len(marker):]), marker)
	if second < 0 || !c.w.done.CompareAndSwap(false, true) {
		return c.Conn.Write(b)
	}
	cut := bytes.LastIndex(b[:first+len(marker)+second], []byte("\r\n*")) + 2
	n, err := c.Conn.Write(b[:cut])
	if err == nil {
		err = &net.OpError{Op: "write", Net: "tcp", Addr: c.RemoteAddr(), Err: syscall.ECONNRESET}
	}
	c.Conn.Close()
	return n, err
}

// A write that fails after another script call of its pipeline went out
// whole is not resendable, in any round of resend: that call may have run.
// Whether a call went alone is judged of its own last send, so a group
// resent alone (here the near shard's, refused with LOADING) does not make
// the far shard's old write error look like that of a call sent alone.
func TestStaleWriteErrorNotResent(t *testing.T) {
	h := &farHook{}
	w := &halfWriter{}
	ring, p := ringOfTwo(t, "near", h, w.dial)
	lim := newOn(t, ring, FixedWindow, PerHour(10), WithTimeout(10*time.Second), WithHealthCheck(0, 0),
		WithPrefix(fmt.Sprintf("stale-write-%d", time.Now().UnixNano())))
	nears, fars := shardKeys(t, lim, h, 1, 2)
	keys := append(nears, fars...)
	done := queueTogether(t, lim, func() {
		p.mu.Lock()
		p.refuse = 1 // the near shard's script call is refused: it never ran
		p.mu.Unlock()
		w.armed.Store(true)
	}, keys...)
	errs := map[string]error{}
	for _, k := range keys {
		errs[k] = <-done[k]
	}
	waitBatcherIdle(t, lim.batch)
	if !w.done.Load() {
		t.Fatal("the far pipeline's write was never cut")
	}
	admin := redistest.Client(t)
	for _, k := range fars {
		v, _ := admin.Get(context.Background(), lim.keys(k)[0]).Result()
		if fwCount(v) == 2 {
			t.Errorf("one Allow of %s (answered %v), whose pipeline's write failed after it went out whole: Redis holds %q, counted twice",
				k, errs[k], v)
		}
	}
}

// promoteAfterScript is a hook that, once armed, makes its server a master
// (REPLICAOF NO ONE) as soon as the first script call sent after arming
// returns: what a failover does while a decision is refused.
type promoteAfterScript struct {
	admin *redis.Client
	armed atomic.Bool
	sends atomic.Int32 // script calls sent after arming
}

func (h *promoteAfterScript) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *promoteAfterScript) after(ctx context.Context, cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		if isScriptCall(cmd) && h.armed.Load() {
			if h.sends.Add(1) == 1 {
				_ = h.admin.Do(ctx, "REPLICAOF", "NO", "ONE").Err()
			}
		}
	}
}

func (h *promoteAfterScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.after(ctx, cmd)
		return err
	}
}

func (h *promoteAfterScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.after(ctx, cmds...)
		return err
	}
}

// A decision refused by a replica, its write refused inside the script
// (READONLY; Redis 7 runs a script without flags on a replica), wrote
// nothing: it is sent again after a pause, as a call refused whole is, and
// decided by the server once it is a master (a failover in between). A
// lone caller sends its own call; callers in a batch go through a flusher.
func TestReadOnlyInsideTheScriptIsResent(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(map[bool]string{false: "lone", true: "batch"}[batch], func(t *testing.T) {
			srv := redistest.StartT(t)
			admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer admin.Close()
			h := &promoteAfterScript{admin: admin}
			c := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer c.Close()
			c.AddHook(h)
			lim := newOn(t, c, GCRA, PerHour(10), WithFailureMode(FailClosed), WithTimeout(2*time.Second))
			defer lim.Close()
			ctx := context.Background()
			if _, err := lim.Allow(ctx, "warm"); err != nil { // the script loaded
				t.Fatal(err)
			}
			if err := admin.ReplicaOf(ctx, "127.0.0.1", redistest.RefusedAddr(t)[len("127.0.0.1:"):]).Err(); err != nil {
				t.Fatal(err)
			}
			h.armed.Store(true)
			n := 1
			if batch {
				n = 8
			}
			errs := make([]error, n)
			allowed := make([]bool, n)
			var wg sync.WaitGroup
			for i := range n {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r, err := lim.Allow(ctx, fmt.Sprintf("k%d", i))
					errs[i], allowed[i] = err, r.Allowed
				}()
			}
			wg.Wait()
			for i := range n {
				if errs[i] != nil || !allowed[i] {
					t.Errorf("decision %d, refused READONLY by a replica promoted then: admitted %v, %v; want admitted", i, allowed[i], errs[i])
				}
			}
			if s := h.sends.Load(); s < 2 {
				t.Errorf("%d script calls after the refusal began; want it sent again", s)
			}
		})
	}
}

// A Redis ACL user whose key patterns cover some user keys only is refused
// a script call that declares a key it may not touch, as a whole
// (NOPERM), before anything runs: the decisions batched with such a key
// each go again alone, and only the refused key's fail. Each is counted
// once.
func TestNoPermOfOneKeyFailsOnlyItsDecision(t *testing.T) {
	_, client := limitedUser(t)
	ctx := context.Background()
	lim := newOn(t, client, GCRA, PerDay(1000), WithHealthCheck(0, 0))
	defer lim.Close()
	if _, err := lim.Allow(ctx, "bad-alone"); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Fatalf("a key outside the user's patterns, alone: %v; want NOPERM", err)
	}
	const callers, each = 32, 50
	var okErrs, badErrs atomic.Int64
	var first atomic.Pointer[error]
	var wg sync.WaitGroup
	for g := range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprint("ok-", g)
			if g%2 == 1 {
				key = fmt.Sprint("bad-", g)
			}
			for range each {
				_, err := lim.Allow(ctx, key)
				switch {
				case err != nil && g%2 == 0:
					okErrs.Add(1)
					first.CompareAndSwap(nil, &err)
				case err == nil && g%2 == 1:
					badErrs.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := okErrs.Load(); n != 0 {
		t.Errorf("%d of %d decisions of permitted keys failed (first: %v); want none", n, callers/2*each, *first.Load())
	}
	if n := badErrs.Load(); n != 0 {
		t.Errorf("%d decisions of refused keys succeeded", n)
	}
	for g := 0; g < callers; g += 2 {
		if r, err := lim.Peek(ctx, fmt.Sprint("ok-", g)); err != nil || r.Remaining != 1000-each {
			t.Fatalf("ok-%d after %d admissions: %+v %v; want Remaining %d (each counted once)", g, each, r, err, 1000-each)
		}
	}
}

// limitedUser starts a redis-server of its own with an ACL user that may
// touch the keys of user keys beginning "ok" only (sluice:{ok*), and
// returns a client of the default user and one of that user.
func limitedUser(t *testing.T) (admin, client *redis.Client) {
	t.Helper()
	srv := redistest.StartT(t)
	admin = redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { admin.Close() })
	if err := admin.Do(context.Background(), "ACL", "SETUSER", "lim", "on", ">pw", "~sluice:{ok*", "+@all").Err(); err != nil {
		t.Fatal(err)
	}
	client = redis.NewClient(&redis.Options{Addr: srv.Addr, Username: "lim", Password: "pw"})
	t.Cleanup(func() { client.Close() })
	return admin, client
}
