package core

import (
	"context"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// Every AllowN is observed, one whose cost no rule can admit too.
func TestObserverSeesACostError(t *testing.T) {
	var events []Event
	lim := newOn(t, redistest.RefusedClient(t), GCRA, PerSecond(2), WithObserver(func(e Event) { events = append(events, e) }))
	if _, err := lim.AllowN(context.Background(), "k", 3); !errors.Is(err, ErrCostExceedsLimit) {
		t.Fatal(err)
	}
	if len(events) != 1 || events[0].Outcome != OutcomeError || !errors.Is(events[0].Err, ErrCostExceedsLimit) || events[0].N != 3 {
		t.Errorf("events %+v; want one error event with ErrCostExceedsLimit", events)
	}
}

// KeyHash does not reveal the key to whoever reads it: it is keyed by a
// secret, so hashing candidate keys (every IPv4 address) finds nothing
// without it. Limiters given the same WithKeyHashSecret hash a key alike,
// in any process; others differ.
func TestKeyHashIsKeyed(t *testing.T) {
	ctx := context.Background()
	events := func(opts ...Option) uint64 {
		var ev Event
		opts = append(opts, WithObserver(func(e Event) { ev = e }), WithFailureMode(FailOpen))
		lim := newOn(t, redistest.RefusedClient(t), GCRA, PerSecond(2), opts...)
		lim.Allow(ctx, "ip:198.51.100.77")
		return ev.KeyHash
	}
	unkeyed := shardHash // FNV-1a, 64 bits: anyone can compute it
	own, own2 := events(), events()
	shared, shared2 := events(WithKeyHashSecret("s3cret")), events(WithKeyHashSecret("s3cret"))
	other := events(WithKeyHashSecret("another"))
	if own == unkeyed("ip:198.51.100.77") || shared == unkeyed("ip:198.51.100.77") {
		t.Error("KeyHash is the unkeyed FNV-1a of the key: anyone can find the key back")
	}
	if own != own2 {
		t.Errorf("two limiters of one process hash a key apart: %x, %x", own, own2)
	}
	if shared != shared2 || shared == other || shared == own {
		t.Errorf("KeyHash with a shared secret %x, %x, another secret %x, none %x: want equal for the same secret only", shared, shared2, other, own)
	}
}

// sipHash24 is SipHash-2-4: the reference vectors of its paper, key
// 00 01 … 0f, messages 00 01 … of lengths 0 to 9.
func TestSipHash24Vectors(t *testing.T) {
	want := []uint64{0x726fdb47dd0e0e31, 0x74f839c593dc67fd, 0x0d6c8009d9a94f5a, 0x85676696d7fb7e2d,
		0xcf2794e0277187b7, 0x18765564cd99a68d, 0xcbc9466e58fee3ce, 0xab0200f58b01d137,
		0x93f5f5799a932462, 0x9e0082df0ba9e4b0}
	k := hashKey{0x0706050403020100, 0x0f0e0d0c0b0a0908}
	msg := make([]byte, 0, len(want))
	for i, w := range want {
		if got := k.sum(string(msg)); got != w {
			t.Errorf("length %d: %#x, want %#x", i, got, w)
		}
		msg = append(msg, byte(i))
	}
}
