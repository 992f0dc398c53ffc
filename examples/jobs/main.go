// Command jobs throttles background work across instances with
// core.Limiter.Wait: several workers, standing for several instances of a
// service, take jobs from one queue and together process at most 3 jobs per
// period (an hour by default).
//
//	go run ./examples/jobs -period 3s
//
// Each worker calls limiter.Wait before a job. The limit lives in Redis, so
// it holds across processes as it holds across these goroutines: start the
// command twice against one Redis (-redis redis://localhost:6379) and the
// two share the 3 jobs per period. SlidingWindowLog makes the bound exact:
// never more than 3 jobs in any period-long window.
package main

import (
	"context"
	"flag"
	"log"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/core"
	"github.com/sluicehq/sluice/examples/internal/example"
)

func main() {
	workers := flag.Int("workers", 3, "number of workers (instances)")
	jobs := flag.Int("jobs", 9, "number of jobs in the queue")
	period := flag.Duration("period", time.Hour, "at most 3 jobs per period")
	url := flag.String("redis", os.Getenv("REDIS_URL"), "Redis URL (default: $REDIS_URL, else an embedded miniredis)")
	flag.Parse()

	rdb, where, closeRedis, err := example.Redis(*url)
	if err != nil {
		log.Fatal(err)
	}
	defer closeRedis()
	log.Printf("using %s; %d jobs, %d workers, at most 3 jobs per %s", where, *jobs, *workers, *period)

	limiter, err := core.New(rdb, core.SlidingWindowLog, core.Limit{Rate: 3, Period: *period})
	if err != nil {
		log.Fatal(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	queue := make(chan int, *jobs)
	for i := 1; i <= *jobs; i++ {
		queue <- i
	}
	close(queue)

	start := time.Now()
	var done atomic.Int32
	var wg sync.WaitGroup
	for w := 1; w <= *workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for job := range queue {
				// Every instance waits on the same key: one shared budget.
				if err := limiter.Wait(ctx, "jobs"); err != nil {
					log.Printf("worker %d: job %d not run: %v", w, job, err)
					return
				}
				log.Printf("worker %d: job %d at +%s", w, job, time.Since(start).Round(10*time.Millisecond))
				done.Add(1)
			}
		}()
	}
	wg.Wait()
	if int(done.Load()) < *jobs {
		log.Fatalf("%d of %d jobs done", done.Load(), *jobs)
	}
	log.Printf("queue done in %s", time.Since(start).Round(10*time.Millisecond))
}
