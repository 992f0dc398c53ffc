package bench

import (
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gin-gonic/gin"
	"github.com/go-chi/chi/v5"
	"github.com/go-redis/redis_rate/v10"
	"github.com/labstack/echo/v4"
	"github.com/redis/go-redis/v9"
	"github.com/ulule/limiter/v3"
	ulgin "github.com/ulule/limiter/v3/drivers/middleware/gin"
	ulstdlib "github.com/ulule/limiter/v3/drivers/middleware/stdlib"

	"github.com/sluicehq/sluice/chilimit"
	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/echolimit"
	"github.com/sluicehq/sluice/ginlimit"
	"github.com/sluicehq/sluice/keyfunc"
	"github.com/sluicehq/sluice/nethttp"
)

var (
	httpSlice  = flag.Duration("http.slice", 400*time.Millisecond, "how long each variant runs in its turn of BenchmarkHTTP")
	httpRounds = flag.Int("http.rounds", 4, "rounds of BenchmarkHTTP: each variant takes one turn per round")
)

// httpConcurrencies are the numbers of concurrent clients of BenchmarkHTTP.
var httpConcurrencies = []int{1, 64}

// apiKeyHeader carries the key every limiter of BenchmarkHTTP limits by.
const apiKeyHeader = "X-Api-Key"

// httpVariants are the variants of every router in BenchmarkHTTP, in the
// order of the table: no limiter, then sluice's middleware (on a default
// client, then on a ContextTimeoutEnabled one), then the peers'.
var httpVariants = []string{"none", "sluice", "sluice_ctxtimeout", "ulule", "redis_rate"}

// routerSetup builds one router's handler for each of httpVariants: a
// trivial handler answering 200 "ok" to GET /, behind the variant's
// middleware. lims holds each library's limiter, on a client of its own.
type routerSetup struct {
	name  string
	build func(variant string, lims *httpLimiters) http.Handler
}

// httpLimiters are what the variants' middlewares are made of. sluiceErrs
// counts the decisions sluice's middleware failed: failing open, it serves
// those requests, so the benchmark fails on them itself.
type httpLimiters struct {
	sluiceRDB  redis.UniversalClient
	sluiceCtx  redis.UniversalClient // ContextTimeoutEnabled
	ulule      *limiter.Limiter
	redisRate  *redis_rate.Limiter
	sluiceErrs atomic.Int64
	firstErr   atomic.Pointer[error]
}

func (l *httpLimiters) reportErr(_ *http.Request, err error) {
	if l.sluiceErrs.Add(1) == 1 {
		l.firstErr.Store(&err)
	}
}

var httpLimit = core.Limit{Rate: rate, Period: time.Second}

// sluiceFor returns the client and timeout of a sluice variant: "sluice" is
// on a default client, as the peers are on default clients;
// "sluice_ctxtimeout" on a ContextTimeoutEnabled client. Both have a 1s
// timeout: no request here comes near it (nor the peers' only bound,
// go-redis's 5s read timeout), and within it a lone request, which can be
// canceled, sends its own decision (see inlineLag in core), as it does with
// sluice's default timeout (100ms), which the slowest requests of a loaded
// machine could pass.
func (l *httpLimiters) sluiceFor(variant string) (redis.UniversalClient, time.Duration) {
	if variant == "sluice_ctxtimeout" {
		return l.sluiceCtx, time.Second
	}
	return l.sluiceRDB, time.Second
}

// okBody is the trivial handler's answer.
var okBody = []byte("ok")

func okHandler(w http.ResponseWriter, _ *http.Request) { w.Write(okBody) }

