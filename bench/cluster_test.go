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
		for _, lib := range libs {
			b.Run(lib.name, func(b *testing.B) {
				rdb := newClient()
				defer rdb.Close()
				newDecider := lib.setup(b, rdb)
				for _, c := range []int{64, 256} {
					b.Run(fmt.Sprintf("c=%d", c), func(b *testing.B) {
						flush(b, rdb)
						runConcurrent(b, c, rdb, newDecider)
					})
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
