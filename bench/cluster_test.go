package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/core"
)

// BenchmarkCluster runs sluice GCRA, and redis_rate for reference, on a
// Redis Cluster of one and of three masters (no replicas) started on
// loopback, through redis.NewClusterClient, and first on the single server
// of the other benchmarks (server=single), for the ratio of a cluster of
// one master to one server in the same run. Keys spread over all slots
// (sluice hashes on the user key, redis_rate on the whole key), so three
// masters share the work; on a machine with few cores the client and the
// servers compete for them.
//
// On each server and at each concurrency the libraries take turns, as in
// BenchmarkTurns (-turns.slice each, -turns.rounds rounds), each on a
// client of its own. Run one after the other, the ratio of the two on
// three masters moved from 2.6× to 3.3× between runs of one build. It
// reports, for each library, <library>-decisions/s, -calls/op (script
// calls, EVALSHA and EVAL in INFO commandstats of every master, per
// decision), -srv-us/op (the masters' CPU per decision, together) and
// -cli-us/op.
func BenchmarkCluster(b *testing.B) {
	if !target.owned {
		b.Skip("REDIS_URL is set: the cluster benchmark starts its own servers only when the others do")
	}
	libs := []library{
		{name: "sluice_gcra", setup: func(b *testing.B, rdb redis.UniversalClient) func() decider {
			return sluiceDecider(b, rdb, []core.Rule{{Name: "gcra", Algorithm: core.GCRA, Limit: core.Limit{Rate: rate, Period: time.Second}}})
		}},
		{name: "redis_rate", setup: redisRateDecider},
	}
	run := func(b *testing.B, newClient func() redis.UniversalClient) {
		rdbs := make([]redis.UniversalClient, len(libs))
		for i := range libs {
			rdbs[i] = newClient()
			defer rdbs[i].Close()
		}
		stats := func() serverStats { return statsOf(b, rdbs[0]) }
		for _, c := range []int{64, 256} {
			b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
				flush(b, rdbs[0])
				takers := make([]*turnTaker, len(libs))
				for i, lib := range libs {
					takers[i] = newTurnTaker(b, lib.name, c, lib.setup(b, rdbs[i]))
				}
				takeTurns(b, takers, stats)
				for _, e := range takers {
					e.report(b, true)
				}
			})
		}
	}
	b.Run("server=single", func(b *testing.B) {
		run(b, func() redis.UniversalClient { return newClient() })
	})
	for _, masters := range []int{1, 3} {
		b.Run(fmt.Sprintf("masters=%d", masters), func(b *testing.B) {
			cl, err := startCluster(masters)
			if err != nil {
				b.Fatal(err)
			}
			defer cl.stop()
			run(b, func() redis.UniversalClient { return redis.NewClusterClient(clusterOptions(cl.addrs())) })
		})
	}
}
