package redistest

import (
	"bytes"
	"context"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy in front of a Redis server that injects faults on
// demand, for tests of what a client does when the network misbehaves:
// replies lost after the command ran, connections reset, connections that
// silently stop forwarding (a NAT or load balancer that dropped its state),
// slow replies. Faults can be switched at any time; they apply to the
// requests and connections that follow (Hang: to those already open).
//
// A request is one chunk read from the client: go-redis writes a command,
// or a whole pipeline, in one write. Clients dial Addr, which forwards to
// one server, or connect through Dial, to any.
type Proxy struct {
	// Addr is the address clients dial.
	Addr string

	target string
	l      net.Listener

	mu       sync.Mutex
	conns    []*proxyConn
	lost     int      // requests whose reply is still to be lost
	lostHow  LostMode // how
	lostWhen []byte   // only requests holding this (lower case); nil: any
	delay    time.Duration

	dropped atomic.Int64 // replies lost so far
}

// LostMode says what the proxy does to a connection whose reply it lost.
type LostMode int

const (
	// LostClose closes the client's connection once the reply has come
	// back from Redis: the client reads EOF.
	LostClose LostMode = iota
	// LostReset resets the client's connection (RST) once the reply has
	// come back from Redis: the client reads "connection reset by peer".
	LostReset
	// LostHang keeps the client's connection open and forwards nothing on
	// it any more, in either direction: the client reads until its own
	// timeout.
	LostHang
)

// proxyConn is one client connection and its connection to Redis.
type proxyConn struct {
	client, server net.Conn
	hung           atomic.Bool  // forwards nothing, either way
	losing         atomic.Int32 // a LostMode+1 for the reply on its way; 0: none
}

// StartProxy starts a Proxy to target (host:port), stopped when tb ends.
func StartProxy(tb testing.TB, target string) *Proxy {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	p := &Proxy{Addr: l.Addr().String(), target: target, l: l}
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.accept()
	}()
	tb.Cleanup(func() {
		l.Close()
		<-done
		p.mu.Lock()
		defer p.mu.Unlock()
		for _, c := range p.conns {
			c.client.Close()
			c.server.Close()
		}
	})
	return p
}

func (p *Proxy) accept() {
	for {
		cl, err := p.l.Accept()
		if err != nil {
			return
		}
		srv, err := net.Dial("tcp", p.target)
		if err != nil {
			cl.Close()
			continue
		}
		p.serve(cl, srv)
	}
}

// serve forwards between a client's connection and its connection to Redis.
func (p *Proxy) serve(cl, srv net.Conn) {
	c := &proxyConn{client: cl, server: srv}
	p.mu.Lock()
	p.conns = append(p.conns, c)
	p.mu.Unlock()
	go p.requests(c)
	go p.replies(c)
}

// Dial is a go-redis Dialer (Options.Dialer, ClusterOptions.Dialer) that
// connects to addr, whichever node it is, through the proxy: every
// connection of a cluster client then meets the proxy's faults. The
// client's side is an in-memory pipe (net.Pipe), so LostReset closes it
// as LostClose does.
func (p *Proxy) Dial(ctx context.Context, network, addr string) (net.Conn, error) {
	var d net.Dialer
	srv, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	mine, theirs := net.Pipe()
	p.serve(mine, srv)
	return theirs, nil
}

// requests forwards the client's requests to Redis, marking the one whose
// reply is to be lost.
func (p *Proxy) requests(c *proxyConn) {
	defer c.server.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.client.Read(buf)
		if n > 0 && !c.hung.Load() {
			p.mu.Lock()
			if p.lost > 0 && (p.lostWhen == nil || bytes.Contains(bytes.ToLower(buf[:n]), p.lostWhen)) {
				p.lost--
				c.losing.Store(int32(p.lostHow) + 1)
			}
			p.mu.Unlock()
			if _, werr := c.server.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// replies forwards Redis's replies to the client, unless they are lost,
// delayed, or the connection hangs.
func (p *Proxy) replies(c *proxyConn) {
	defer c.client.Close()
	buf := make([]byte, 64<<10)
	for {
		n, err := c.server.Read(buf)
		if n > 0 {
			switch LostMode(c.losing.Load() - 1) {
			case LostClose:
				p.dropped.Add(1)
				return // the deferred Close
			case LostReset:
				p.dropped.Add(1)
				if tc, ok := c.client.(*net.TCPConn); ok {
					tc.SetLinger(0) // Close sends RST
				}
				return
			case LostHang:
				p.dropped.Add(1)
				c.hung.Store(true)
				c.losing.Store(0)
			}
			p.mu.Lock()
			d := p.delay
			p.mu.Unlock()
			if d > 0 {
				time.Sleep(d)
			}
			if !c.hung.Load() {
				if _, werr := c.client.Write(buf[:n]); werr != nil {
					return
				}
			}
		}
		if err != nil {
			return
		}
	}
}

// LoseReplies makes the proxy lose the replies of the next n requests that
// contain match (case-insensitive; "" matches any): each is forwarded, runs
// on Redis, and its reply is read from Redis but never forwarded; the
// client's connection is then closed, reset or hung, as mode says.
func (p *Proxy) LoseReplies(n int, mode LostMode, match string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lost, p.lostHow, p.lostWhen = n, mode, nil
	if match != "" {
		p.lostWhen = bytes.ToLower([]byte(match))
	}
}

// Lost returns how many replies the proxy has lost so far.
func (p *Proxy) Lost() int { return int(p.dropped.Load()) }

// Delay holds every reply for d before forwarding it (0: none).
func (p *Proxy) Delay(d time.Duration) {
	p.mu.Lock()
	p.delay = d
	p.mu.Unlock()
}

// HangOpen makes every connection open now stop forwarding, in both
// directions, while it stays open: as a NAT or load balancer that dropped
// its state does, to the connections a client already holds in its pool.
// Connections made afterwards work. It returns how many connections hang.
func (p *Proxy) HangOpen() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, c := range p.conns {
		if !c.hung.Swap(true) {
			n++
		}
	}
	return n
}
