package keyfunc

import (
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"

	"github.com/sluicehq/sluice/internal/peerkey"
)

// Canonical names of the forwarding headers this file reads.
const (
	xForwardedFor = "X-Forwarded-For"
	forwarded     = "Forwarded"
)

// defaultIPv6Bits is the IPv6 prefix length that one client is assumed to
// control: a single customer usually gets a whole /64 (often a /56 or /48).
const defaultIPv6Bits = 64

// IPv6Grouping builds the client-IP strategies with a chosen IPv6 prefix
// length. IPv4 addresses are keyed as they are; an IPv6 address is keyed by
// the network it belongs to, because one subscriber usually controls a whole
// /64 (and often a /56 or /48): keyed by full address, one attacker would
// own 2^64 identities.
//
// The package-level RemoteIP, ForwardedFor, ForwardedForHops, TrustedHeader
// and Forwarded use /64; IPv6Prefix(56).ForwardedFor(...) groups by /56
// instead. The zero IPv6Grouping also groups by /64.
//
// An address in the NAT64 well-known prefix 64:ff9b::/96 (RFC 6052) is an
// IPv4 client translated by NAT64: every strategy keys it by the IPv4
// address it embeds, the same key as that client connecting directly
// ("ip:198.51.100.7"). NAT64 adds the prefix of a translator configured
// with a network-specific one.
type IPv6Grouping struct {
	bits  int       // 0 means defaultIPv6Bits
	nat64 *nat64Set // NAT64 prefixes beyond the well-known one; nil: none
}

// IPv6Prefix returns the IP strategies grouping IPv6 addresses by their
// first bits bits: 64 (the default), 56 or 48 are typical, 128 keys every
// IPv6 address on its own. It panics unless 32 <= bits <= 128: a shorter
// prefix would put whole providers behind a single key.
func IPv6Prefix(bits int) IPv6Grouping {
	if bits < 32 || bits > 128 {
		panic(fmt.Sprintf("keyfunc: IPv6Prefix(%d): prefix length must be between 32 and 128", bits))
	}
	return IPv6Grouping{bits: bits}
}

func (g IPv6Grouping) prefixBits() int {
	if g.bits == 0 {
		return defaultIPv6Bits
	}
	return g.bits
}

// addrKey returns the key of a normalised client address: "ip:" and the
// IPv4 address (also the one a NAT64 address embeds), or "ip:" and the IPv6
// network in CIDR notation ("ip:2001:db8:1:2::/64"; with a /128 grouping,
// just the address). It allocates the key string and nothing else.
func (g IPv6Grouping) addrKey(a netip.Addr) string {
	var buf [64]byte // "ip:" + the longest IPv6 text (39 bytes) + "/128"
	b := append(buf[:0], "ip:"...)
	a = g.unNAT64(a)
	if bits := g.prefixBits(); a.Is4() || bits == 128 {
		b = a.AppendTo(b)
	} else {
		p, _ := a.Prefix(bits) // cannot fail: a is a valid IPv6 address and 32 <= bits < 128
		b = p.AppendTo(b)
	}
	return string(b)
}

// RemoteIP returns the Func keying a request by the connection's peer
// address (r.RemoteAddr), IPv6 grouped by /64. It reads no header: a client
// cannot change its key by sending one. This is the default key of the
// middleware and the right choice when clients connect to the service
// directly.
//
// Behind a reverse proxy or load balancer the peer is the proxy, so every
// client behind it shares one key: use ForwardedFor, TrustedHeader,
// Forwarded or ForwardedForHops instead. To point this out, the first time
// RemoteIP sees a request carrying a forwarding header (X-Forwarded-For,
// Forwarded, X-Real-IP, CF-Connecting-IP, Fly-Client-IP, True-Client-IP) it
// logs one warning per process with log/slog's default logger.
//
// An unparseable RemoteAddr (a unix socket peer is "@" or empty) is an
// ErrInvalidAddress. For an IPv4 peer the Func allocates only the key.
func RemoteIP() Func { return IPv6Grouping{}.RemoteIP() }

