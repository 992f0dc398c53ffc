// Package soak_test runs HTTP load through every middleware while Redis is
// killed and restarted twice, and reports what the clients saw.
//
// make test runs a short version (a few seconds) and asserts outcomes: every
// request answered, no 5xx (the middlewares fail open), no over-admission,
// limiting back after each restart. make soak runs it for a minute and
// prints the table:
//
//	go test -run TestSoak -count=1 -v ./internal/soak -args -soak=60s
package soak_test

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/chilimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/echolimit"
	"github.com/sluicehq/sluice/ginlimit"
	"github.com/sluicehq/sluice/internal/redistest"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/nethttp"
)

var soakFor = flag.Duration("soak", 6*time.Second, "how long the soak runs")

func TestMain(m *testing.M) { redistest.Main(m) }

// The limit every middleware enforces per client: GCRA, 50 per second.
var limit = core.PerSecond(50)

const (
	clients = 5 // per middleware, told apart by X-Client
	workers = 4 // per middleware
	pause   = 2 * time.Millisecond
)

type server struct {
	name string
	h    http.Handler
}

func servers(rdb redis.UniversalClient, onErr func(*http.Request, error)) []server {
	key := keyfunc.Header("X-Client")
	ok := func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) }

	mux := http.NewServeMux()
	mux.HandleFunc("GET /", ok)
	nh := nethttp.GCRA(rdb, limit, nethttp.WithKey(key), nethttp.WithPrefix("soak-nethttp"), nethttp.WithErrorHandler(onErr))(mux)

	cr := chi.NewRouter()
	cr.Use(chilimit.GCRA(rdb, limit, chilimit.WithKey(key), chilimit.WithPrefix("soak-chi"), chilimit.WithErrorHandler(onErr)))
	cr.Get("/", ok)

	gin.SetMode(gin.ReleaseMode)
	gr := gin.New()
	gr.Use(ginlimit.GCRA(rdb, limit, ginlimit.WithKey(key), ginlimit.WithPrefix("soak-gin"), ginlimit.WithErrorHandler(onErr)))
	gr.GET("/", func(c *gin.Context) { c.String(200, "ok") })

	er := echo.New()
	er.Use(echolimit.GCRA(rdb, limit, echolimit.WithKey(key), echolimit.WithPrefix("soak-echo"), echolimit.WithErrorHandler(onErr)))
	er.GET("/", func(c echo.Context) error { return c.String(200, "ok") })

	return []server{{"nethttp", nh}, {"chi", cr}, {"gin", gr}, {"echo", er}}
}

// sample is one request as the client saw it.
type sample struct {
	at      time.Time // when it was sent
	status  int       // 0: no answer
	limited bool      // carried RateLimit headers: Redis decided
	latency time.Duration
}

// phase is a stretch of time: Redis up (an epoch of one state) or down.
type phase struct {
	up         bool
	start, end time.Time
}

