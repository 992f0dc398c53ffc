package core

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// crossBatch decides the keys in one batch of lim's batcher, in order, as
// its flusher would send them (one script call per master), and returns
// each key's answer (Allowed) or error.
func crossBatch(t *testing.T, lim *Limiter, keys []string) ([]bool, []error) {
	t.Helper()
	batch := make([]*call, len(keys))
	for i, k := range keys {
		c := getCall(callScript)
		stored := storedKey(k)
		c.keys = lim.appendKeys(c.keys, stored)
		c.args = appendArgs(c.args, true, 1)
		c.unit = true
		c.slot = clusterSlot(stored)
		c.deadline = time.Now().Add(10 * time.Second)
		batch[i] = c
	}
	lim.batch.exec(&execScratch{}, batch)
	allowed, errs := make([]bool, len(keys)), make([]error, len(keys))
	for i, c := range batch {
		select {
		case <-c.done:
		default:
			t.Fatalf("key %q: not answered when exec returned", keys[i])
		}
		if c.state.Load() != callAnswered {
			t.Fatalf("key %q: state %d, want answered", keys[i], c.state.Load())
		}
		errs[i] = c.err
		if c.err == nil {
			allowed[i] = buildResult(lim.rules, c.res).Allowed
		}
	}
	return allowed, errs
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

// TestCrossSlotCall attacks the script call that decides requests of
// several slots of one master.
func TestCrossSlotCall(t *testing.T) {
	cl := redistest.StartCluster(t)
	t.Run("AskOnRoutingKey", func(t *testing.T) { testCrossAskOnRoutingKey(t, cl) })
}

// testCrossAskOnRoutingKey: slot S is migrating from master A to master B,
// none of its keys moved yet. Key k2 of S has used its limit on A; key k1
// of S is new (so A answers a command declaring it with ASK). One batch
// decides k1, k2 and k3 (of another slot of A): k2 must be denied, since
// its count lives on A, whichever master the call that carries it runs on.
func testCrossAskOnRoutingKey(t *testing.T, cl *redistest.Cluster) {
	ctx := context.Background()
	cc := cl.Client(t)
	shards, err := cl.Shards(ctx)
	if err != nil {
		t.Fatal(err)
	}
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
	if err := nb.Do(ctx, "CLUSTER", "SETSLOT", s, "IMPORTING", a.MasterID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := na.Do(ctx, "CLUSTER", "SETSLOT", s, "MIGRATING", b.MasterID).Err(); err != nil {
		t.Fatal(err)
	}
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
