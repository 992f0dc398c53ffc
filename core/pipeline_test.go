package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/sluicehq/sluice/internal/redistest"
)

// Concurrent callers share pipelines; each must get its own answer.
func TestBatchedResultsReachTheirCallers(t *testing.T) {
	c := redistest.Client(t)
	prefix := fmt.Sprintf("route-%d", time.Now().UnixNano())
	lim := newOn(t, c, TokenBucket, PerHour(200), WithPrefix(prefix))
	ctx := context.Background()
	var wg sync.WaitGroup
	for round := 0; round < 3; round++ {
		for i := 1; i <= 200; i++ {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				// A key and a cost of its own: the answer tells whose it is.
				key := fmt.Sprintf("caller-%d-%d", round, i)
				r, err := lim.AllowN(ctx, key, i)
				if err != nil || !r.Allowed || r.Remaining != 200-i {
					t.Errorf("%s cost %d: %+v %v", key, i, r, err)
				}
			}(i)
		}
		wg.Wait()
	}
}

// A request's error travels in the script's reply as integers (put_error in
// lua/policy.lua) and comes out as the message Redis gave, whole: for every
// length around the six bytes an integer holds, and cut at maxScriptError.
// The script's own put_error runs here, on its own, in a real Redis.
func TestScriptErrorsTravelAsIntegers(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	at := strings.Index(scriptSrc, "local function put_error")
	indent := scriptSrc[strings.LastIndexByte(scriptSrc[:at], '\n')+1 : at] // it is made inside a block
	src := scriptSrc[at:]
	src = src[:strings.Index(src, "\n"+indent+"end\n")+len(indent)+5]
	harness := "local replies, top = {}, 0\n" + src + "\nput_error(ARGV[1])\nreplies[top + 1] = 7\nreturn replies"
	for _, n := range []int{0, 1, 5, 6, 7, 11, 12, 13, 66, maxScriptError - 1, maxScriptError, maxScriptError + 1, 2000} {
		msg := make([]byte, n)
		for i := range msg {
			msg[i] = byte(1 + (i*37)%255) // every byte but 0
		}
		reply, err := c.Eval(ctx, harness, nil, string(msg)).Int64Slice()
		if err != nil {
			t.Fatalf("%d bytes: %v", n, err)
		}
		_, rest, err := parseReply(reply, 1, nil)
		want := string(msg[:min(n, maxScriptError)])
		var se scriptError
		if !errors.As(err, &se) || string(se) != want {
			t.Errorf("%d bytes: got %q, want the message's first %d bytes", n, err, len(want))
		}
		if len(rest) != 1 || rest[0] != 7 {
			t.Errorf("%d bytes: the next answer should follow the error, got %v", n, rest)
		}
	}
	// A reply cut short is an error of its own, not a message read out of
	// bounds.
	if _, _, err := parseReply([]int64{-20, 1}, 1, nil); err == nil || errors.As(err, new(scriptError)) {
		t.Errorf("truncated error: %v", err)
	}
}

// parseReply expands the script's short answers (two or three integers a
// rule) into the form buildResult reads, and refuses an answer cut short.
func TestParseReplyExpandsShortAnswers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		reply []int64
		rules int
		want  []int64
		rest  int
	}{
		{"admitted", []int64{9*4 + 2, 500, 77}, 1, []int64{1, 1, 9, 0, 500, 0}, 1},
		{"admitted with delay", []int64{3*4 + 3, 500, 40}, 1, []int64{1, 1, 3, 0, 500, 40}, 0},
		{"denied with retry", []int64{0*4 + 1, 900, 250}, 1, []int64{0, 0, 0, 250, 900, 0}, 0},
		{"denied by the second rule", []int64{5*4 + 2, 10, 0*4 + 1, 20, 30}, 2, []int64{0, 1, 5, 0, 10, 0, 0, 0, 30, 20, 0}, 0},
	} {
		got, rest, err := parseReply(tc.reply, tc.rules, nil)
		if err != nil || !slices.Equal(got, tc.want) || len(rest) != tc.rest {
			t.Errorf("%s: got %v, rest %v, %v; want %v", tc.name, got, rest, err, tc.want)
		}
	}
	for _, cut := range [][]int64{{}, {9*4 + 2}, {3*4 + 3, 500}, {5*4 + 2, 10, 0*4 + 1}} {
		if _, _, err := parseReply(cut, 2, nil); err == nil {
			t.Errorf("%v: parsed as a whole answer of two rules", cut)
		}
	}
}

