// Package bench measures sluice against its peers: go-redis/redis_rate v10,
// ulule/limiter v3 and throttled v2, on the same real redis-server, with the
// same go-redis client options for every library.
//
// It is a module of its own so that the main module never depends on the
// peers. Everything lives in the tests:
//
//   - BenchmarkAllow: one decision per call for every library, at 1, 16, 64
//     and 256 concurrent callers, reporting decisions/s, p50 and p99 latency
//     and allocations per decision.
//   - BenchmarkTurns: throughput at 64 callers with the libraries in turns
//     of half a second, in an order that rotates, so that all meet the same
//     moments of a shared machine; the throughput goal is read from it. It
//     also runs the peers deciding sluice_policy's two limits with two
//     limiters (twoLimitPeers).
//   - BenchmarkLatency: one caller, the libraries in turns of 100
//     decisions; the latency goal is read from it.
//   - BenchmarkPipelinedEvalSha: the reference for sluice's batcher, pipelines
//     of a one-line script: what pipelining can reach when the script costs
//     nothing.
//   - BenchmarkMiddleware: the nethttp middleware path around sluice GCRA.
//   - BenchmarkHTTP: whole GET requests through a real net/http.Server on
//     loopback for each router (ServeMux, chi, gin, echo): no limiter,
//     sluice's middleware, ulule/limiter's and a minimal redis_rate one,
//     at 1 and 64 keep-alive clients, the variants in turns.
//   - BenchmarkCluster: sluice GCRA and redis_rate on a Redis Cluster of one
//     and of three masters started on loopback.
//   - TestMemoryPerKey: Redis MEMORY USAGE of each algorithm's key.
//
// "make bench" at the top of the repository runs them all and feeds the
// output to ./cmd/report, which prints the tables and ratios, writes
// chart.svg and chart-http.svg and refreshes the results section of BENCHMARKS.md. The tests
// start their own redis-server on a free loopback port, or use REDIS_URL
// when it is set (then they never flush it: keys are left to expire).
package bench