// httpRouters are the routers of BenchmarkHTTP.
func httpRouters() []routerSetup {
	return []routerSetup{
		{name: "nethttp", build: func(variant string, l *httpLimiters) http.Handler {
			var h http.Handler = http.HandlerFunc(okHandler)
			switch variant {
			case "sluice", "sluice_ctxtimeout":
				rdb, timeout := l.sluiceFor(variant)
				h = nethttp.GCRA(rdb, httpLimit, nethttp.WithKey(keyfunc.Header(apiKeyHeader)),
					nethttp.WithTimeout(timeout), nethttp.WithErrorHandler(l.reportErr))(h)
			case "ulule":
				h = ululeStdlib(l.ulule).Handler(h)
			case "redis_rate":
				h = redisRateMiddleware(l.redisRate)(h)
			}
			mux := http.NewServeMux()
			mux.Handle("GET /{$}", h)
			return mux
		}},
		{name: "chi", build: func(variant string, l *httpLimiters) http.Handler {
			r := chi.NewRouter()
			switch variant {
			case "sluice", "sluice_ctxtimeout":
				rdb, timeout := l.sluiceFor(variant)
				r.Use(chilimit.GCRA(rdb, httpLimit, chilimit.WithKey(keyfunc.Header(apiKeyHeader)),
					chilimit.WithTimeout(timeout), chilimit.WithErrorHandler(l.reportErr)))
			case "ulule":
				r.Use(ululeStdlib(l.ulule).Handler)
			case "redis_rate":
				r.Use(redisRateMiddleware(l.redisRate))
			}
			r.Get("/", okHandler)
			return r
		}},
		{name: "gin", build: func(variant string, l *httpLimiters) http.Handler {
			gin.SetMode(gin.ReleaseMode)
			r := gin.New()
			switch variant {
			case "sluice", "sluice_ctxtimeout":
				rdb, timeout := l.sluiceFor(variant)
				r.Use(ginlimit.GCRA(rdb, httpLimit, ginlimit.WithKey(keyfunc.Header(apiKeyHeader)),
					ginlimit.WithTimeout(timeout), ginlimit.WithErrorHandler(l.reportErr)))
			case "ulule":
				r.Use(ulgin.NewMiddleware(l.ulule, ulgin.WithKeyGetter(func(c *gin.Context) string {
					return c.GetHeader(apiKeyHeader)
				})))
			case "redis_rate":
				r.Use(redisRateGin(l.redisRate))
			}
			r.GET("/", func(c *gin.Context) { c.Data(http.StatusOK, "text/plain; charset=utf-8", okBody) })
			return r
		}},
		{name: "echo", build: func(variant string, l *httpLimiters) http.Handler {
			e := echo.New()
			switch variant {
			case "sluice", "sluice_ctxtimeout":
				rdb, timeout := l.sluiceFor(variant)
				e.Use(echolimit.GCRA(rdb, httpLimit, echolimit.WithKey(keyfunc.Header(apiKeyHeader)),
					echolimit.WithTimeout(timeout), echolimit.WithErrorHandler(l.reportErr)))
			case "ulule":
				// ulule/limiter has no echo middleware: its net/http one,
				// wrapped as echo offers to.
				e.Use(echo.WrapMiddleware(ululeStdlib(l.ulule).Handler))
			case "redis_rate":
				e.Use(redisRateEcho(l.redisRate))
			}
			e.GET("/", func(c echo.Context) error { return c.Blob(http.StatusOK, "text/plain; charset=utf-8", okBody) })
			return e
		}},
	}
}

// ululeStdlib is ulule/limiter's own net/http middleware, keyed by the
// API-key header.
func ululeStdlib(l *limiter.Limiter) *ulstdlib.Middleware {
	return ulstdlib.NewMiddleware(l, ulstdlib.WithKeyGetter(func(r *http.Request) string {
		return r.Header.Get(apiKeyHeader)
	}))
}

// redisRateLimitHTTP is httpLimit in redis_rate's terms.
var redisRateLimitHTTP = redisRateLimit(httpLimit)