func TestSoak(t *testing.T) {
	srv := redistest.StartT(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()

	var errCount atomic.Int64
	list := servers(rdb, func(*http.Request, error) { errCount.Add(1) })
	d := *soakFor
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()

	// Two outages: down from 25% to 35% and from 60% to 70% of the run.
	start := time.Now()
	var phases []phase
	var phasesMu sync.Mutex
	mark := func(up bool) {
		phasesMu.Lock()
		defer phasesMu.Unlock()
		now := time.Now()
		if len(phases) > 0 {
			phases[len(phases)-1].end = now
		}
		phases = append(phases, phase{up: up, start: now})
	}
	mark(true)
	chaos := make(chan error, 1)
	go func() {
		for _, at := range []struct {
			frac float64
			up   bool
		}{{0.25, false}, {0.35, true}, {0.60, false}, {0.70, true}} {
			time.Sleep(time.Until(start.Add(time.Duration(at.frac * float64(d)))))
			if at.up {
				if err := srv.Restart(); err != nil {
					chaos <- err
					return
				}
			} else {
				srv.Stop()
			}
			mark(at.up)
		}
		chaos <- nil
	}()

	results := make([][][]sample, len(list)) // [server][client] samples
	var wg sync.WaitGroup
	for si, s := range list {
		hs := httptest.NewServer(s.h)
		defer hs.Close()
		results[si] = make([][]sample, clients)
		var mu sync.Mutex
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				hc := &http.Client{Timeout: 10 * time.Second}
				for i := w; ctx.Err() == nil; i += workers {
					c := i % clients
					req, _ := http.NewRequest("GET", hs.URL+"/", nil)
					req.Header.Set("X-Client", fmt.Sprint("client-", c))
					sent := time.Now()
					res, err := hc.Do(req)
					smp := sample{at: sent, latency: time.Since(sent)}
					if err == nil {
						smp.status = res.StatusCode
						smp.limited = res.Header.Get("RateLimit") != ""
						res.Body.Close()
					}
					mu.Lock()
					results[si][c] = append(results[si][c], smp)
					mu.Unlock()
					time.Sleep(pause)
				}
			}(w)
		}
	}
	wg.Wait()
	if err := <-chaos; err != nil {
		t.Fatalf("restarting Redis: %v", err)
	}
	phasesMu.Lock()
	phases[len(phases)-1].end = time.Now()
	phasesMu.Unlock()

	var report strings.Builder
	fmt.Fprintf(&report, "soak: %s, %d middlewares × %d workers × %d clients, limit %s per client, Redis killed twice\n\n", d, len(list), workers, clients, limit)
	fmt.Fprintf(&report, "| middleware | requests | answered | 5xx | served unlimited (fail open) | over-admissions | worst latency | time to recover |\n")
	fmt.Fprintf(&report, "| --- | --- | --- | --- | --- | --- | --- | --- |\n")
	for si, s := range list {
		var requests, answered, fivexx, unlimited, over int
		var worst, recover time.Duration
		for _, samples := range results[si] {
			for _, smp := range samples {
				requests++
				if smp.status != 0 {
					answered++
				}
				if smp.status >= 500 {
					fivexx++
				}
				if smp.status == 200 && !smp.limited {
					unlimited++
				}
				worst = max(worst, smp.latency)
			}
			over += overAdmissions(samples, phases)
		}
		// Time to recover: from each restart to the first answer Redis decided.
		recovered := true
		for pi, p := range phases {
			if !p.up || pi == 0 {
				continue
			}
			first := time.Time{}
			for _, samples := range results[si] {
				for _, smp := range samples {
					if smp.limited && !smp.at.Before(p.start) && (first.IsZero() || smp.at.Before(first)) {
						first = smp.at
					}
				}
			}
			if first.IsZero() {
				recovered = false
				continue
			}
			recover = max(recover, first.Sub(p.start))
		}
		rec := recover.Round(time.Millisecond).String()
		if !recovered {
			rec = "never"
			t.Errorf("%s: limiting did not resume after a restart", s.name)
		}
		fmt.Fprintf(&report, "| %s | %d | %d | %d | %d | %d | %s | %s |\n", s.name, requests, answered, fivexx, unlimited, over, worst.Round(time.Millisecond), rec)
		if answered != requests {
			t.Errorf("%s: %d of %d requests unanswered", s.name, requests-answered, requests)
		}
		if fivexx != 0 {
			t.Errorf("%s: %d 5xx answers; the middleware fails open", s.name, fivexx)
		}
		if over != 0 {
			t.Errorf("%s: %d over-admissions", s.name, over)
		}
	}
	fmt.Fprintf(&report, "\nerrors reported to the error hooks: %d\n", errCount.Load())
	t.Log("\n" + report.String())
}

// overAdmissions counts, for one client, admissions Redis decided beyond
// what GCRA can admit within each stretch of Redis uptime: Burst plus Rate
// per second of the stretch. (A restart empties Redis, so each stretch
// starts afresh; fail-open answers during outages are not decisions.)
func overAdmissions(samples []sample, phases []phase) int {
	over := 0
	for _, p := range phases {
		if !p.up {
			continue
		}
		admitted := 0
		for _, smp := range samples {
			if smp.status == 200 && smp.limited && !smp.at.Before(p.start) && smp.at.Before(p.end) {
				admitted++
			}
		}
		// Requests sent just before the stretch ends may be decided up to
		// their latency later; a second of slack covers that generously.
		secs := p.end.Sub(p.start).Seconds() + 1
		bound := limit.Rate + int(float64(limit.Rate)*secs)
		over += max(0, admitted-bound)
	}
	return over
}
