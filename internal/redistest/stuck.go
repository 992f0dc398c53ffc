package redistest

import (
	"net"
	"os"
	"testing"
)

// StuckServer returns the address of a TCP server that accepts connections
// and never answers: a Redis that hangs. It closes when t ends.
func StuckServer(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // held open, never read
		}
	}()
	t.Cleanup(func() {
		l.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return l.Addr().String()
}

// Required reports whether tests that need Redis must fail rather than skip
// when it is missing: under CI=true.
func Required() bool { return os.Getenv("CI") == "true" }
