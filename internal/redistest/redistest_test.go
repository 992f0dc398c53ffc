package redistest

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A refused address refuses connections, and no listener can take its
// port while the test runs: not even one that asks to reuse the address,
// as redis-server does.
func TestRefusedAddr(t *testing.T) {
	addr := RefusedAddr(t)
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			t.Fatalf("dial %s: connected, want refused", addr)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial %s: %v, want connection refused", addr, err)
		}
	}
	l, err := net.Listen("tcp", addr) // Go sets SO_REUSEADDR on listeners
	if err == nil {
		l.Close()
		t.Fatalf("listen %s: a listener took the port", addr)
	}
	if !errors.Is(err, syscall.EADDRINUSE) {
		t.Fatalf("listen %s: %v, want address in use", addr, err)
	}
}

// A server is taken for the one started only when it is that process: a
// port handed to two servers at once is answered by the one that took it.
func TestWaitServesTellsServersApart(t *testing.T) {
	srv := StartT(t)
	srv.mu.Lock()
	pid := srv.cmd.Process.Pid
	srv.mu.Unlock()
	if err := waitServes(srv.Addr, pid, 5*time.Second); err != nil {
		t.Fatalf("its own server: %v", err)
	}
	err := waitServes(srv.Addr, pid+1_000_000, 5*time.Second)
	if err == nil || !strings.Contains(err.Error(), "served by process "+strconv.Itoa(pid)) {
		t.Fatalf("another process's server: %v, want it named as served by process %d", err, pid)
	}
}