// One call's error, inside a batch, fails that call only.
func TestBatchedErrorsArePerCall(t *testing.T) {
	c := redistest.Client(t)
	prefix := fmt.Sprintf("errs-%d", time.Now().UnixNano())
	lim := newOn(t, c, TokenBucket, PerHour(10), WithPrefix(prefix))
	ctx := context.Background()
	// A hash where the token bucket keeps a string: WRONGTYPE for that key.
	if err := c.HSet(ctx, lim.keys("poisoned")[0], "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := map[string]int{}
	for i := 0; i < 300; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			key := fmt.Sprintf("k%d", i%10)
			if i%10 == 0 {
				key = "poisoned"
			}
			if _, err := lim.Allow(ctx, key); err != nil {
				mu.Lock()
				failed[key]++
				mu.Unlock()
				if !strings.Contains(err.Error(), "WRONGTYPE") {
					t.Errorf("%s: %v", key, err)
				}
			}
		}(i)
	}
	wg.Wait()
	if len(failed) != 1 || failed["poisoned"] != 30 {
		t.Errorf("failures by key: %v; want only the 30 calls on the poisoned key", failed)
	}
	// However many in a row, an error about one key is not Redis failing.
	for i := 0; i < 10; i++ {
		if _, err := lim.Allow(ctx, "poisoned"); err == nil || errors.Is(err, ErrUnavailable) {
			t.Fatalf("call %d on the poisoned key: %v", i, err)
		}
	}
	if lim.Health() != Healthy {
		t.Error("an error about one key made Redis unhealthy")
	}
	if r, err := lim.Allow(ctx, "fresh"); err != nil || !r.Allowed {
		t.Errorf("another key after the errors: %+v %v", r, err)
	}
}

