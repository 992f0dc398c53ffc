package core

import (
	"context"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/redistest"
)

// Two limiters whose rules differ must never share state. GCRA 71844/min
// and GCRA 81641/min once had the same 32-bit fingerprint, so one spent
// the other's budget; with 128 bits such pairs are not to be found.
func TestDifferentRulesDoNotShareKeys(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	a, err := New(c, GCRA, PerMinute(71844))
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(c, GCRA, PerMinute(81641))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	defer b.Close()
	ka, kb := a.keys("tenant"), b.keys("tenant")
	if ka[0] == kb[0] {
		t.Errorf("both limiters use key %q", ka[0])
	}
	// a spends its whole burst; b's budget must be untouched.
	if res, err := a.AllowN(ctx, "tenant", 71844); err != nil || !res.Allowed {
		t.Fatalf("a: %+v %v", res, err)
	}
	res, err := b.Peek(ctx, "tenant")
	if err != nil {
		t.Fatal(err)
	}
	if !res.Allowed || res.Remaining != 81641 {
		t.Errorf("b after a spent its burst: allowed=%v remaining=%d; want true, 81641", res.Allowed, res.Remaining)
	}
}

// The key form: "<prefix>:{<stored key>}:<fingerprint>:<rule index>", with
// a fingerprint of 128 bits in 22 base64url characters, outside the hash
// tag, and the same for limiters of the same rules.
func TestKeyForm(t *testing.T) {
	c := redistest.Client(t)
	rules := []Rule{
		{Name: "burst", Algorithm: TokenBucket, Limit: PerSecond(10)},
		{Name: "daily", Algorithm: FixedWindow, Limit: PerDay(1000)},
	}
	a, err := NewPolicy(c, rules, WithPrefix("app"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	same, err := NewPolicy(c, rules, WithPrefix("app"))
	if err != nil {
		t.Fatal(err)
	}
	defer same.Close()
	keys := a.keys("user:7")
	if len(keys) != 2 {
		t.Fatalf("%d keys; want 2", len(keys))
	}
	for i, k := range keys {
		rest, ok := strings.CutPrefix(k, "app:{user:7}:")
		if !ok {
			t.Fatalf("key %q: want prefix %q", k, "app:{user:7}:")
		}
		fp, idx, ok := strings.Cut(rest, ":")
		if !ok || idx != string(rune('0'+i)) {
			t.Errorf("key %q: want rule index %d at the end", k, i)
		}
		if len(fp) != 22 || strings.Trim(fp, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_") != "" {
			t.Errorf("key %q: fingerprint %q; want 22 base64url characters (128 bits)", k, fp)
		}
		if s := same.keys("user:7")[i]; s != k {
			t.Errorf("same rules, same prefix: %q and %q; want one key", k, s)
		}
	}
}
