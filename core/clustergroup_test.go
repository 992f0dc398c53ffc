package core_test

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/internal/redistest"
)

// testClusterOneCallPerMaster decides 2,000 user keys, spread over every
// slot range, from 64 goroutines at once, with one rule and with a policy
// of three: the decisions bound for one master share script calls whatever
// their slots, so the masters run far fewer scripts than there are
// decisions (counted with INFO commandstats on every master), and each key
// still admits exactly what it was asked for, in order.
func testClusterOneCallPerMaster(t *testing.T, cl *redistest.Cluster) {
	cc := cl.Client(t)
	ctx := context.Background()
	const users, perUser, goroutines = 2000, 5, 64
	cases := []struct {
		name  string
		rules []core.Rule
		limit int
	}{
		{"gcra", []core.Rule{{Name: "gcra", Algorithm: core.GCRA, Limit: core.PerDay(1000)}}, 1000},
		{"policy", clusterPolicy, 4},
	}
	clusterAvoidDayEdge(t, cc)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			prefix := fmt.Sprintf("group-%s-%d", tc.name, time.Now().UnixNano())
			lim, err := core.NewPolicy(cc, tc.rules, core.WithPrefix(prefix))
			if err != nil {
				t.Fatal(err)
			}
			defer lim.Close()
			before := scriptCalls(t, cl)
			var wg sync.WaitGroup
			work := make(chan int)
			counts := make([]int, users)
			var mu sync.Mutex
			for g := 0; g < goroutines; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for u := range work {
						r, err := lim.Allow(ctx, "user-"+strconv.Itoa(u))
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						counts[u]++
						want := counts[u] <= tc.limit
						mu.Unlock()
						if r.Allowed != want {
							t.Errorf("user %d, request %d: admitted %v", u, counts[u], r.Allowed)
						}
					}
				}()
			}
			for i := 0; i < perUser; i++ {
				for u := 0; u < users; u++ {
					work <- u
				}
			}
			close(work)
			wg.Wait()
			calls := scriptCalls(t, cl) - before
			decisions := users * perUser
			t.Logf("%d script calls for %d decisions: %.3f per decision", calls, decisions, float64(calls)/float64(decisions))
			if calls*4 > int64(decisions) {
				t.Errorf("%d script calls for %d decisions, want at most one per 4", calls, decisions)
			}
			for u := 0; u < users; u += 97 {
				r, err := lim.Peek(ctx, "user-"+strconv.Itoa(u))
				if want := max(tc.limit-perUser, 0); err != nil || r.Remaining != want {
					t.Errorf("user %d after %d requests: %+v, %v; want %d remaining", u, perUser, r, err, want)
				}
			}
		})
	}
}

// scriptCalls returns how many scripts (EVALSHA and EVAL) the masters of
// cl have run.
func scriptCalls(t *testing.T, cl *redistest.Cluster) int64 {
	t.Helper()
	ctx := context.Background()
	masters, err := cl.Masters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, addr := range masters {
		info, err := cl.Node(addr).Info(ctx, "commandstats").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, cmd := range []string{"cmdstat_evalsha:", "cmdstat_eval:"} {
			if _, rest, ok := strings.Cut(info, cmd); ok {
				calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
				c, err := strconv.ParseInt(calls, 10, 64)
				if err != nil {
					t.Fatalf("%s commandstats %q: %v", addr, rest, err)
				}
				n += c
			}
		}
	}
	return n
}

// testClusterFlushersStayFew decides keys of every master from 64
// goroutines for a while: each batch's shares go to flushers of their own
// (one per master), which must be the flushers already parked, not new
// goroutines that then park and stay. The goroutines beside the callers
// stay a few dozen at most, and the flushers end once the load stops.
func testClusterFlushersStayFew(t *testing.T, cl *redistest.Cluster) {
	cc := cl.Client(t)
	ctx := context.Background()
	lim, err := core.New(cc, core.GCRA, core.PerSecond(1_000_000), core.WithPrefix(fmt.Sprintf("few-%d", time.Now().UnixNano())))
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	const goroutines = 64
	before := runtime.NumGoroutine()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var decided atomic.Int64
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := g; ; i += goroutines {
				select {
				case <-stop:
					return
				default:
				}
				if _, err := lim.Allow(ctx, "user-"+strconv.Itoa(i%5000)); err == nil {
					decided.Add(1)
				}
			}
		}(g)
	}
	most := 0
	for i := 0; i < 15; i++ {
		time.Sleep(100 * time.Millisecond)
		most = max(most, runtime.NumGoroutine()-before-goroutines)
	}
	close(stop)
	wg.Wait()
	t.Logf("%d decisions; at most %d goroutines beside the callers", decided.Load(), most)
	if most > 100 {
		t.Errorf("%d goroutines beside the %d callers during the load, want a few dozen at most", most, goroutines)
	}
	// (a few of go-redis's own, and of other tests', may come and go)
	const slack = 4
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before+slack && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := runtime.NumGoroutine() - before; n > slack {
		t.Errorf("%d goroutines left once the load stopped", n)
	}
}
