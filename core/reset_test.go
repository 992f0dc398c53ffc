package core

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/internal/redistest"
)

// A DEL (Reset) or a PING is answered as soon as its own pipeline returns,
// not after the scripts of its batch: a slow or hung script pipeline must
// not turn a Reset that has been done into a timeout (or keep the health
// probe's answered PING from reopening the limiter).
func TestDelAnsweredBeforeTheScripts(t *testing.T) {
	c := redistest.Client(t)
	var mu sync.Mutex
	holds := map[string]chan struct{}{}
	hold := func(mark string) chan struct{} {
		mu.Lock()
		defer mu.Unlock()
		ch := make(chan struct{})
		holds[mark] = ch
		return ch
	}
	held := make(chan string, 8)
	c.AddHook(&pipeHook{after: func(args string) {
		mu.Lock()
		var ch chan struct{}
		var name string
		for m, h := range holds {
			if strings.Contains(args, m) {
				ch, name = h, m
			}
		}
		mu.Unlock()
		if ch != nil {
			held <- name
			<-ch
		}
	}})
	lim := newOn(t, c, FixedWindow, PerHour(10), WithTimeout(10*time.Second), WithHealthCheck(0, 0),
		WithPrefix(fmt.Sprintf("delbehind-%d", time.Now().UnixNano())))
	b := lim.batch
	viaFlushers(b)
	setFlushers(b, 2) // the scene below: both flushers busy
	bg := context.Background()
	loadScript(t, c)
	relX1, relX2, relLong := hold("{x1}"), hold("{x2}"), hold("{long}")
	defer close(relLong)
	errs := make(chan error, 4)
	allow := func(key string) { allowAsync(lim, bg, key, errs) }
	// Both flushers busy, each held after its reply.
	allow("x1")
	<-held
	allow("x2")
	<-held
	// A Reset and a decision queue together.
	key := lim.keys("r")[0]
	if err := c.Set(bg, key, "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	resetDone := make(chan error, 1)
	go func() { resetDone <- lim.Reset(bg, "r") }()
	allow("long")
	waitPending(t, b, 2, "the Reset and the decision queued")
	close(relX1)
	close(relX2)
	// One flusher sends the DEL, then the decision, whose pipeline is held.
	select {
	case m := <-held:
		if m != "{long}" {
			t.Fatalf("held %s", m)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the decision queued with the Reset was never sent")
	}
	if n := c.Exists(bg, key).Val(); n != 0 {
		t.Fatal("the DEL did not run before the scripts")
	}
	if err := <-resetDone; err != nil {
		t.Errorf("Reset whose DEL ran and was answered: %v", err)
	}
}

// A denial that Redis decided before a Reset's DEL ran (here a request
// sent on the other flusher while the DEL's pipeline was on its way) is not
// left in the deny cache once Reset returns: the limiter would answer it
// for up to RetryAfter, although Redis, reset, admits.
func TestDenyCacheNotRefilledDuringReset(t *testing.T) {
	prefix := fmt.Sprintf("deny-during-reset-%d", time.Now().UnixNano())
	ctx := context.Background()
	c := redistest.Client(t)
	delHeld, delRelease := make(chan struct{}), make(chan struct{})
	var once sync.Once
	c.AddHook(&pipeHook{before: func(args string) {
		if strings.HasPrefix(args, "[del ") {
			once.Do(func() {
				close(delHeld)
				<-delRelease
			})
		}
	}})
	lim := newOn(t, c, FixedWindow, PerHour(1), WithPrefix(prefix), WithDenyCache(100), WithHealthCheck(0, 0))
	if r, err := lim.Allow(ctx, "k"); err != nil || !r.Allowed {
		t.Fatal(r, err)
	}
	resetDone := make(chan error, 1)
	go func() { resetDone <- lim.Reset(ctx, "k") }()
	<-delHeld
	// Sent after Reset cleared the cache, decided before the DEL runs.
	r, err := lim.Allow(ctx, "k")
	if err != nil || r.Allowed {
		close(delRelease)
		t.Fatalf("before the DEL ran: %+v %v; want a denial", r, err)
	}
	close(delRelease)
	if err := <-resetDone; err != nil {
		t.Fatal(err)
	}
	if n := c.Exists(ctx, lim.keys("k")[0]).Val(); n != 0 {
		t.Fatal("the key survived Reset")
	}
	r, err = lim.Allow(ctx, "k")
	if err != nil || !r.Allowed {
		t.Errorf("after Reset returned, Redis holding nothing for the key: %+v %v; the deny cache answered a denial made before the DEL", r, err)
	}
}

// A lone caller's Reset, on a client that ends commands at their
// context's deadline, sends its DEL itself (inline): the key is forgotten.
func TestResetInline(t *testing.T) {
	lim, _ := inlineLimiter(t, FixedWindow, PerHour(2), "reset-inline")
	ctx := context.Background()
	for range 2 {
		lim.Allow(ctx, "k")
	}
	if res, err := lim.Allow(ctx, "k"); err != nil || res.Allowed {
		t.Fatalf("third request: %+v %v; want denied", res, err)
	}
	if err := lim.Reset(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if res, err := lim.Allow(ctx, "k"); err != nil || !res.Allowed || res.Remaining != 1 {
		t.Errorf("after Reset: %+v %v; want admitted, 1 left", res, err)
	}
}