// burstAndDaily returns a two-rule policy on c, GCRA 10/s and
// FixedWindow 1000/day, under a prefix of its own.
func burstAndDaily(t *testing.T, c redis.UniversalClient, prefix string) *Limiter {
	t.Helper()
	lim, err := NewPolicy(c, []Rule{
		{Name: "burst", Algorithm: GCRA, Limit: PerSecond(10)},
		{Name: "daily", Algorithm: FixedWindow, Limit: PerDay(1000)},
	}, WithPrefix(fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	return lim
}

// In one script call of a policy, a request that fails after its first
// rule was decided (the second rule's key has the wrong type) answers with
// its error alone: the answers around it keep their places, and nothing of
// its partial answer is left in the reply, wherever it stands in the call.
func TestPolicyErrorMidRequestLeavesNoPartialAnswer(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	lim := burstAndDaily(t, c, "partial")
	if err := c.HSet(ctx, lim.keys("poisoned")[1], "f", "v").Err(); err != nil {
		t.Fatal(err)
	}
	nrules := len(lim.rules)
	for _, order := range [][]string{
		{"a", "poisoned", "b"},
		{"c", "poisoned"},
		{"poisoned"},
		{"poisoned", "poisoned", "d"},
	} {
		var keys []string
		args := append([]interface{}{}, lim.batch.ruleArgs...)
		for _, k := range order {
			keys = append(keys, lim.keys(k)...)
			args = appendArgs(args, true, 1)
		}
		reply, err := policyScript.Run(ctx, c, keys, args...).Int64Slice()
		if err != nil {
			t.Fatalf("%v: %v", order, err)
		}
		for _, k := range order {
			var res []int64
			res, reply, err = parseReply(reply, nrules, nil)
			if k == "poisoned" {
				if err == nil || !strings.Contains(err.Error(), "WRONGTYPE") {
					t.Errorf("%v: the poisoned request answered %v, %v", order, res, err)
				}
				continue
			}
			if err != nil || res[0] != 1 || res[1] != 1 || res[6] != 1 {
				t.Errorf("%v: %s answered %v, %v; want admitted by both rules", order, k, res, err)
			}
		}
		if len(reply) != 0 {
			t.Errorf("%v: %d values left after the last answer: %v", order, len(reply), reply)
		}
	}
}

// A script call whose requests all consume 1 (Allow) carries their keys
// and no argument per request; one with any other request (AllowN, Peek)
// carries one per request. Redis decides both alike, a two-rule policy too.
func TestUnitRequestsSendOnlyTheirKeys(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	lim := burstAndDaily(t, c, "unit")
	loadScript(t, c)
	R := len(lim.rules)
	req := func(key string, consume bool, n int) *call {
		c := &call{keys: lim.appendKeys(nil, storedKey(key))}
		c.args = appendArgs(nil, consume, n)
		c.unit = consume && n == 1
		return c
	}
	for _, tc := range []struct {
		name  string
		calls []*call
		want  []int // remaining by the first rule, per request
	}{
		{"allows", []*call{req("a", true, 1), req("b", true, 1), req("a", true, 1)}, []int{9, 9, 8}},
		{"mixed", []*call{req("c", true, 1), req("c", true, 3), req("c", false, 1), req("d", true, 1)}, []int{9, 6, 6, 9}},
	} {
		g := &scriptGroup{calls: tc.calls}
		g.build(ctx, lim.batch.ruleArgs)
		keys := len(tc.calls) * R
		perRequest := len(g.args) - 3 - keys - len(lim.batch.ruleArgs)
		if unit := allUnit(tc.calls); unit && perRequest != 0 || !unit && perRequest != len(tc.calls) {
			t.Fatalf("%s: %d script arguments per request in %v", tc.name, perRequest, g.args)
		}
		reply, err := c.Do(ctx, g.args...).Int64Slice()
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		for i, want := range tc.want {
			var res []int64
			if res, reply, err = parseReply(reply, R, nil); err != nil || res[0] != 1 || res[2] != int64(want) {
				t.Errorf("%s: request %d answered %v, %v; want admitted with %d remaining", tc.name, i, res, err, want)
			}
		}
		if len(reply) != 0 {
			t.Errorf("%s: %d values left after the last answer", tc.name, len(reply))
		}
	}
}

// A connection closed under a call is resendable only when the call went
// alone: go-redis reports a closed handshake bare (nothing was written),
// and so does crypto/tls a write cut short, after which other script calls
// of the same pipeline may have gone out whole and run.
func TestClosedConnectionResendableOnlyAlone(t *testing.T) {
	for _, tc := range []struct {
		err         error
		alone, want bool
	}{
		{net.ErrClosed, true, true},
		{net.ErrClosed, false, false},
		{fmt.Errorf("redis: handshake: %w", net.ErrClosed), false, false},
		{&net.OpError{Op: "write", Err: net.ErrClosed}, true, true},
		{&net.OpError{Op: "write", Err: net.ErrClosed}, false, false},
		{&net.OpError{Op: "read", Err: net.ErrClosed}, true, false},
		{&net.OpError{Op: "dial", Err: net.ErrClosed}, false, true},
	} {
		if got := resendable(tc.err, tc.alone); got != tc.want {
			t.Errorf("resendable(%v, alone %v) = %v; want %v", tc.err, tc.alone, got, tc.want)
		}
	}
}

// Flushers park while another batch is in flight (see flush), but none is
// left once the traffic ends: a limiter nobody uses holds no goroutine.
func TestNoFlusherOutlivesTheTraffic(t *testing.T) {
	c := redistest.Client(t)
	lim := newOn(t, c, GCRA, PerHour(1_000_000), WithPrefix(fmt.Sprintf("park-%d", time.Now().UnixNano())))
	ctx := context.Background()
	for round := 0; round < 3; round++ {
		var wg sync.WaitGroup
		for g := 0; g < 64; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; i < 50; i++ {
					if _, err := lim.Allow(ctx, fmt.Sprintf("k%d", (g+i)%7)); err != nil {
						t.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		waitBatcherIdle(t, lim.batch)
		for deadline := time.Now().Add(10 * time.Second); flushersRunning(lim.batch) > 0; {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: %d flusher goroutines left after the traffic", round, flushersRunning(lim.batch))
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// flushersRunning counts the goroutines in b's flush.
func flushersRunning(b *batcher) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			return strings.Count(string(buf[:n]), fmt.Sprintf("core.(*batcher).flush(%p)", b))
		}
		buf = make([]byte, 2*len(buf))
	}
}

// A caller that gave up before its batch was sent is not sent at all.
func TestAbandonedCallsAreNotSent(t *testing.T) {
	c := redistest.Client(t)
	lim := newOn(t, c, GCRA, PerMinute(1))
	b := newBatcher(c, 1, lim.batch.ruleArgs)
	b.flushers = 0 // nothing flushes until we say so
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	key := fmt.Sprintf("abandoned-%d", time.Now().UnixNano())
	c1 := getCall(callScript)
	c1.keys, c1.args = []keyArg{{b: []byte(key)}}, appendArgs(nil, true, 1)
	answered, err := b.do(ctx, 0, c1)
	if answered || err != context.Canceled {
		t.Fatalf("got %v", err)
	}
	b.flushers = 1
	done := make(chan struct{})
	go func() { b.do(context.Background(), 0, getCall(callPing)); close(done) }()
	<-done
	if n := c.Exists(context.Background(), key).Val(); n != 0 {
		t.Error("an abandoned call was executed")
	}
}

// With a client that enforces context deadlines, a lone caller sends its
// own call; concurrent callers still share pipelines, each with its own
// answer, and a hung Redis still costs a caller no more than its timeout.
func TestInlineSend(t *testing.T) {
	opt := redistest.Options(t)
	opt.ContextTimeoutEnabled = true
	c := redis.NewClient(opt)
	defer c.Close()
	lim := newOn(t, c, TokenBucket, PerHour(200), WithPrefix(fmt.Sprintf("inline-%d", time.Now().UnixNano())))
	if !lim.batch.inline {
		t.Fatal("ContextTimeoutEnabled not detected")
	}
	ctx := context.Background()
	if r, err := lim.Allow(ctx, "lone"); err != nil || r.Remaining != 199 {
		t.Fatalf("%+v %v", r, err)
	}
	// A lone call after the scripts are gone falls back to EVAL.
	if err := c.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if r, err := lim.Allow(ctx, "lone"); err != nil || r.Remaining != 198 {
		t.Fatalf("after SCRIPT FLUSH: %+v %v", r, err)
	}
	var wg sync.WaitGroup
	for i := 1; i <= 200; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			key := fmt.Sprintf("caller-%d", i)
			if r, err := lim.AllowN(ctx, key, i); err != nil || r.Remaining != 200-i {
				t.Errorf("%s cost %d: %+v %v", key, i, r, err)
			}
		}(i)
	}
	wg.Wait()

	stuck := redis.NewClient(&redis.Options{Addr: redistest.StuckServer(t), ContextTimeoutEnabled: true, MaxRetries: -1, ReadTimeout: time.Minute})
	defer stuck.Close()
	hung := newOn(t, stuck, GCRA, PerSecond(1), WithTimeout(50*time.Millisecond), WithFailureMode(FailClosed))
	if r, err := hung.Allow(ctx, "k"); err == nil || r.Allowed {
		t.Errorf("hung Redis: %+v %v; want a timely denial with the error", r, err)
	}
}

func TestClusterSlot(t *testing.T) {
	// The Redis Cluster specification's test vector, and keys checked
	// against CLUSTER KEYSLOT.
	for tag, want := range map[string]int{"123456789": 12739, "": 0, "a": 15495, "203.0.113.7": 8508} {
		if got := clusterSlot(tag); got != want {
			t.Errorf("clusterSlot(%q) = %d, want %d", tag, got, want)
		}
	}
}

// The watchdog ends every wait at its deadline: callers queued behind
// pipelines that never return, callers inside them, callers with their own
// shorter deadline, arriving over time. None is left waiting.
func TestWatchdogEndsEveryWait(t *testing.T) {
	stuck := redistest.StuckServer(t)
	c := redis.NewClient(&redis.Options{Addr: stuck, MaxRetries: -1, ReadTimeout: time.Minute, PoolSize: 4})
	defer c.Close()
	lim := newOn(t, c, GCRA, PerSecond(1), WithTimeout(50*time.Millisecond), WithHealthCheck(0, 0))
	const callers = 60
	errs := make(chan error, callers)
	for i := 0; i < callers; i++ {
		go func() {
			ctx := context.Background()
			if i%3 == 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, 20*time.Millisecond)
				defer cancel()
			}
			time.Sleep(time.Duration(i) * time.Millisecond)
			_, err := lim.Allow(ctx, fmt.Sprintf("k%d", i))
			errs <- err
		}()
	}
	guard := time.After(30 * time.Second)
	for i := 0; i < callers; i++ {
		select {
		case err := <-errs:
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("got %v, want DeadlineExceeded", err)
			}
		case <-guard:
			t.Fatalf("%d of %d callers still wait, 30s after their 50ms timeout", callers-i, callers)
		}
	}
	// Calls that no longer wait leave the queue at the watchdog's next
	// round (run here, so as not to depend on when it last ran).
	b := lim.batch
	b.expire()
	b.mu.Lock()
	queued := len(b.pending)
	b.mu.Unlock()
	if queued != 0 {
		t.Errorf("%d calls still queued, none of them waiting", queued)
	}
}

