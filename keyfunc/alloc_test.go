package keyfunc

import (
	"net/http"
	"net/netip"
	"testing"
)

// hotPath lists the strategies whose common case must allocate only the key
// string, with a request in that common case.
func hotPath() []struct {
	name string
	f    Func
	req  *http.Request
} {
	return []struct {
		name string
		f    Func
		req  *http.Request
	}{
		{"RemoteIP IPv4", RemoteIP(), newRequest("203.0.113.7:4711")},
		{"RemoteIP IPv6", RemoteIP(), newRequest("[2001:db8:1:2::1]:4711")},
		{"RemoteIP NAT64", RemoteIP(), newRequest("[64:ff9b::c633:6407]:4711")},
		{"RemoteIP NAT64 configured", NAT64(netip.MustParsePrefix("64:ff9b:1::/48")).RemoteIP(), newRequest("[64:ff9b:1:c633:64:700::]:4711")},
		{"ForwardedFor", ForwardedFor(testTrusted...), newRequest("10.0.0.1:80", xff("198.51.100.1, 203.0.113.7, 10.0.0.2"))},
		{"ForwardedFor untrusted peer", ForwardedFor(testTrusted...), newRequest("203.0.113.7:4711", xff("198.51.100.1"))},
		{"ForwardedForHops", ForwardedForHops(2), newRequest("10.0.0.1:80", xff("198.51.100.1, 203.0.113.7, 10.0.0.2"))},
		{"TrustedHeader", TrustedHeader("X-Real-IP", testTrusted...), newRequest("10.0.0.1:80", hdr{"X-Real-IP", "203.0.113.7"})},
		{"Forwarded", Forwarded(testTrusted...), newRequest("10.0.0.1:80", fwd(`for=198.51.100.1, for="203.0.113.7:4711";proto=https, for=10.0.0.2`))},
		{"Header", Header("X-API-Key"), newRequest("203.0.113.7:4711", hdr{"X-API-Key", "k-123"})},
		{"Route", Route(), routed("GET", "GET /reports/{id}")},
		{"Route, pattern without method", Route(), routed("GET", "/users/:id")},
		{"FirstOf falling back", FirstOf(Header("X-API-Key"), User(), RemoteIP()), newRequest("203.0.113.7:4711")},
	}
}

// routed is a request of method that a router matched to pattern.
func routed(method, pattern string) *http.Request {
	r := newRequest("203.0.113.7:4711")
	r.Method, r.Pattern = method, pattern
	return r
}

func TestHotPathAllocations(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector changes allocation counts")
	}
	for _, tc := range hotPath() {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := tc.f(tc.req); err != nil {
				t.Fatal(err)
			}
			if n := testing.AllocsPerRun(100, func() { tc.f(tc.req) }); n != 1 {
				t.Errorf("%v allocations per call; want 1 (the key)", n)
			}
		})
	}
}

func BenchmarkHotPath(b *testing.B) {
	for _, tc := range hotPath() {
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tc.f(tc.req)
			}
		})
	}
}

func BenchmarkJoin(b *testing.B) {
	r := withUser("alice")
	r.Pattern = "GET /reports/{id}"
	f := Join(User(), Route())
	b.ReportAllocs()
	for b.Loop() {
		f(r)
	}
}

func BenchmarkForwardedFor1MB(b *testing.B) {
	f := ForwardedFor(testTrusted...)
	r := newRequest("10.0.0.1:80", xff(megabyte("198.51.100.1, ", "203.0.113.7")))
	b.ReportAllocs()
	for b.Loop() {
		f(r)
	}
}