// redisRateDecide is the whole of a minimal redis_rate middleware, which
// the library does not ship: the key from the header, Allow, the remaining
// count in X-RateLimit-Remaining; it returns the status to answer with, or
// 0 to serve the request.
func redisRateDecide(l *redis_rate.Limiter, r *http.Request, h http.Header) int {
	res, err := l.Allow(r.Context(), r.Header.Get(apiKeyHeader), redisRateLimitHTTP)
	if err != nil {
		return http.StatusInternalServerError
	}
	h.Set("X-RateLimit-Remaining", strconv.Itoa(res.Remaining))
	if res.Allowed == 0 {
		return http.StatusTooManyRequests
	}
	return 0
}

// redisRateMiddleware is redisRateDecide as net/http middleware.
func redisRateMiddleware(l *redis_rate.Limiter) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if status := redisRateDecide(l, r, w.Header()); status != 0 {
				http.Error(w, http.StatusText(status), status)
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// redisRateGin is redisRateDecide as gin middleware.
func redisRateGin(l *redis_rate.Limiter) gin.HandlerFunc {
	return func(c *gin.Context) {
		if status := redisRateDecide(l, c.Request, c.Writer.Header()); status != 0 {
			c.AbortWithStatus(status)
			return
		}
		c.Next()
	}
}

// redisRateEcho is redisRateDecide as echo middleware.
func redisRateEcho(l *redis_rate.Limiter) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			if status := redisRateDecide(l, c.Request(), c.Response().Header()); status != 0 {
				return c.NoContent(status)
			}
			return next(c)
		}
	}
}

// httpServer is one variant's handler served by net/http on loopback.
type httpServer struct {
	url   string
	srv   *http.Server
	conns atomic.Int64 // connections accepted
}

func startHTTP(b *testing.B, h http.Handler) *httpServer {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	s := &httpServer{url: "http://" + ln.Addr().String() + "/"}
	s.srv = &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(_ net.Conn, st http.ConnState) {
			if st == http.StateNew {
				s.conns.Add(1)
			}
		}}
	go s.srv.Serve(ln)
	return s
}

// httpWorker is one client of the load generator: a keep-alive connection
// of its own (a Transport of its own), and a latency histogram.
type httpWorker struct {
	client *http.Client
	tmpl   *http.Request
	hist   histogram
}

func newHTTPWorker(b *testing.B, url string) *httpWorker {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		b.Fatal(err)
	}
	tr := &http.Transport{
		Proxy:               nil,
		MaxIdleConnsPerHost: 1,
		DisableCompression:  true,
		IdleConnTimeout:     time.Minute,
	}
	return &httpWorker{client: &http.Client{Transport: tr}, tmpl: req}
}

// do sends one request with key in the API-key header and reads the whole
// answer, keeping the connection; any answer but 200 is an error.
func (w *httpWorker) do(key string) error {
	req := *w.tmpl // a shallow copy, as http.Request.WithContext makes
	req.Header = http.Header{apiKeyHeader: {key}}
	resp, err := w.client.Do(&req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("status %d", resp.StatusCode)
	}
	return nil
}

func (w *httpWorker) close() { w.client.CloseIdleConnections() }

