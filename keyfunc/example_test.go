package keyfunc_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"

	"github.com/sluicehq/sluice/keyfunc"
)

// request builds a request from remoteAddr with the given header lines
// ("Name: value").
func request(remoteAddr string, lines ...string) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remoteAddr
	for _, l := range lines {
		name, value, _ := strings.Cut(l, ": ")
		r.Header.Add(name, value)
	}
	return r
}

// show prints a key or an error.
func show(f keyfunc.Func, r *http.Request) {
	key, err := f(r)
	if err != nil {
		fmt.Println("error:", err)
		return
	}
	fmt.Println(key)
}

// RemoteIP believes the connection only: a client that sends
// X-Forwarded-For changes nothing, and an IPv6 client is keyed by its /64.
func ExampleRemoteIP() {
	f := keyfunc.RemoteIP()
	show(f, request("203.0.113.7:4711"))
	show(f, request("203.0.113.7:4711", "X-Forwarded-For: 198.51.100.1"))
	show(f, request("[2001:db8:1:2::1]:4711"))
	show(f, request("[2001:db8:1:2:ffff::9]:4711"))
	show(f, request("@")) // a unix socket peer
	// Output:
	// ip:203.0.113.7
	// ip:203.0.113.7
	// ip:2001:db8:1:2::/64
	// ip:2001:db8:1:2::/64
	// error: keyfunc: RemoteAddr: invalid address "@"
}

// Behind nginx (proxy_set_header X-Forwarded-For
// $proxy_add_x_forwarded_for) on the private network 10.0.0.0/8.
func ExampleForwardedFor() {
	f := keyfunc.ForwardedFor(netip.MustParsePrefix("10.0.0.0/8"))

	// nginx appended the client's address to what the client sent.
	show(f, request("10.0.0.2:80", "X-Forwarded-For: 6.6.6.6, 203.0.113.7"))
	// A chain of trusted proxies is skipped from the right.
	show(f, request("10.0.0.2:80", "X-Forwarded-For: 203.0.113.7, 10.0.0.3"))
	// A client reaching the service directly is keyed by its own address.
	show(f, request("198.51.100.1:4711", "X-Forwarded-For: 6.6.6.6"))
	// A trusted proxy writing garbage is an error, never a key.
	show(f, request("10.0.0.2:80", "X-Forwarded-For: bogus"))
	// Output:
	// ip:203.0.113.7
	// ip:203.0.113.7
	// ip:198.51.100.1
	// error: keyfunc: X-Forwarded-For: invalid address "bogus"
}

// A CDN in front of a load balancer: two proxies, each appending its
// peer's address, and no other way in.
func ExampleForwardedForHops() {
	f := keyfunc.ForwardedForHops(2)
	show(f, request("10.0.0.2:80", "X-Forwarded-For: 6.6.6.6, 203.0.113.7, 198.51.100.20"))
	show(f, request("10.0.0.2:80"))
	// Output:
	// ip:203.0.113.7
	// error: keyfunc: X-Forwarded-For: no key in request
}

// Behind Cloudflare, CF-Connecting-IP is believed from Cloudflare's
// addresses only. Load the current list from
// https://www.cloudflare.com/ips/ in production; two ranges stand in for it
// here.
func ExampleTrustedHeader() {
	cloudflare := keyfunc.MustParsePrefixes("173.245.48.0/20", "2400:cb00::/32")
	f := keyfunc.TrustedHeader("CF-Connecting-IP", cloudflare...)
	show(f, request("173.245.48.10:443", "CF-Connecting-IP: 203.0.113.7"))
	// Someone who found the origin's address and bypasses Cloudflare:
	show(f, request("198.51.100.1:4711", "CF-Connecting-IP: 6.6.6.6"))
	// Output:
	// ip:203.0.113.7
	// ip:198.51.100.1
}

// The RFC 7239 Forwarded header, with quoted IPv6 nodes and ports.
func ExampleForwarded() {
	f := keyfunc.Forwarded(netip.MustParsePrefix("10.0.0.0/8"))
	show(f, request("10.0.0.2:80", `Forwarded: for=6.6.6.6, for="[2001:db8:cafe::17]:4711";proto=https`))
	show(f, request("10.0.0.2:80", `Forwarded: for=_hidden`))
	// Output:
	// ip:2001:db8:cafe::/64
	// error: keyfunc: Forwarded: invalid address: obfuscated or unknown node "_hidden"
}

// A provider that hands each customer a /56 needs a coarser grouping.
func ExampleIPv6Prefix() {
	f := keyfunc.IPv6Prefix(56).ForwardedFor(netip.MustParsePrefix("10.0.0.0/8"))
	show(f, request("10.0.0.2:80", "X-Forwarded-For: 2001:db8:1:2a::1"))
	show(f, request("10.0.0.2:80", "X-Forwarded-For: 2001:db8:1:ff::1"))
	// Output:
	// ip:2001:db8:1::/56
	// ip:2001:db8:1::/56
}

