// Package example holds what the observability examples share and is not
// about metrics: the flags, a Redis with no setup (the server at -redis or
// REDIS_URL, else an embedded miniredis), and serving until interrupted.
//
// It is a copy of the main module's examples/internal/example, which this
// module cannot import (an internal package of another module).
package example

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/alicebob/miniredis/v2"
	"github.com/redis/go-redis/v9"
)

// Setup parses the flags -addr (default 127.0.0.1:8080) and -redis
// (default $REDIS_URL), with any flags the caller defined before, and
// returns the listen address and a Redis client. Call the returned function
// to close the client (and the embedded Redis).
func Setup() (addr string, rdb *redis.Client, closeAll func()) {
	flag.StringVar(&addr, "addr", "127.0.0.1:8080", "listen address")
	url := flag.String("redis", os.Getenv("REDIS_URL"), "Redis URL, such as redis://localhost:6379/0 (default: $REDIS_URL, else an embedded miniredis)")
	flag.Parse()
	rdb, where, closeAll, err := Redis(*url)
	if err != nil {
		log.Fatal(err)
	}
	log.Printf("using %s", where)
	return addr, rdb, closeAll
}

// Redis returns a client of the Redis at url (redis://host:port/db, or
// rediss:// for TLS) or, when url is empty, of an in-process miniredis; a
// description of the server for a log line; and a function that closes both.
//
// The embedded miniredis keeps its keys' TTLs on the wall clock
// (ClockTTL), so counters expire as they would in Redis; its TIME command,
// which the limiter's scripts read, is the real clock too.
func Redis(url string) (rdb *redis.Client, where string, closeAll func(), err error) {
	if url != "" {
		opt, err := redis.ParseURL(url)
		if err != nil {
			return nil, "", nil, fmt.Errorf("redis URL: %w", err)
		}
		// Let a decision's deadline stop the command itself, not only the wait.
		opt.ContextTimeoutEnabled = true
		rdb := redis.NewClient(opt)
		return rdb, "the Redis at " + opt.Addr, func() { rdb.Close() }, nil
	}
	m := miniredis.NewMiniRedis()
	m.ClockTTL(true)
	if err := m.Start(); err != nil {
		return nil, "", nil, fmt.Errorf("embedded miniredis: %w", err)
	}
	rdb = redis.NewClient(&redis.Options{Addr: m.Addr(), ContextTimeoutEnabled: true})
	return rdb, "an embedded miniredis (-redis or REDIS_URL selects a real Redis)", func() {
		rdb.Close()
		m.Close()
	}, nil
}

// Serve serves h on addr until SIGINT or SIGTERM, then shuts down. It logs
// "listening on http://<addr>" once the listener is open.
func Serve(addr string, h http.Handler) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		log.Fatal(err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(shutdown)
	}()
	log.Printf("listening on http://%s", l.Addr())
	if err := srv.Serve(l); !errors.Is(err, http.ErrServerClosed) {
		log.Fatal(err)
	}
}