// BenchmarkHTTP measures whole HTTP requests through a real net/http.Server
// on loopback, for each router (net/http's ServeMux, chi, gin, echo) with
// no limiter, with sluice's middleware of that router (GCRA; on a default
// client, and on a ContextTimeoutEnabled one: see sluiceFor), with
// ulule/limiter's middleware (its net/http one for ServeMux and chi, its
// gin one for gin, its net/http one wrapped by echo.WrapMiddleware for
// echo) and with a minimal redis_rate middleware written here (the key,
// Allow, X-RateLimit-Remaining, 429 when denied). Every limiter keys by
// the X-Api-Key header, over the keys of every benchmark, at the same
// limit as BenchmarkAllow (never reached), on a go-redis client of its own.
//
// The load generator is c workers, each with a keep-alive connection of
// its own, sending GET / with the header and timing each request from
// before it is sent until its body is read. The variants of a router take
// turns as in BenchmarkTurns: -http.slice each, in an order that rotates,
// -http.rounds rounds, so that the noise of a shared machine falls on all
// of them alike (more rounds when they would last less than -benchtime).
// Any answer but 200, any decision sluice's middleware failed (it fails
// open, so the client would not see it), and connections not kept alive
// (new ones for more than 1% of the requests) fail the benchmark.
//
// It runs its turns once, whatever b.N, and reports for each variant
// <variant>-req/s (requests over its turns' time), <variant>-p50-us and
// <variant>-p99-us (per request), and per request over its turns:
// <variant>-cli-us/req, this process's CPU (the load generator and the
// servers as well as the limiter), <variant>-srv-us/req, redis-server's
// (INFO cpu), and <variant>-calls/req, its script calls (EVALSHA and EVAL,
// INFO commandstats). cmd/report derives the latency each limiter adds
// to "none" and sluice's throughput over the better peer's.
func BenchmarkHTTP(b *testing.B) {
	for _, router := range httpRouters() {
		b.Run(router.name, func(b *testing.B) {
			lims := &httpLimiters{}
			sluiceRDB, ululeRDB, rrRDB := newClient(), newClient(), newClient()
			sluiceCtx := newClientWith(func(o *redis.Options) { o.ContextTimeoutEnabled = true })
			defer sluiceRDB.Close()
			defer sluiceCtx.Close()
			defer ululeRDB.Close()
			defer rrRDB.Close()
			lims.sluiceRDB, lims.sluiceCtx = sluiceRDB, sluiceCtx
			lims.ulule = ululeLimiter(b, ululeRDB, "ulule", httpLimit)
			lims.redisRate = redis_rate.NewLimiter(rrRDB)
			servers := make([]*httpServer, len(httpVariants))
			for i, v := range httpVariants {
				servers[i] = startHTTP(b, router.build(v, lims))
				defer servers[i].srv.Close()
			}
			for _, c := range httpConcurrencies {
				b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
					flush(b, sluiceRDB)
					runHTTPTurns(b, c, servers, lims)
				})
			}
		})
	}
}