// Limit by API key. The value is hashed: API keys are secrets, and Redis key
// names are visible to anyone who can list them.
func ExampleHeader() {
	f := keyfunc.Header("X-API-Key")
	show(f, request("203.0.113.7:4711", "X-API-Key: k-123"))
	show(f, request("203.0.113.7:4711", "X-API-Key: "+strings.Repeat("x", 1<<20)))
	show(f, request("203.0.113.7:4711"))
	// Output:
	// hdr#x-api-key:3605a9e4358da4302f8acea41f0f52ce
	// hdr#x-api-key:8f990ba0b577b51cf009ea049368c16b
	// error: keyfunc: X-Api-Key: no key in request
}

// The authentication middleware stores the user; the limiter keys by it.
func ExampleUser() {
	r := request("203.0.113.7:4711")
	r = r.WithContext(keyfunc.WithUser(r.Context(), "alice"))
	show(keyfunc.User(), r)
	// Output:
	// user:alice
}

type tenantKey struct{}

// An existing middleware keeps the tenant id under its own context key.
func ExampleContextValue() {
	r := request("203.0.113.7:4711")
	r = r.WithContext(context.WithValue(r.Context(), tenantKey{}, 42))
	show(keyfunc.ContextValue(tenantKey{}), r)
	// Output:
	// ctx:42
}

// Route needs the pattern that http.ServeMux matched, so the limiter wraps
// the handler, inside the mux.
func ExampleRoute() {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /reports/{id}", func(w http.ResponseWriter, r *http.Request) {
		show(keyfunc.Route(), r)
	})
	mux.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodGet, "/reports/42", nil))
	// Output:
	// route:GET /reports/{id}
}

type routeKey struct{}

// Another router that stores its matched pattern in the context.
func ExampleRouteFrom() {
	f := keyfunc.RouteFrom(func(r *http.Request) string {
		p, _ := r.Context().Value(routeKey{}).(string)
		return p
	})
	r := request("203.0.113.7:4711")
	r = r.WithContext(context.WithValue(r.Context(), routeKey{}, "/users/:id"))
	show(f, r)
	// Output:
	// route:/users/:id
}

// One budget per user per endpoint.
func ExampleJoin() {
	r := request("203.0.113.7:4711")
	r = r.WithContext(keyfunc.WithUser(r.Context(), "alice"))
	r.Pattern = "POST /exports"
	show(keyfunc.Join(keyfunc.User(), keyfunc.Route()), r)
	// Output:
	// join:user:alice|route:POST /exports
}

// The API key when present, else the client address.
func ExampleFirstOf() {
	f := keyfunc.FirstOf(keyfunc.Header("X-API-Key"), keyfunc.RemoteIP())
	show(f, request("203.0.113.7:4711", "X-API-Key: k-123"))
	show(f, request("203.0.113.7:4711"))
	// Output:
	// hdr#x-api-key:3605a9e4358da4302f8acea41f0f52ce
	// ip:203.0.113.7
}

// Trusted proxies from the environment, e.g.
// TRUSTED_PROXIES="10.0.0.0/16, 192.0.2.10".
func ExampleParsePrefixes() {
	os.Setenv("EXAMPLE_TRUSTED_PROXIES", "10.0.0.0/16, 192.0.2.10")
	trusted, err := keyfunc.ParsePrefixes(os.Getenv("EXAMPLE_TRUSTED_PROXIES"))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(trusted)
	show(keyfunc.ForwardedFor(trusted...), request("192.0.2.10:80", "X-Forwarded-For: 203.0.113.7"))
	// Output:
	// [10.0.0.0/16 192.0.2.10/32]
	// ip:203.0.113.7
}

// A key error says where the bad value came from and which kind of error
// it is, quoting only a short prefix of the value.
func ExampleKeyError() {
	f := keyfunc.ForwardedFor(netip.MustParsePrefix("10.0.0.0/8"))
	_, err := f(request("10.0.0.2:80", "X-Forwarded-For: "+strings.Repeat("x", 1<<20)))
	fmt.Println(err)
	fmt.Println(errors.Is(err, keyfunc.ErrInvalidAddress))
	var ke *keyfunc.KeyError
	if errors.As(err, &ke) {
		fmt.Println(ke.Source)
	}
	// Output:
	// keyfunc: X-Forwarded-For: invalid address "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx..."
	// true
	// X-Forwarded-For
}

// IPv4 clients of an IPv6-only service reach it through a NAT64 translator.
// Each is keyed by the IPv4 address embedded in its IPv6 address, as if it
// had connected directly; the well-known prefix 64:ff9b::/96 needs no
// configuration, a network-specific prefix is declared with NAT64.
func ExampleNAT64() {
	f := keyfunc.NAT64(netip.MustParsePrefix("2001:db8:64::/96")).RemoteIP()
	show(f, request("[64:ff9b::c633:6407]:4711"))     // well-known prefix
	show(f, request("[2001:db8:64::cb00:7109]:4711")) // the translator's own prefix
	show(f, request("203.0.113.9:4711"))              // the same client, directly
	show(f, request("[2001:db8:1:2::1]:4711"))        // native IPv6
	// Output:
	// ip:198.51.100.7
	// ip:203.0.113.9
	// ip:203.0.113.9
	// ip:2001:db8:1:2::/64
}
