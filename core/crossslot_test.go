package core

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// crossReq is one request of a batch that crossBatch sends: Allow is
// {key, true, 1}, Peek {key, false, 1}.
type crossReq struct {
	key     string
	consume bool
	n       int
}

// crossBatch decides the keys in one batch of lim's batcher, in order, as
// its flusher would send them (one script call per master), each consuming
// 1, and returns each key's answer (Allowed) or error.
func crossBatch(t *testing.T, lim *Limiter, keys []string) ([]bool, []error) {
	t.Helper()
	reqs := make([]crossReq, len(keys))
	for i, k := range keys {
		reqs[i] = crossReq{k, true, 1}
	}
	res, errs := crossDecide(t, lim, reqs)
	allowed := make([]bool, len(keys))
	for i, r := range res {
		allowed[i] = r.Allowed
	}
	return allowed, errs
}

// crossDecide decides reqs in one batch; see crossDecideThen.
func crossDecide(t *testing.T, lim *Limiter, reqs []crossReq) ([]Result, []error) {
	return crossDecideThen(t, lim, reqs, nil)
}

// crossDecideThen decides reqs in one batch of lim's batcher, in order, as its
// flusher would send them, and returns each request's Result or error.
// Before the batch is sent, set is given its calls (to end some waits
// from a hook, say); a call whose wait ended so is left unanswered.
func crossDecideThen(t *testing.T, lim *Limiter, reqs []crossReq, set func([]*call)) ([]Result, []error) {
	t.Helper()
	batch := make([]*call, len(reqs))
	for i, q := range reqs {
		c := getCall(callScript)
		stored := storedKey(q.key)
		c.keys = lim.appendKeys(c.keys, stored)
		c.args = appendArgs(c.args, q.consume, q.n)
		c.unit = q.consume && q.n == 1
		c.slot = clusterSlot(stored)
		c.deadline = time.Now().Add(10 * time.Second)
		batch[i] = c
	}
	if set != nil {
		set(batch)
	}
	done := make(chan struct{})
	go func() {
		lim.batch.exec(&execScratch{}, batch)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("exec still sending after 20s (blocked signalling a call twice?)")
	}
	res, errs := make([]Result, len(reqs)), make([]error, len(reqs))
	for i, c := range batch {
		if s := c.state.Load(); s == callAbandoned || s == callExpired {
			select {
			case <-c.done:
				if s == callAbandoned {
					t.Errorf("request %d (%q): given up by its caller, yet signalled", i, reqs[i].key)
				}
			default:
				if s == callExpired {
					t.Errorf("request %d (%q): expired, its signal taken", i, reqs[i].key)
				}
			}
			errs[i] = errGivenUp
			continue
		}
		select {
		case <-c.done:
		default:
			t.Fatalf("request %d (%q): not answered when exec returned", i, reqs[i].key)
		}
		if c.state.Load() != callAnswered {
			t.Fatalf("request %d (%q): state %d, want answered", i, reqs[i].key, c.state.Load())
		}
		errs[i] = c.err
		if c.err == nil {
			if len(c.res) != 1+5*len(lim.rules) {
				t.Fatalf("request %d (%q): %d values, want %d", i, reqs[i].key, len(c.res), 1+5*len(lim.rules))
			}
			res[i] = buildResult(lim.rules, c.res)
		}
	}
	return res, errs
}

// keyInSlot returns a user key, beginning with base, whose stored key lies
// in slot.
func keyInSlot(t *testing.T, base string, slot int) string {
	for i := 0; i < 1<<22; i++ {
		k := base + strconv.Itoa(i)
		if clusterSlot(storedKey(k)) == slot {
			return k
		}
	}
	t.Fatalf("no key beginning %q in slot %d", base, slot)
	return ""
}

// keysInSlots returns n keys beginning with name, the i-th in slot first+i:
// requests of one master, each in a slot of its own.
func keysInSlots(t *testing.T, name string, first, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = keyInSlot(t, fmt.Sprintf("%s%d-", name, i), first+i)
	}
	return keys
}

// startMigrating marks slot as moving from shard a (its master na) to
// shard b (nb), as a reshard does before it moves any key.
func startMigrating(t *testing.T, ctx context.Context, na, nb *redis.Client, slot int, a, b redistest.Shard) {
	t.Helper()
	if err := nb.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", a.MasterID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := na.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", b.MasterID).Err(); err != nil {
		t.Fatal(err)
	}
}

