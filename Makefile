# sluice: make test runs everything CI runs, on a fresh machine too.
#
# The tests start their own redis-server processes on free loopback ports
# (internal/redistest) and stop them when they end; this file only makes
# sure the binaries are there. Set REDIS_URL to use a server of your own.

GO        ?= go
FUZZTIME  ?= 30s
REDIS_PKGS = redis-server redis-tools

.PHONY: test redis vet observability fuzz soak bench

test: redis vet observability
	@# allocation budgets first: counts mean nothing under -race
	$(GO) test -count=1 -run 'Alloc' ./...
	$(GO) test -race -count=1 ./...

vet:
	@test -z "$$(gofmt -l .)" || { echo "gofmt needed:"; gofmt -l .; exit 1; }
	$(GO) vet ./...

# observability vets and tests examples/observability, a module of its own
# so that Prometheus and OpenTelemetry stay out of the main module's go.mod.
# Its tests run on miniredis: no redis-server needed.
observability:
	cd examples/observability && $(GO) vet ./... && $(GO) test -race -count=1 ./...

# redis installs redis-server and redis-cli with apt-get when missing.
redis:
	@if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then \
		echo "redis: $$(redis-server --version | cut -d' ' -f3)"; \
	elif command -v apt-get >/dev/null 2>&1; then \
		echo "redis: installing $(REDIS_PKGS)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $(REDIS_PKGS) >/dev/null && \
		redis-server --version; \
	else \
		echo "redis: no redis-server and no apt-get; install Redis or set REDIS_URL"; \
		[ "$$CI" != true ]; \
	fi

# fuzz runs every fuzz target for FUZZTIME each (go test allows one at a
# time); minimizing a new input is capped so short runs still fuzz. The
# committed corpora under testdata/fuzz also run in make test.
fuzz:
	@for pkg in $$($(GO) list ./...); do \
		dir=$$($(GO) list -f '{{.Dir}}' $$pkg); \
		for f in $$(grep -ho '^func Fuzz[A-Za-z0-9_]*' $$dir/*_test.go 2>/dev/null | cut -d' ' -f2); do \
			echo "== $$pkg $$f"; \
			$(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) -fuzzminimizetime=5s $$pkg || exit 1; \
		done; \
	done

# bench compares sluice with redis_rate, ulule/limiter and throttled (bench/,
# a module of its own) on a redis-server and Redis Clusters that the
# benchmarks start themselves (about 6 minutes on 2 cores), and whole HTTP
# requests through each router's middleware (BenchmarkHTTP, about a minute;
# BENCH=BenchmarkHTTP runs it alone). It prints the tables and ratios and
# writes bench/results.txt, bench/chart.svg, bench/chart-http.svg and the
# results section of BENCHMARKS.md. BENCH_QUICK=1 runs only sluice GCRA (on
# both clients), redis_rate and ulule at c=1 and c=64, and BenchmarkLatency
# (one caller, the same libraries in turns), 1s each;
# BENCH=<regexp> and BENCHTIME=<duration> choose other runs. Those only
# print, into bench/results-quick.txt. BENCHCOUNT=<n> runs each benchmark n
# times and the report takes the medians (a full run has BenchmarkLatency
# five times). BENCHFLAGS passes flags to the
# test binary: -redis.ctxtimeout (ContextTimeoutEnabled on every client),
# -sluice.timeout=<duration>, -latency.turn=<n> (decisions in a row per
# library in BenchmarkLatency; 1 alternates every decision), -http.slice
# and -http.rounds (BenchmarkHTTP's turns).
bench: redis
	cd bench && { $(GO) test -run '$(if $(BENCH_QUICK)$(BENCH),^$$,^TestMemoryPerKey$$)' \
		-bench '$(or $(BENCH),$(if $(BENCH_QUICK),^BenchmarkAllow$$/^(sluice_gcra|sluice_gcra_ctxtimeout|redis_rate|ulule)$$/^c=(1|64)$$,.))' \
		-benchtime $(or $(BENCHTIME),$(if $(BENCH_QUICK),1s,2s)) -count $(or $(BENCHCOUNT),1) -timeout 60m . $(BENCHFLAGS); \
		$(if $(BENCH_QUICK),$(GO) test -run '^$$' -bench '^BenchmarkLatency$$' -benchtime 2s -count $(or $(BENCHCOUNT),1) . $(BENCHFLAGS);) \
		$(if $(BENCH_QUICK)$(BENCH),,$(GO) test -run '^$$' -bench '^BenchmarkLatency$$' -benchtime 2s -count 4 . $(BENCHFLAGS);) } 2>&1 \
		| tee $(if $(BENCH_QUICK)$(BENCH),results-quick.txt,results.txt)
	cd bench && $(GO) run ./cmd/report -in $(if $(BENCH_QUICK)$(BENCH),results-quick.txt,results.txt) \
		$(if $(BENCH_QUICK)$(BENCH),,-svg chart.svg -httpsvg chart-http.svg -md ../BENCHMARKS.md)

# soak runs HTTP load through every middleware for a minute while Redis is
# killed and restarted twice, and prints what the clients saw. make test runs
# a six-second version of it.
soak: redis
	$(GO) test -run TestSoak -count=1 -v ./internal/soak -args -soak=60s