// A request whose cost exceeds its rule's rate never reaches the script
// through the API (ErrCostExceedsLimit), but the window scripts still deny
// it and write nothing, in the integer form (where a window's first request
// is otherwise taken with INCRBY and kept) as in the string form.
func TestWindowsDenyCostAboveTheRate(t *testing.T) {
	c := redistest.Client(t)
	ctx := context.Background()
	loadScript(t, c)
	for _, tc := range []struct {
		alg Algorithm
		l   Limit
	}{
		{FixedWindow, PerHour(10)},
		{FixedWindow, Limit{Rate: 10, Period: 100 * time.Millisecond}},
		{SlidingWindowCounter, PerHour(10)},
	} {
		l := tc.l
		lim := newOn(t, c, tc.alg, l, WithPrefix(fmt.Sprintf("over-%d", time.Now().UnixNano())))
		g := &scriptGroup{calls: []*call{{keys: lim.appendKeys(nil, storedKey("k")), args: appendArgs(nil, true, 11)}}}
		g.build(ctx, lim.batch.ruleArgs)
		reply, err := c.Do(ctx, g.args...).Int64Slice()
		if err != nil {
			t.Fatalf("%s %v: %v", tc.alg, l, err)
		}
		if res, _, err := parseReply(reply, 1, nil); err != nil || res[0] != 0 {
			t.Errorf("%s %v: 11 events answered %v, %v; want denied", tc.alg, l, res, err)
		}
		if n, err := c.Exists(ctx, lim.keys("k")...).Result(); err != nil || n != 0 {
			t.Errorf("%s %v: %d keys written (%v) by a denial", tc.alg, l, n, err)
		}
	}
}