// RemoteIP is the package-level RemoteIP with g's IPv6 grouping.
func (g IPv6Grouping) RemoteIP() Func { return g.remoteIP(&untrustedForwarding) }

func init() { peerkey.Quiet = IPv6Grouping{}.remoteIP(nil) }

// remoteIP is RemoteIP reporting forwarding headers to w (nil: to none).
func (g IPv6Grouping) remoteIP(w *forwardingWarning) Func {
	return func(r *http.Request) (string, error) {
		peer, err := parsePeer(r.RemoteAddr)
		if err != nil {
			return "", err
		}
		w.check(r.Header, peer)
		return g.addrKey(peer), nil
	}
}

// ForwardedFor returns the Func keying a request by the client address in
// X-Forwarded-For, believed only as far as trustedProxies vouch for it.
//
// If the peer (r.RemoteAddr) is not in trustedProxies, the peer is the
// client and the header is ignored: anyone can send X-Forwarded-For.
// Otherwise every X-Forwarded-For line is merged, in order, into one list,
// which is walked from the right: each address in trustedProxies is a proxy
// that appended the address of its own peer and is skipped; the first
// address that is not trusted is the client. Everything to the left of it
// was written by the client or by proxies nobody vouches for and is never
// looked at, so a spoofed leftmost address changes nothing. If every address
// is trusted, the request came from inside the trusted networks and the
// leftmost address is the client. A trusted peer that sends no
// X-Forwarded-For at all (its own health checks, say) is the client: it is
// keyed by its address, with no error. Make sure your proxy always sets the
// header (and never drops it on a client's Connection header), or every
// such request shares the proxy's key.
//
// An element that is not an IP address, met during the walk, is an
// ErrInvalidAddress (it was written by a trusted proxy, which is then
// misconfigured); it never becomes a key. Elements may carry a port
// ("192.0.2.1:4711", "[2001:db8::1]:4711"); zones are dropped and
// IPv4-mapped IPv6 addresses are treated as IPv4, both when matching
// trustedProxies and in the key.
//
// List every proxy whose address can appear in the chain, including the one
// the service talks to. With no trustedProxies ForwardedFor is RemoteIP. It
// panics on an invalid prefix or a prefix of length 0 (trusting every
// address lets every client choose its key). For an IPv4 client the Func
// allocates only the key.
func ForwardedFor(trustedProxies ...netip.Prefix) Func {
	return IPv6Grouping{}.ForwardedFor(trustedProxies...)
}

// ForwardedFor is the package-level ForwardedFor with g's IPv6 grouping.
func (g IPv6Grouping) ForwardedFor(trustedProxies ...netip.Prefix) Func {
	return g.behindProxies("ForwardedFor", xForwardedFor, trustedProxies, clientFromXFF)
}

// behindProxies returns the Func of a forwarding list header that proxies
// append to (X-Forwarded-For, Forwarded): a peer that is not trusted is the
// client, whatever it sent; a trusted peer's header lines are walked by
// client. With no trustedProxies it is RemoteIP. name is the constructor's,
// for its panics.
func (g IPv6Grouping) behindProxies(name, header string, trustedProxies []netip.Prefix,
	client func(lines []string, trust trustSet, peer netip.Addr) (netip.Addr, error)) Func {
	if len(trustedProxies) == 0 {
		return g.RemoteIP()
	}
	trust := newTrustSet(name, trustedProxies)
	return func(r *http.Request) (string, error) {
		peer, err := parsePeer(r.RemoteAddr)
		if err != nil {
			return "", err
		}
		if !trust.contains(peer) {
			return g.addrKey(peer), nil
		}
		a, err := client(r.Header[header], trust, peer)
		if err != nil {
			return "", err
		}
		return g.addrKey(a), nil
	}
}

