package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// The subtests of TestCrossSlotCall about a cluster master's health while
// its slots move: a refusal of a slot (MOVED, ASK, TRYAGAIN) says nothing
// against the master that answered it, even when the limiter's timeout
// ends the decision during the pauses that follow it.

// testCrossRedirectLoopHealth: while one slot of master A loops (as in
// testCrossRedirectLoop, never resolved), its decisions fail with the
// redirect once resent, but that says nothing of A: A's other slots, and
// the limiter's health, are untouched (a MOVED is about a key, not about
// Redis being able to decide).
func testCrossRedirectLoopHealth(t *testing.T, cl *redistest.Cluster, shards []redistest.Shard, offset int, timeout time.Duration, ctxTimeout bool) {
	ctx := context.Background()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: ctxTimeout})
	defer cc.Close()
	a, b := shards[0], shards[1]
	prefix := fmt.Sprintf("cross-loophealth-%d", time.Now().UnixNano())
	lim := newOn(t, cc, FixedWindow, PerHour(5), WithPrefix(prefix), WithFailureMode(FailClosed), WithHealthCheck(3, 0), WithTimeout(timeout))
	defer lim.Close()
	stuck, other := a.Slots[0][0]+offset, a.Slots[0][0]+offset+1
	healthy := keyInSlot(t, "healthy-", other)
	if _, err := lim.Allow(ctx, healthy); err != nil { // the script loaded, the map too
		t.Fatal(err)
	}
	na := cl.Node(a.Master)
	if err := na.Do(ctx, "CLUSTER", "SETSLOT", stuck, "MIGRATING", b.MasterID).Err(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := na.Do(ctx, "CLUSTER", "SETSLOT", stuck, "STABLE").Err(); err != nil {
			t.Errorf("SETSLOT %d STABLE on %s: %v", stuck, a.Master, err)
		}
	}()
	for i := range 5 {
		k := keyInSlot(t, fmt.Sprintf("stuck%d-", i), stuck)
		if _, err := lim.Allow(ctx, k); err == nil || errors.Is(err, ErrUnavailable) || !names(err, "MOVED", "ASK") {
			t.Errorf("%s of the looping slot %d: %v; want the redirect's error", k, stuck, err)
		}
	}
	if h := lim.Health(); h != Healthy {
		t.Errorf("after 5 decisions of a looping slot: Health() %v; want healthy", h)
	}
	for i := range 4 {
		if r, err := lim.Allow(ctx, healthy); err != nil || !r.Allowed {
			t.Errorf("%s of slot %d, another slot of %s, request %d: %+v, %v; want admitted", healthy, other, a.Master, i+2, r, err)
		}
	}
}