// TestCrossSlotCall attacks the script call that decides requests of
// several slots of one master.
func TestCrossSlotCall(t *testing.T) {
	cl := redistest.StartCluster(t)
	// The masters, read once: the subtests move slots between them (each
	// its own slots), and the replicas learn of it by gossip.
	shards, err := cl.Shards(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	t.Run("AskOnRoutingKey", func(t *testing.T) { testCrossAskOnRoutingKey(t, cl, shards) })
	t.Run("ScriptFlushed", func(t *testing.T) { testCrossScriptFlushed(t, cl, shards) })
	t.Run("GivenUpWhenNotHere", func(t *testing.T) { testCrossGivenUp(t, cl, shards, callAbandoned) })
	t.Run("ExpiredWhenNotHere", func(t *testing.T) { testCrossGivenUp(t, cl, shards, callExpired) })
	t.Run("ClusterDown", func(t *testing.T) { testCrossClusterDown(t, cl, shards) })
	t.Run("RedirectLoop", func(t *testing.T) { testCrossRedirectLoop(t, cl, shards) })
	// go-redis pauses 10ms and more between the redirects it follows, and
	// sluice between its resends (8, 16, 32ms): the timeout, the default
	// one or a shorter one, ends a decision of the looping slot during a
	// pause. It fails with the redirect, or with the limiter's timeout
	// naming it, and counts against no master. A lone caller on a client
	// with ContextTimeoutEnabled sends its own call (inline).
	t.Run("RedirectLoopHealth", func(t *testing.T) { testCrossRedirectLoopHealth(t, cl, shards, 90, DefaultTimeout, false) })
	t.Run("RedirectLoopHealthShortTimeout", func(t *testing.T) { testCrossRedirectLoopHealth(t, cl, shards, 92, 30*time.Millisecond, false) })
	t.Run("RedirectLoopHealthInline", func(t *testing.T) { testCrossRedirectLoopHealth(t, cl, shards, 94, DefaultTimeout, true) })
	t.Run("ReplyOffsets", func(t *testing.T) { testCrossReplyOffsets(t, cl, shards, false) })
	t.Run("ReplyOffsetsPolicy", func(t *testing.T) { testCrossReplyOffsets(t, cl, shards, true) })
	t.Run("HalfMigratedSlot", func(t *testing.T) { testCrossHalfMigrated(t, cl, shards) })
	t.Run("HalfMovedRequestShortTimeout", func(t *testing.T) { testCrossHalfMovedRequest(t, cl, shards) })
	t.Run("AskToAHungMaster", func(t *testing.T) { testCrossAskToAHungMaster(t, cl, shards) })
	t.Run("StaleAfterFailover", func(t *testing.T) { testCrossStaleAfterFailover(t, cl, shards) }) // last: it changes the masters
}

// testCrossAskOnRoutingKey: slot S is migrating from master A to master B,
// none of its keys moved yet. Key k2 of S has used its limit on A; key k1
// of S is new (so A answers a command declaring it with ASK). One batch
// decides k1, k2 and k3 (of another slot of A): k2 must be denied, since
// its count lives on A, whichever master the call that carries it runs on.
func testCrossAskOnRoutingKey(t *testing.T, cl *redistest.Cluster, shards []redistest.Shard) {
	ctx := context.Background()
	cc := cl.Client(t)
	a, b := shards[0], shards[1]
	prefix := fmt.Sprintf("cross-ask-%d", time.Now().UnixNano())
	lim := newOn(t, cc, FixedWindow, PerHour(2), WithPrefix(prefix), WithTimeout(10*time.Second))
	defer lim.Close()
	s, other := a.Slots[0][0]+7, a.Slots[0][0]+11
	k1, k2, k3 := keyInSlot(t, "new-", s), keyInSlot(t, "used-", s), keyInSlot(t, "other-", other)
	for i := 0; i < 2; i++ {
		if r, err := lim.Allow(ctx, k2); err != nil || !r.Allowed {
			t.Fatalf("k2, request %d: %+v, %v", i+1, r, err)
		}
	}
	na, nb := cl.Node(a.Master), cl.Node(b.Master)
	startMigrating(t, ctx, na, nb, s, a, b)
	defer func() {
		_ = na.Do(ctx, "CLUSTER", "SETSLOT", s, "STABLE").Err()
		_ = nb.Do(ctx, "CLUSTER", "SETSLOT", s, "STABLE").Err()
	}()
	allowed, errs := crossBatch(t, lim, []string{k1, k2, k3})
	t.Logf("slot %d migrating %s -> %s: k1 %v %v, k2 %v %v, k3 %v %v", s, a.Master, b.Master,
		allowed[0], errs[0], allowed[1], errs[1], allowed[2], errs[2])
	if errs[1] == nil && allowed[1] {
		t.Errorf("k2, its limit of 2 used on %s, admitted a third time (decided on the importing %s, where its key is absent)", a.Master, b.Master)
	}
	for i, k := range []string{k1, k3} {
		if e := errs[2*i]; e != nil || !allowed[2*i] {
			t.Errorf("%s: allowed %v, %v; want admitted", k, allowed[2*i], e)
		}
	}
}

// testCrossRedirectLoop: slot S of master A is marked as migrating to
// master B before B is told to import it (a migration tool that does
// these in the wrong order, or B's replica promoted mid-migration, which
// knows nothing of the import). A new key of S is then redirected for
// ever: A answers ASK (the key is not on A), B answers MOVED back to A
// (S is neither B's nor being imported). go-redis follows a few
// redirects, then returns the last one's error. The script never ran, so
// sluice sends the decision again, after a pause, and once B imports S
// it is decided there: the caller never sees a raw MOVED or ASK. Once
// alone, then as part of a batch of one master's slots.
func testCrossRedirectLoop(t *testing.T, cl *redistest.Cluster, shards []redistest.Shard) {
	ctx := context.Background()
	cc := cl.Client(t)
	a, b := shards[0], shards[1]
	prefix := fmt.Sprintf("cross-loop-%d", time.Now().UnixNano())
	lim := newOn(t, cc, FixedWindow, PerHour(5), WithPrefix(prefix), WithTimeout(10*time.Second))
	defer lim.Close()
	base := a.Slots[0][0] + 80
	here0, here1 := keyInSlot(t, "h0-", base+1), keyInSlot(t, "h1-", base+2)
	for _, k := range []string{here0, here1} { // the script loaded, the map too
		if _, err := lim.Allow(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	na, nb := cl.Node(a.Master), cl.Node(b.Master)
	movedOnB := func() int64 {
		info, err := nb.Info(ctx, "errorstats").Result()
		if err != nil {
			t.Errorf("INFO errorstats on %s: %v", b.Master, err)
			return 0
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_MOVED:count="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		return 0
	}
	// loop makes slot s loop, runs decide, and, once B has answered MOVED
	// twice (go-redis gave up the first send), has B import s.
	loop := func(s int, decide func()) {
		t.Helper()
		if err := na.Do(ctx, "CLUSTER", "SETSLOT", s, "MIGRATING", b.MasterID).Err(); err != nil {
			t.Fatal(err)
		}
		defer func() {
			// The key decided lives on B: S is B's from now on.
			for _, n := range []string{b.Master, a.Master, shards[2].Master} {
				if err := cl.Node(n).Do(ctx, "CLUSTER", "SETSLOT", s, "NODE", b.MasterID).Err(); err != nil {
					t.Errorf("SETSLOT %d NODE on %s: %v", s, n, err)
				}
			}
		}()
		before := movedOnB()
		fixed := make(chan struct{})
		go func() {
			defer close(fixed)
			for end := time.Now().Add(20 * time.Second); time.Now().Before(end); time.Sleep(time.Millisecond) {
				if movedOnB()-before >= 2 {
					break
				}
			}
			if err := nb.Do(ctx, "CLUSTER", "SETSLOT", s, "IMPORTING", a.MasterID).Err(); err != nil {
				t.Errorf("SETSLOT %d IMPORTING on %s: %v", s, b.Master, err)
			}
		}()
		decide()
		<-fixed
		if n := movedOnB() - before; n < 2 {
			t.Errorf("slot %d: %s answered MOVED %d times; want the loop seen (2 or more)", s, b.Master, n)
		}
	}
	lone := keyInSlot(t, "lone-", base)
	loop(base, func() {
		if r, err := lim.Allow(ctx, lone); err != nil || !r.Allowed || r.Remaining != 4 {
			t.Errorf("alone, %s of slot %d: %+v, %v; want admitted, 4 left", lone, base, r, err)
		}
	})
	away := keyInSlot(t, "away-", base+3)
	loop(base+3, func() {
		reqs := []crossReq{{here0, true, 1}, {away, true, 1}, {here1, true, 1}}
		res, errs := crossDecide(t, lim, reqs)
		for i, want := range []int{3, 4, 3} {
			if errs[i] != nil || !res[i].Allowed || res[i].Remaining != want {
				t.Errorf("in a batch, request %d %+v: %+v, %v; want admitted, %d left", i, reqs[i], res[i], errs[i], want)
			}
		}
	})
}

// testCrossReplyOffsets: one batch bound for one master mixes AllowN of
// several costs, Peek, Allow and requests the master does not serve
// (absent keys of a slot being migrated away, answered "not here" and sent
// again alone), between and around the others: each caller gets its own
// answer, and each key counts its own requests once. With policy, the
// limiter has two rules (three integers per rule in the reply).
func testCrossReplyOffsets(t *testing.T, cl *redistest.Cluster, shards []redistest.Shard, policy bool) {
	ctx := context.Background()
	cc := cl.Client(t)
	a, b := shards[1], shards[2]
	prefix := fmt.Sprintf("cross-offsets-%v-%d", policy, time.Now().UnixNano())
	rules := []Rule{{Name: "fw", Algorithm: FixedWindow, Limit: PerHour(10)}}
	if policy {
		rules = append(rules, Rule{Name: "tb", Algorithm: TokenBucket, Limit: Limit{Rate: 1, Period: 24 * time.Hour, Burst: 20}})
	}
	lim, err := NewPolicy(cc, rules, WithPrefix(prefix), WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	base := a.Slots[0][0]
	moving := base + 3 // left moved to b
	if policy {
		moving = base + 5
	}
	keys := keysInSlots(t, "here", base+10, 4)
	away := []string{keyInSlot(t, "away0-", moving), keyInSlot(t, "away1-", moving)}
	// Each key has used 2 of its 10 before the batch.
	for _, k := range append(append([]string{}, keys...), away...) {
		if _, err := lim.AllowN(ctx, k, 2); err != nil {
			t.Fatal(err)
		}
	}
	na, nb := cl.Node(a.Master), cl.Node(b.Master)
	// The away keys' counts move to b: a serves them no more, nor does
	// it serve their slot's absent keys.
	startMigrating(t, ctx, na, nb, moving, a, b)
	defer func() {
		for _, n := range []string{b.Master, a.Master, shards[0].Master} {
			_ = cl.Node(n).Do(ctx, "CLUSTER", "SETSLOT", moving, "NODE", b.MasterID).Err()
		}
	}()
	host, port, _ := strings.Cut(b.Master, ":")
	for _, k := range away {
		for _, rk := range lim.keys(k) {
			if err := na.Do(ctx, "MIGRATE", host, port, rk, 0, 5000).Err(); err != nil {
				t.Fatal(err)
			}
		}
	}
	reqs := []crossReq{
		{away[0], true, 3},  // not here: 2+3 = 5 used, 5 left
		{keys[0], true, 3},  // 5 left
		{keys[1], false, 1}, // peek: 8 left
		{away[1], false, 2}, // not here, peek: 8 left
		{keys[2], true, 1},  // 7 left
		{keys[0], true, 4},  // 1 left
		{away[0], true, 1},  // not here: 4 left
		{keys[3], true, 9},  // denied: 8 left
		{keys[1], true, 8},  // 0 left
		{away[1], true, 1},  // not here: 7 left
	}
	want := []int{5, 5, 8, 8, 7, 1, 4, 8, 0, 7}
	admit := []bool{true, true, true, true, true, true, true, false, true, true}
	res, errs := crossDecide(t, lim, reqs)
	for i, q := range reqs {
		if errs[i] != nil {
			t.Errorf("request %d %+v: %v", i, q, errs[i])
			continue
		}
		if res[i].Allowed != admit[i] || res[i].Remaining != want[i] {
			t.Errorf("request %d %+v: allowed %v, remaining %d; want %v, %d", i, q, res[i].Allowed, res[i].Remaining, admit[i], want[i])
		}
	}
}

// testCrossScriptFlushed: a master that lost both scripts (SCRIPT FLUSH)
// answers a batch of several of its slots with NOSCRIPT; the batch goes
// again with the source and each request counts once.
func testCrossScriptFlushed(t *testing.T, cl *redistest.Cluster, shards []redistest.Shard) {
	ctx := context.Background()
	cc := cl.Client(t)
	a := shards[2]
	prefix := fmt.Sprintf("cross-flush-%d", time.Now().UnixNano())
	lim := newOn(t, cc, FixedWindow, PerHour(2), WithPrefix(prefix), WithTimeout(10*time.Second))
	defer lim.Close()
	keys := keysInSlots(t, "f", a.Slots[0][0]+20, 4)
	for round := 0; round < 3; round++ {
		if err := cl.Node(a.Master).ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		allowed, errs := crossBatch(t, lim, keys)
		for i, k := range keys {
			if errs[i] != nil || allowed[i] != (round < 2) {
				t.Errorf("round %d, %s: allowed %v, %v; want %v", round, k, allowed[i], errs[i], round < 2)
			}
		}
	}
}

// errGivenUp stands for the answer of a call whose wait ended before it.
var errGivenUp = errors.New("given up")

// pipelineHook calls after, when set, once each pipeline has been sent.
type pipelineHook struct {
	pipelineOnly
	after func(cmds []redis.Cmder)
}

func (h *pipelineHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		if h.after != nil {
			h.after(cmds)
		}
		return err
	}
}

// testCrossGivenUp: a request of a cross-slot call that the master did not
// serve ("not here") has its wait ended (to, by its caller or by the
// watchdog) while the call was out: it is neither sent again nor
// signalled a second time, and the requests around it are answered.
func testCrossGivenUp(t *testing.T, cl *redistest.Cluster, shards []redistest.Shard, to uint32) {
	ctx := context.Background()
	cc := cl.Client(t)
	hook := &pipelineHook{}
	cc.AddHook(hook)
	a, b := shards[0], shards[1]
	prefix := fmt.Sprintf("cross-givenup-%d-%d", to, time.Now().UnixNano())
	lim := newOn(t, cc, FixedWindow, PerHour(5), WithPrefix(prefix), WithTimeout(10*time.Second))
	defer lim.Close()
	base := a.Slots[0][0]
	moving := base + 30 + int(to)
	here0, here1 := keyInSlot(t, "h0-", base+40), keyInSlot(t, "h1-", base+41)
	away := keyInSlot(t, "away-", moving)
	for _, k := range []string{here0, here1, away} {
		if _, err := lim.Allow(ctx, k); err != nil { // the script loaded, the map too
			t.Fatal(err)
		}
	}
	na, nb := cl.Node(a.Master), cl.Node(b.Master)
	startMigrating(t, ctx, na, nb, moving, a, b)
	defer func() {
		for _, n := range shards {
			_ = cl.Node(n.Master).Do(ctx, "CLUSTER", "SETSLOT", moving, "NODE", b.MasterID).Err()
		}
	}()
	host, port, _ := strings.Cut(b.Master, ":")
	if err := na.Do(ctx, "MIGRATE", host, port, lim.keys(away)[0], 0, 5000).Err(); err != nil {
		t.Fatal(err)
	}
	reqs := []crossReq{{here0, true, 1}, {away, true, 1}, {here1, true, 1}}
	pipelines := 0
	res, errs := crossDecideThen(t, lim, reqs, func(batch []*call) {
		hook.after = func([]redis.Cmder) {
			pipelines++
			if pipelines == 1 && batch[1].claim(to) && to == callExpired {
				batch[1].done <- struct{}{} // as the watchdog does
			}
		}
	})
	hook.after = nil
	if pipelines != 1 {
		t.Errorf("%d pipelines sent; want 1 (the request given up not sent again)", pipelines)
	}
	for _, i := range []int{0, 2} {
		if errs[i] != nil || !res[i].Allowed || res[i].Remaining != 3 {
			t.Errorf("request %d %+v: %+v, %v; want admitted, 3 left", i, reqs[i], res[i], errs[i])
		}
	}
	// The key given up counts its first request only, on b.
	pipe := nb.Pipeline()
	pipe.Do(ctx, "ASKING")
	get := pipe.Get(ctx, lim.keys(away)[0])
	_, _ = pipe.Exec(ctx)
	if v, err := get.Result(); err != nil || fwCount(v) != 1 {
		t.Errorf("%s given up: counted %d (%q, %v) on %s; want 1", away, fwCount(v), v, err, b.Master)
	}
}

// testCrossClusterDown: a master whose cluster is down (here, a slot of
// its own unassigned, so that not every slot is served) refuses what a
// batch of several of its slots asks; each request's error says that
// Redis cannot serve decisions (availability), so that the limiter's
// failure mode answers it, as for a request sent alone, which the master
// refuses with CLUSTERDOWN.
func testCrossClusterDown(t *testing.T, cl *redistest.Cluster, shards []redistest.Shard) {
	ctx := context.Background()
	cc := cl.Client(t)
	a := shards[2]
	prefix := fmt.Sprintf("cross-down-%d", time.Now().UnixNano())
	lim := newOn(t, cc, FixedWindow, PerHour(5), WithPrefix(prefix), WithTimeout(10*time.Second))
	defer lim.Close()
	keys := keysInSlots(t, "d", a.Slots[0][0]+50, 3)
	for _, k := range keys {
		if _, err := lim.Allow(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	na := cl.Node(a.Master)
	dropped := a.Slots[0][0] + 60
	if err := na.Do(ctx, "CLUSTER", "DELSLOTS", dropped).Err(); err != nil {
		t.Fatal(err)
	}
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		if err := na.Do(ctx, "CLUSTER", "ADDSLOTS", dropped).Err(); err != nil {
			t.Errorf("ADDSLOTS %d on %s: %v", dropped, a.Master, err)
		}
		for i := 0; i < 500; i++ {
			info, _ := na.ClusterInfo(ctx).Result()
			if strings.Contains(info, "cluster_state:ok") {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Errorf("%s: cluster state not ok 5s after ADDSLOTS", a.Master)
	}
	defer restore()
	for i := 0; i < 500; i++ {
		info, _ := na.ClusterInfo(ctx).Result()
		if strings.Contains(info, "cluster_state:fail") {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	_, errs := crossBatch(t, lim, keys)
	for i, k := range keys {
		if errs[i] == nil || !availability(errs[i]) {
			t.Errorf("%s, its master's cluster down: %v (Redis unavailable: %v); want an error saying Redis cannot serve decisions", k, errs[i], errs[i] != nil && availability(errs[i]))
		}
	}
	restore()
	allowed, errs := crossBatch(t, lim, keys)
	for i, k := range keys {
		if errs[i] != nil || !allowed[i] {
			t.Errorf("%s, the cluster back: allowed %v, %v", k, allowed[i], errs[i])
		}
	}
}

// testCrossStaleAfterFailover: a master's replica took over (CLUSTER
// FAILOVER) and the client's slot map still names the old master, now a
// replica: a batch of several of its slots is answered by the new master,
// each request counted once, as requests sent alone are (the replica
// redirects them with MOVED).
func testCrossStaleAfterFailover(t *testing.T, cl *redistest.Cluster, shards []redistest.Shard) {
	ctx := context.Background()
	a := shards[0]
	if len(a.Replicas) == 0 {
		t.Skip("no replica")
	}
	var mu sync.Mutex
	var stale []redis.ClusterSlot
	admin := cl.Node(a.Master)
	cc := redis.NewClusterClient(&redis.ClusterOptions{
		Addrs: cl.Addrs(),
		ClusterSlots: func(ctx context.Context) ([]redis.ClusterSlot, error) {
			mu.Lock()
			defer mu.Unlock()
			if stale != nil {
				return stale, nil
			}
			return admin.ClusterSlots(ctx).Result()
		},
	})
	defer cc.Close()
	prefix := fmt.Sprintf("cross-failover-%d", time.Now().UnixNano())
	lim := newOn(t, cc, FixedWindow, PerHour(5), WithPrefix(prefix), WithTimeout(10*time.Second))
	defer lim.Close()
	keys := keysInSlots(t, "fo", a.Slots[0][0]+70, 3)
	for _, k := range keys {
		if _, err := lim.Allow(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	slots, err := admin.ClusterSlots(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	stale = slots // the map before the failover, for every reload
	mu.Unlock()
	if err := cl.Failover(ctx, a.Replicas[0]); err != nil {
		t.Fatal(err)
	}
	// Replicated before the switch: the new master holds the counts.
	allowed, errs := crossBatch(t, lim, keys)
	for i, k := range keys {
		if errs[i] != nil || !allowed[i] {
			t.Errorf("%s after the failover, the map naming the old master: allowed %v, %v", k, allowed[i], errs[i])
		}
	}
	nm := cl.Node(a.Replicas[0])
	for _, k := range keys {
		v, err := nm.Get(ctx, lim.keys(k)[0]).Result()
		if err != nil || fwCount(v) != 2 {
			t.Errorf("%s on the new master %s: %q (%v), counted %d; want 2", k, a.Replicas[0], v, err, fwCount(v))
		}
	}
}

// testCrossHalfMigrated: a slot being resharded holds some of a batch's
// keys on its old master and some already moved. A call declaring keys of
// both is refused whole (TRYAGAIN) for as long as the move takes; alone,
// each request is served (ASK redirects the moved ones). Its calls are
// sent alone, at once, and the refusal, about one slot, says nothing of
// the master's health. (They used to be resent whole three times, then
// failed, and the master's breaker opened: keys of its other slots went to
// the failure mode too.)
func testCrossHalfMigrated(t *testing.T, cl *redistest.Cluster, shards []redistest.Shard) {
	ctx := context.Background()
	a, b := shards[0], shards[1]
	na, nb := cl.Node(a.Master), cl.Node(b.Master)
	slot := a.Slots[0][0] + 9
	var hookMu sync.Mutex
	var hooks []Health
	lim, err := New(cl.Client(t), GCRA, PerHour(5), WithPrefix(fmt.Sprintf("half-%d", time.Now().UnixNano())),
		WithTimeout(2*time.Second), WithHealthHook(func(h Health, _ error) { hookMu.Lock(); hooks = append(hooks, h); hookMu.Unlock() }))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	keys := make([]string, 4)
	for i := range keys {
		keys[i] = keyInSlot(t, fmt.Sprintf("half%d-", i), slot)
		if _, err := lim.Allow(ctx, keys[i]); err != nil {
			t.Fatal(err)
		}
	}
	startMigrating(t, ctx, na, nb, slot, a, b)
	host, port, _ := strings.Cut(b.Master, ":")
	for _, k := range keys[:2] {
		if err := na.Do(ctx, "MIGRATE", host, port, "", 0, 5000, "KEYS", lim.keys(k)[0]).Err(); err != nil {
			t.Fatal(err)
		}
	}
	defer func() { // the slot back to a, its keys gone
		for _, k := range keys[2:] {
			na.Del(ctx, lim.keys(k)[0])
		}
		conn := nb.Conn()
		for _, k := range keys[:2] {
			conn.Do(ctx, "ASKING")
			conn.Do(ctx, "DEL", lim.keys(k)[0])
		}
		conn.Close()
		for _, n := range []*redis.Client{na, nb} {
			if err := n.Do(ctx, "CLUSTER", "SETSLOT", slot, "STABLE").Err(); err != nil {
				t.Errorf("SETSLOT %d STABLE: %v", slot, err)
			}
		}
	}()
	allowed, errs := crossBatch(t, lim, keys)
	for i, err := range errs {
		if err != nil || !allowed[i] {
			t.Errorf("key %d of a batch in a half-moved slot: admitted %v, %v; want admitted (4 left)", i, allowed[i], err)
		}
	}
	if h := lim.Health(); h != Healthy {
		t.Errorf("Health() = %v after a slot's move refused a batch; want Healthy", h)
	}
	if _, err := lim.Allow(ctx, keyInSlot(t, "other-", a.Slots[0][0]+500)); err != nil {
		t.Errorf("a key of another slot of the same master: %v", err)
	}
	hookMu.Lock()
	defer hookMu.Unlock()
	if len(hooks) != 0 {
		t.Errorf("the health hook saw %v; want nothing", hooks)
	}
}