// clientFromXFF walks the merged X-Forwarded-For lines from the right and
// returns the first address not in trust, or the leftmost address if all are
// trusted (peer if there is none). It does not allocate unless it fails.
func clientFromXFF(lines []string, trust trustSet, peer netip.Addr) (netip.Addr, error) {
	client := peer
	for i := len(lines) - 1; i >= 0; i-- {
		for line := lines[i]; line != ""; {
			var elem string
			elem, line = lastListElement(line)
			if elem == "" {
				continue
			}
			a, ok := parseAddr(elem, false)
			if !ok {
				return netip.Addr{}, newKeyError(xForwardedFor, ErrInvalidAddress, elem)
			}
			if !trust.contains(a) {
				return a, nil
			}
			client = a
		}
	}
	return client, nil
}

// lastListElement splits the last element off a comma-separated list,
// trimmed of whitespace; empty elements are returned as "".
func lastListElement(line string) (elem, rest string) {
	if j := strings.LastIndexByte(line, ','); j >= 0 {
		return trimOWS(line[j+1:]), line[:j]
	}
	return trimOWS(line), ""
}

// ForwardedForHops returns the Func keying a request by the address that the
// n-th proxy from the service appended to X-Forwarded-For, for a deployment
// with exactly n reverse proxies in front of the service, each appending the
// address of its peer (n == 1: a single load balancer; n == 2: a CDN in front
// of a load balancer). The merged list is counted from the right, so what a
// client writes into the header itself is never reached.
//
// Use it only when the service cannot be reached except through those n
// proxies (it does not look at the peer address), for example when the
// proxies' addresses are not known in advance or the proxy connects over a
// unix socket; otherwise prefer ForwardedFor, which checks who is talking.
// A request without X-Forwarded-For is an ErrNoKey (health checks, or a
// request that bypassed the proxies); fewer than n addresses is an
// ErrMalformedHeader; a garbage element among the last n is an
// ErrInvalidAddress. It panics if n < 1.
func ForwardedForHops(n int) Func { return IPv6Grouping{}.ForwardedForHops(n) }

// ForwardedForHops is the package-level ForwardedForHops with g's IPv6
// grouping.
func (g IPv6Grouping) ForwardedForHops(n int) Func {
	if n < 1 {
		panic(fmt.Sprintf("keyfunc: ForwardedForHops(%d): the number of proxies must be at least 1", n))
	}
	return func(r *http.Request) (string, error) {
		a, err := nthFromRight(r.Header[xForwardedFor], n)
		if err != nil {
			return "", err
		}
		return g.addrKey(a), nil
	}
}

var errNoXFF = &KeyError{Source: xForwardedFor, Err: ErrNoKey}

// nthFromRight returns the n-th address from the right of the merged
// X-Forwarded-For lines, checking that the n-1 addresses to its right are
// addresses too.
func nthFromRight(lines []string, n int) (netip.Addr, error) {
	count := 0
	for i := len(lines) - 1; i >= 0; i-- {
		for line := lines[i]; line != ""; {
			var elem string
			elem, line = lastListElement(line)
			if elem == "" {
				continue
			}
			a, ok := parseAddr(elem, false)
			if !ok {
				return netip.Addr{}, newKeyError(xForwardedFor, ErrInvalidAddress, elem)
			}
			if count++; count == n {
				return a, nil
			}
		}
	}
	if count == 0 {
		return netip.Addr{}, errNoXFF
	}
	return netip.Addr{}, newKeyError(xForwardedFor,
		detail(ErrMalformedHeader, "%d addresses where %d proxies are configured", count, n), "")
}

// TrustedHeader returns the Func keying a request by a header that holds a
// single client address and is set by a trusted proxy: X-Real-IP (nginx),
// CF-Connecting-IP (Cloudflare), Fly-Client-IP (Fly.io), True-Client-IP...
//
// The header is believed only when the peer (r.RemoteAddr) is in
// trustedProxies; from any other peer the header is ignored and the peer is
// the client. A trusted peer that does not send the header is an ErrNoKey;
// several values (lines or a comma-separated list) are an
// ErrMalformedHeader, since a proxy that sets the header replaces it; a value
// that is not an IP address (optionally with a port) is an ErrInvalidAddress.
//
// With no trustedProxies TrustedHeader is RemoteIP. It panics on an invalid
// header name, on an invalid prefix or on a prefix of length 0.
func TrustedHeader(name string, trustedProxies ...netip.Prefix) Func {
	return IPv6Grouping{}.TrustedHeader(name, trustedProxies...)
}