// testCrossHalfMovedRequest: a lone request of a policy whose two keys a
// reshard has split (one moved to master B, one still on A) is refused
// whole (TRYAGAIN) for as long as the move lasts. With a timeout shorter
// than the resends' pauses it fails with that refusal, which is about one
// slot: neither the limiter's health nor A's other slots are touched.
func testCrossHalfMovedRequest(t *testing.T, cl *redistest.Cluster, shards []redistest.Shard) {
	ctx := context.Background()
	a, b := shards[0], shards[1]
	na, nb := cl.Node(a.Master), cl.Node(b.Master)
	slot := a.Slots[0][0] + 11
	// Limits whose keys outlive the test: a key gone from A by its TTL
	// would be redirected (ASK) rather than refused.
	rules := []Rule{
		{Name: "hour", Algorithm: GCRA, Limit: PerHour(100)},
		{Name: "day", Algorithm: FixedWindow, Limit: PerDay(100)},
	}
	lim, err := NewPolicy(cl.Client(t), rules, WithPrefix(fmt.Sprintf("halfreq-%d", time.Now().UnixNano())),
		WithTimeout(30*time.Millisecond), WithFailureMode(FailClosed), WithHealthCheck(3, 0))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	keys := make([]string, 5)
	for i := range keys {
		keys[i] = keyInSlot(t, fmt.Sprintf("halfreq%d-", i), slot)
		if _, err := lim.Allow(ctx, keys[i]); err != nil {
			t.Fatal(err)
		}
	}
	other := keyInSlot(t, "other-", a.Slots[0][0]+501)
	if _, err := lim.Allow(ctx, other); err != nil {
		t.Fatal(err)
	}
	startMigrating(t, ctx, na, nb, slot, a, b)
	host, port, _ := strings.Cut(b.Master, ":")
	for _, k := range keys {
		// the daily rule's key moves, the hourly one's stays
		if err := na.Do(ctx, "MIGRATE", host, port, "", 0, 5000, "KEYS", lim.keys(k)[1]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { // the slot back to a, its keys gone
		conn := nb.Conn()
		for _, k := range keys {
			na.Del(ctx, lim.keys(k)[0])
			conn.Do(ctx, "ASKING")
			conn.Do(ctx, "DEL", lim.keys(k)[1])
		}
		conn.Close()
		for _, n := range []*redis.Client{na, nb} {
			if err := n.Do(ctx, "CLUSTER", "SETSLOT", slot, "STABLE").Err(); err != nil {
				t.Errorf("SETSLOT %d STABLE: %v", slot, err)
			}
		}
	}()
	for _, k := range keys {
		if _, err := lim.Allow(ctx, k); err == nil || errors.Is(err, ErrUnavailable) || !names(err, "TRYAGAIN") {
			t.Errorf("%s, its keys split by a move: %v; want the refusal (TRYAGAIN), or the timeout naming it", k, err)
		}
	}
	if h := lim.Health(); h != Healthy {
		t.Errorf("Health() = %v after requests split by a move; want Healthy", h)
	}
	if r, err := lim.Allow(ctx, other); err != nil || !r.Allowed {
		t.Errorf("a key of another slot of the same master: %+v, %v; want admitted", r, err)
	}
}

// testCrossAskToAHungMaster: slot S of master A is migrating to master B,
// and B has stopped answering. A answers ASK for a new key of S, go-redis
// follows it to B, and B never answers: each decision fails with the
// limiter's timeout, which names the redirect and counts against neither
// master (A answered; B's own decisions see that it hangs): A's other
// slots are still decided.
func testCrossAskToAHungMaster(t *testing.T, cl *redistest.Cluster, shards []redistest.Shard) {
	ctx := context.Background()
	a, b := shards[0], shards[1]
	na, nb := cl.Node(a.Master), cl.Node(b.Master)
	lim := newOn(t, cl.Client(t), FixedWindow, PerHour(5), WithPrefix(fmt.Sprintf("askhung-%d", time.Now().UnixNano())),
		WithFailureMode(FailClosed), WithHealthCheck(3, 0), WithTimeout(DefaultTimeout))
	defer lim.Close()
	slot := a.Slots[0][0] + 300
	for _, k := range []string{keyInSlot(t, "warmA-", a.Slots[0][0]+301), keyInSlot(t, "warmB-", b.Slots[0][0]+301)} {
		if _, err := lim.Allow(ctx, k); err != nil { // the script loaded on both, the map read
			t.Fatal(err)
		}
	}
	startMigrating(t, ctx, na, nb, slot, a, b)
	defer func() {
		for _, n := range []*redis.Client{na, nb} {
			if err := n.Do(ctx, "CLUSTER", "SETSLOT", slot, "STABLE").Err(); err != nil {
				t.Errorf("SETSLOT %d STABLE: %v", slot, err)
			}
		}
	}()
	if err := nb.Do(ctx, "CLIENT", "PAUSE", 5000, "ALL").Err(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := nb.Do(ctx, "CLIENT", "UNPAUSE").Err(); err != nil {
			t.Errorf("CLIENT UNPAUSE on %s: %v", b.Master, err)
		}
	}()
	for i := range 4 {
		k := keyInSlot(t, fmt.Sprintf("askhung%d-", i), slot)
		if _, err := lim.Allow(ctx, k); !errors.Is(err, context.DeadlineExceeded) || !names(err, "ASK") || errors.Is(err, ErrUnavailable) {
			t.Errorf("decision %d of slot %d, asked to a master that hangs: %v; want the limiter's timeout naming ASK", i, slot, err)
		}
	}
	if r, err := lim.Allow(ctx, keyInSlot(t, "otherA-", a.Slots[0][0]+302)); err != nil || !r.Allowed {
		t.Errorf("another slot of %s: %+v, %v; want admitted", a.Master, r, err)
	}
}

// names reports whether err's text names one of words: a refusal, or the
// limiter's timeout naming it as its last error.
func names(err error, words ...string) bool {
	for _, w := range words {
		if err != nil && strings.Contains(err.Error(), w) {
			return true
		}
	}
	return false
}

// What a cluster call's replies say decides whether its timeout counts
// against its master: a reply or a refusal of its slot says the master
// answered (the answer read too late, its pipeline held by another call's
// redirects, or the call refused while its slot moves); NOSCRIPT after a
// redirect (the new master lacks the script) and the send's own context
// ending leave that as it was; a connection's error says nothing came.
func TestClusterTimeoutCountsOnlyWithoutAnAnswer(t *testing.T) {
	moved := scriptError("MOVED 3999 127.0.0.1:7001")
	noScript := scriptError("NOSCRIPT No matching script. Please use EVAL.")
	reset := &net.OpError{Op: "read", Net: "tcp", Err: errors.New("connection reset by peer")}
	cases := []struct {
		name    string
		replies []error
		counts  bool
		names   string // what the error names, if anything
	}{
		{"no reply", nil, true, ""},
		{"answered", []error{nil}, false, "redis answered"},
		{"moved", []error{moved}, false, "MOVED"},
		{"moved, then answered", []error{moved, nil}, false, "redis answered"},
		{"moved, then NOSCRIPT", []error{moved, noScript}, false, "MOVED"},
		{"moved, then the send's context ended", []error{moved, context.DeadlineExceeded}, false, "MOVED"},
		{"moved, then a connection reset", []error{moved, reset}, true, ""},
		{"NOSCRIPT alone", []error{noScript}, true, ""},
	}
	b := &batcher{}
	for _, tc := range cases {
		c := getCall(callScript)
		cmd := &slotCmd{scriptCmd{redis.NewIntSliceCmd(context.Background())}, []*call{c}}
		for _, err := range tc.replies {
			cmd.SetErr(err)
		}
		err := b.timeout(c)
		if !errors.Is(err, ErrTimeout) || availability(err) != tc.counts || !strings.Contains(err.Error(), tc.names) {
			t.Errorf("%s: %v, counts %v; want ErrTimeout naming %q, counts %v", tc.name, err, availability(err), tc.names, tc.counts)
		}
	}
	// A call answered, then sent again (answered "not here" inside a call
	// of several slots) to a master that never answers: that counts. One
	// refused for its slot and sent again keeps the refusal's note.
	b = &batcher{cluster: &redis.ClusterClient{}}
	pipe := redistest.Client(t).Pipeline()
	for _, tc := range []struct {
		first  error
		counts bool
	}{{nil, true}, {moved, false}} {
		c := getCall(callScript)
		g := &scriptGroup{calls: []*call{c}, cmd: redis.NewIntSliceCmd(context.Background())}
		(&slotCmd{scriptCmd{g.cmd}, g.calls}).SetErr(tc.first)
		b.process(context.Background(), pipe, g) // sent again; no reply comes
		if err := b.timeout(c); availability(err) != tc.counts {
			t.Errorf("first reply %v, sent again, no answer: %v counts %v; want %v", tc.first, err, availability(err), tc.counts)
		}
	}
}
