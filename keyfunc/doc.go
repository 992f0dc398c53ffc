// Package keyfunc decides who is limited: it turns a request into the key
// whose requests are counted together.
//
// A key a client can choose is no limit at all: a client that can send a
// new X-Forwarded-For, a new API key or a new address for every request gets
// a fresh budget every time. The strategies here therefore believe only what
// the service itself saw or what a proxy it trusts vouches for, and the
// default believes nothing but the connection.
//
// # Choosing a strategy
//
//   - Clients connect directly: RemoteIP, the peer address of the connection.
//     It is the middleware's default.
//   - Behind proxies whose networks you know (nginx, a load balancer in your
//     VPC): ForwardedFor with those networks. Forwarded does the same with
//     the RFC 7239 header.
//   - Behind a CDN or platform proxy that puts the client address into a
//     header of its own: TrustedHeader("CF-Connecting-IP", cloudflare...),
//     TrustedHeader("Fly-Client-IP", ...), TrustedHeader("X-Real-IP", ...).
//   - Behind a fixed number of proxies whose addresses you cannot list, when
//     the service is reachable through them only: ForwardedForHops(n).
//   - Signed-in users: User (after your authentication middleware called
//     WithUser) or ContextValue (if it stores the user under its own key).
//   - API clients: Header("X-API-Key"), when the key is verified.
//   - Per endpoint: Route, usually joined with a client key.
//
// Compose them with Join (user and route: one budget per user per endpoint)
// and FirstOf (the API key when there is one, else the client IP).
//
// # The trust model
//
// Any client can send X-Forwarded-For, Forwarded, X-Real-IP or
// CF-Connecting-IP, with any content. Such a header means something only
// when the peer that handed over the request is a proxy you run or pay for,
// which overwrites or appends to it. So:
//
//   - Nothing reads a forwarding header unless you configure the proxies to
//     trust. RemoteIP never does; ForwardedFor, TrustedHeader and Forwarded
//     with no trusted networks are RemoteIP.
//   - A header from an untrusted peer is ignored: the peer is the client.
//   - X-Forwarded-For and Forwarded are lists that each proxy appends to. All
//     lines of the header are merged in order (reading only the first line
//     would read the one the client wrote) and walked from the right,
//     skipping trusted proxies; the first untrusted address is the client.
//     The leftmost entries are whatever the client wrote and are never used.
//   - Garbage met during that walk is an error, never a key.
//
// When RemoteIP meets a request that carries a forwarding header, it logs a
// warning once per process through log/slog: behind a proxy, every client now
// shares the proxy's key, and the warning says how to configure trust.
//
// Trusted networks are netip.Prefix values; ParsePrefixes reads them from
// configuration. Addresses are normalised with net/netip before they are
// matched or keyed: IPv4-mapped IPv6 addresses (::ffff:192.0.2.1) become
// IPv4, zones (fe80::1%eth0) are dropped.
//
// # IPv6
//
// One subscriber usually controls a whole /64 (often a /56 or /48), so an
// IPv6 client is keyed by its /64 network; keyed by full address, a single
// attacker would own 2^64 identities. IPv6Prefix(56).ForwardedFor(...) and
// the other IPv6Grouping methods choose another prefix length.
//
// An IPv4 client reaching an IPv6-only service through NAT64 appears at an
// IPv6 address that embeds its IPv4 address (RFC 6052); grouped by /64, all
// of them would share one key. Every strategy therefore keys an address in
// the well-known prefix 64:ff9b::/96 by the IPv4 address it embeds, which
// is the key the same client gets connecting directly ("ip:198.51.100.7").
// A translator configured with a network-specific prefix (of length 32, 40,
// 48, 56, 64 or 96, such as one from the local-use block 64:ff9b:1::/48) is
// declared with NAT64(prefix) or IPv6Prefix(n).NAT64(prefix).
//
// # Keys
//
// Every key starts with a short kind prefix, so keys of different strategies
// never collide, and its length is bounded whatever the request carries:
//
//	ip:203.0.113.7                  RemoteIP, ForwardedFor, ForwardedForHops, TrustedHeader, Forwarded
//	ip:2001:db8:1:2::/64            the same, IPv6 (grouped)
//	ip:198.51.100.7                 the same, from 64:ff9b::c633:6407 (NAT64)
//	hdr#x-api-key:<32 hex digits>   Header (always hashed: API keys are secrets)
//	user:<id>                       User
//	ctx:<value>                     ContextValue
//	route:GET /reports/{id}         Route, RouteFrom
//	route:(no route)                Route, for a request that matched no route
//	join:<key>|<key>                Join ('\' and '|' in a part escaped with '\')
//
// A header value is always hashed (it is often a secret; the hash has no
// secret of its own, so a guessable value is not hidden). A user id,
// context value or route longer than 64 bytes, or containing anything but
// printable ASCII, never appears raw either: it is replaced
// by the first 16 bytes of its SHA-256 in hex, and the kind is followed by
// '#' instead of ':'. A 1 MB X-API-Key header of 'x' makes the 46-byte key
// "hdr#x-api-key:8f990ba0b577b51cf009ea049368c16b".
//
// # Errors and the key-error policy
//
// A Func returns a *KeyError that wraps one of:
//
//   - ErrNoKey: the request does not carry this identity (no API key header,
//     no signed-in user, no route). FirstOf moves on to the next Func.
//   - ErrInvalidAddress: something that must be an address is not (garbage
//     in X-Forwarded-For, for=unknown, a unix-socket RemoteAddr).
//   - ErrMalformedHeader: a trusted proxy's header cannot be believed as it
//     is (broken syntax, several values where one is expected, fewer hops
//     than configured proxies).
//
// The error names where the value came from and quotes only a short prefix
// of it. A key error never means "do not limit": by default the middleware
// (nethttp, and the router adapters that delegate to it) limits the request
// by RemoteIP, the peer address, and reports the error through its error
// hook; with the nethttp.WithKeyErrorReject option it answers 400 Bad Request
// instead. Note that the fallback is the peer address: behind a proxy all
// failing requests share the proxy's key, which is safe (they are still
// limited) but coarse, so watch the error hook. A client cannot push itself
// into that shared key by sending a broken header: what it writes on the
// left of a forwarding list is never parsed.
//
// # Construction
//
// Constructors panic on programmer errors, with a message that starts with
// the package name: an invalid or zero-length trusted prefix, an invalid
// header name, ForwardedForHops(n) with n < 1, IPv6Prefix out of range, a
// NAT64 prefix of a length RFC 6052 does not define, Join or FirstOf without
// Funcs. Configuration read at run time goes through
// ParsePrefixes, which returns an error instead. Funcs are safe for
// concurrent use.
//
// # Cost
//
// On the hot path (an IPv4 client, found without error) the IP strategies
// allocate only the key string; the RFC 7239 parser likewise, unless a
// quoted node uses backslash escapes. Errors, hashed values, Join and
// ContextValue allocate.
package keyfunc