// TrustedHeader is the package-level TrustedHeader with g's IPv6 grouping.
func (g IPv6Grouping) TrustedHeader(name string, trustedProxies ...netip.Prefix) Func {
	key := canonicalHeader("TrustedHeader", name)
	if len(trustedProxies) == 0 {
		return g.RemoteIP()
	}
	trust := newTrustSet("TrustedHeader", trustedProxies)
	errMissing := &KeyError{Source: key, Err: ErrNoKey}
	return func(r *http.Request) (string, error) {
		peer, err := parsePeer(r.RemoteAddr)
		if err != nil {
			return "", err
		}
		if !trust.contains(peer) {
			return g.addrKey(peer), nil
		}
		a, err := singleAddr(key, r.Header[key], errMissing)
		if err != nil {
			return "", err
		}
		return g.addrKey(a), nil
	}
}

// singleAddr parses the one address a single-IP header must hold.
func singleAddr(name string, lines []string, errMissing error) (netip.Addr, error) {
	var v string
	n := 0
	for _, l := range lines {
		if l = trimOWS(l); l != "" {
			v = l
			n++
		}
	}
	switch {
	case n == 0:
		return netip.Addr{}, errMissing
	case n > 1:
		return netip.Addr{}, newKeyError(name, detail(ErrMalformedHeader, "%d values where one is expected", n), v)
	case strings.IndexByte(v, ',') >= 0:
		return netip.Addr{}, newKeyError(name, detail(ErrMalformedHeader, "a list where one address is expected"), v)
	}
	a, ok := parseAddr(v, false)
	if !ok {
		return netip.Addr{}, newKeyError(name, ErrInvalidAddress, v)
	}
	return a, nil
}

// trustSet is a list of normalised trusted prefixes. A linear scan is the
// fastest lookup for the handful of prefixes a deployment trusts (even
// Cloudflare's couple of dozen).
type trustSet []netip.Prefix

// newTrustSet validates and normalises trusted prefixes: host bits masked,
// IPv4-mapped IPv6 prefixes turned into IPv4 ones (addresses are unmapped
// before they are matched). It panics on an invalid prefix or on /0.
func newTrustSet(caller string, prefixes []netip.Prefix) trustSet {
	t := make(trustSet, 0, len(prefixes))
	for _, p := range prefixes {
		if !p.IsValid() {
			panic(fmt.Sprintf("keyfunc: %s: invalid trusted proxy prefix %v", caller, p))
		}
		q, ok := trustedPrefix(p)
		if !ok {
			panic(fmt.Sprintf("keyfunc: %s: trusting every address (%v) lets every client choose its key; "+
				"list your proxies' networks, or use ForwardedForHops for a fixed number of proxies", caller, p))
		}
		t = append(t, q)
	}
	return t
}

// trustedPrefix returns p as addresses are matched against it: an
// IPv4-mapped IPv6 prefix turned into the IPv4 one, host bits masked. ok is
// false for a prefix that trusts every address: of length 0 once turned
// (::/0, 0.0.0.0/0, and ::ffff:0:0/96, which is 0.0.0.0/0).
func trustedPrefix(p netip.Prefix) (q netip.Prefix, ok bool) {
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p.Masked(), p.Bits() > 0
}