// runHTTPTurns is one run of BenchmarkHTTP: c workers per variant, the
// variants in turns.
func runHTTPTurns(b *testing.B, c int, servers []*httpServer, lims *httpLimiters) {
	type variant struct {
		name    string
		workers []*httpWorker
		done    int64
		elapsed time.Duration
		cpu     float64 // this process's CPU seconds in its turns
		server  serverStats
	}
	vs := make([]*variant, len(servers))
	for i, s := range servers {
		v := &variant{name: httpVariants[i]}
		for range c {
			v.workers = append(v.workers, newHTTPWorker(b, s.url))
		}
		defer func() {
			for _, w := range v.workers {
				w.close()
			}
		}()
		// Warm up untimed: open every connection, load the scripts.
		for g, w := range v.workers {
			for k := range 2 {
				if err := w.do(keys[(g*2+k)%numKeys]); err != nil {
					b.Fatalf("%s: warming up: %v", v.name, err)
				}
			}
		}
		vs[i] = v
	}
	errs0 := lims.sluiceErrs.Load()
	conns0 := make([]int64, len(servers))
	for i, s := range servers {
		conns0[i] = s.conns.Load()
	}
	b.ResetTimer()
	for round := range httpRoundsFor(len(vs)) {
		for j := range vs {
			v := vs[(round+j)%len(vs)]
			// Every variant's client reaches the same redis-server, so the
			// deltas of its INFO around a turn are that turn's, whoever's
			// client reads them (with REDIS_URL, other traffic too); the
			// variant without a limiter shows the idle server's share.
			srv0, cpu0 := statsOf(b, lims.sluiceRDB), processCPU()
			n, elapsed := httpTurn(b, v.name, v.workers, *httpSlice)
			srv, cpu1 := statsOf(b, lims.sluiceRDB), processCPU()
			v.cpu += cpu1 - cpu0
			v.server.cpu += srv.cpu - srv0.cpu
			v.server.scriptCalls += srv.scriptCalls - srv0.scriptCalls
			v.done += n
			v.elapsed += elapsed
		}
	}
	b.StopTimer()
	if n := lims.sluiceErrs.Load() - errs0; n > 0 {
		b.Fatalf("sluice: %d decisions failed (served open); the first: %v", n, *lims.firstErr.Load())
	}
	for i, s := range servers {
		// net/http's Transport may dial while the connection it just used
		// goes back to its pool, so a few new connections are normal; more
		// than 1% of the requests would mean the connections were not kept
		// alive, and dialing was measured.
		n := s.conns.Load() - conns0[i]
		if n*100 > vs[i].done {
			b.Fatalf("%s: %d connections opened for %d requests: not kept alive", vs[i].name, n, vs[i].done)
		} else if n > 0 {
			b.Logf("%s: %d connections opened during the turns, beyond the %d warmed up", vs[i].name, n, c)
		}
	}
	for _, v := range vs {
		var all histogram
		for _, w := range v.workers {
			all.merge(&w.hist)
		}
		b.ReportMetric(float64(v.done)/v.elapsed.Seconds(), v.name+"-req/s")
		b.ReportMetric(all.quantile(0.50).Seconds()*1e6, v.name+"-p50-us")
		b.ReportMetric(all.quantile(0.99).Seconds()*1e6, v.name+"-p99-us")
		if v.done > 0 {
			n := float64(v.done)
			b.ReportMetric(v.cpu/n*1e6, v.name+"-cli-us/req")
			b.ReportMetric(v.server.cpu/n*1e6, v.name+"-srv-us/req")
			b.ReportMetric(float64(v.server.scriptCalls)/n, v.name+"-calls/req")
		}
	}
}

// httpRoundsFor returns how many rounds of turns of variants variants
// BenchmarkHTTP runs: -http.rounds, or more when they would take less than
// -test.benchtime. The turns run once whatever b.N, so a run shorter than
// -benchtime would make the testing package call the benchmark again and
// again with a larger b.N, each call as long as the first.
func httpRoundsFor(variants int) int {
	rounds := max(*httpRounds, 1)
	round := time.Duration(variants) * max(*httpSlice, time.Millisecond)
	if f := flag.Lookup("test.benchtime"); f != nil {
		if d, err := time.ParseDuration(f.Value.String()); err == nil && time.Duration(rounds)*round < d {
			rounds = int((d + round - 1) / round)
		}
	}
	return rounds
}

// httpTurn runs one variant's workers, one goroutine each, for d, each
// request with the next of the keys, and returns how many requests they
// made and how long they took (to the end of the last one). Any failed
// request fails the benchmark.
func httpTurn(b *testing.B, name string, workers []*httpWorker, d time.Duration) (int64, time.Duration) {
	var (
		next, failed atomic.Int64
		first        atomic.Pointer[error]
		stop         atomic.Bool
		wg           sync.WaitGroup
	)
	start := time.Now()
	timer := time.AfterFunc(d, func() { stop.Store(true) })
	defer timer.Stop()
	wg.Add(len(workers))
	for _, w := range workers {
		go func() {
			defer wg.Done()
			t0 := time.Now()
			for !stop.Load() {
				i := next.Add(1)
				err := w.do(keys[i%numKeys])
				t1 := time.Now()
				w.hist.record(t1.Sub(t0))
				t0 = t1
				if err != nil && failed.Add(1) == 1 {
					first.Store(&err)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if n := failed.Load(); n > 0 {
		b.Fatalf("%s: %d of %d requests failed; the first: %v", name, n, next.Load(), *first.Load())
	}
	return next.Load(), elapsed
}