func (t trustSet) contains(a netip.Addr) bool {
	for _, p := range t {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// maxAddrLen bounds the text of one address with brackets, zone and port;
// longer elements are rejected before any parsing.
const maxAddrLen = 100

// parsePeer parses r.RemoteAddr: "host:port" as net/http sets it, or a bare
// address.
func parsePeer(remoteAddr string) (netip.Addr, error) {
	a, ok := parseAddr(remoteAddr, false)
	if !ok {
		return netip.Addr{}, newKeyError("RemoteAddr", ErrInvalidAddress, remoteAddr)
	}
	return a, nil
}

// parseAddr parses an IP address with an optional port, in any of the forms
// proxies write: "192.0.2.1", "192.0.2.1:80", "2001:db8::1", "[2001:db8::1]",
// "[2001:db8::1]:80", with or without a zone ("fe80::1%eth0"). obfPort also
// admits RFC 7239 obfuscated ports ("[2001:db8::1]:_abc"). The result is
// normalised: zone dropped, IPv4-mapped IPv6 unmapped. It allocates only
// when s is not an address (netip's error).
func parseAddr(s string, obfPort bool) (netip.Addr, bool) {
	if s == "" || len(s) > maxAddrLen {
		return netip.Addr{}, false
	}
	host := s
	switch colon := strings.IndexByte(s, ':'); {
	case s[0] == '[':
		end := strings.LastIndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, false
		}
		host = s[1:end]
		if rest := s[end+1:]; rest != "" && (rest[0] != ':' || !isPort(rest[1:], obfPort)) {
			return netip.Addr{}, false
		}
		if strings.IndexByte(host, ':') < 0 { // brackets hold IPv6 only
			return netip.Addr{}, false
		}
	case colon >= 0 && strings.IndexByte(s[colon+1:], ':') < 0:
		// exactly one colon: IPv4 with a port
		if !isPort(s[colon+1:], obfPort) {
			return netip.Addr{}, false
		}
		host = s[:colon]
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, false
	}
	return a.WithZone("").Unmap(), true
}

// isPort reports whether s is a decimal port (0-65535) or, if obf, an RFC
// 7239 obfuscated port ("_" followed by letters, digits, '.', '_', '-').
func isPort(s string, obf bool) bool {
	if obf && len(s) > 1 && s[0] == '_' {
		for i := 1; i < len(s); i++ {
			if c := s[i]; !isAlnum(c) && c != '.' && c != '_' && c != '-' {
				return false
			}
		}
		return true
	}
	if s == "" {
		return false
	}
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
		if n = n*10 + int(s[i]-'0'); n > 65535 {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// forwardingHeaders are the canonical names of headers that show a proxy in
// front of the service.
var forwardingHeaders = [...]string{
	xForwardedFor, forwarded, "X-Real-Ip", "Cf-Connecting-Ip", "Fly-Client-Ip", "True-Client-Ip",
}

// forwardingWarning logs, once, that a forwarding header arrived while no
// proxy is trusted.
type forwardingWarning struct {
	done   atomic.Bool
	logger func() *slog.Logger // nil: slog.Default
}

// untrustedForwarding is the process-wide warning RemoteIP uses.
var untrustedForwarding forwardingWarning

// check logs the warning if it has not been logged yet and h carries a
// forwarding header. After the first warning it is a single atomic load;
// before, a few map lookups. It never allocates until it logs.
func (w *forwardingWarning) check(h http.Header, peer netip.Addr) {
	if w == nil || w.done.Load() {
		return
	}
	for _, name := range forwardingHeaders {
		if len(h[name]) == 0 {
			continue
		}
		if w.done.CompareAndSwap(false, true) {
			logger := slog.Default()
			if w.logger != nil {
				logger = w.logger()
			}
			logger.Warn("keyfunc: a request carries a forwarding header, but no trusted proxy is configured, "+
				"so the header is ignored and the peer address is the key; if this service runs behind a proxy, "+
				"every client behind it now shares one rate-limit key",
				"header", name,
				"peer", peer.String(),
				"fix", "key by keyfunc.ForwardedFor(trustedProxies...), keyfunc.TrustedHeader(header, trustedProxies...) "+
					"or keyfunc.Forwarded(trustedProxies...) with the address ranges of your proxies "+
					"(see docs/proxies.md); this warning is logged once")
		}
		return
	}
}
