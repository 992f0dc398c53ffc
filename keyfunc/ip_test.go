package keyfunc

import (
	"net/netip"
	"strings"
	"testing"
)

func TestRemoteIP(t *testing.T) {
	runKeyCases(t, RemoteIP(), []keyCase{
		{name: "IPv4 with port", req: newRequest("203.0.113.7:4711"), wantKey: "ip:203.0.113.7"},
		{name: "bare IPv4", req: newRequest("203.0.113.7"), wantKey: "ip:203.0.113.7"},
		{name: "IPv6 grouped by /64", req: newRequest("[2001:db8:1:2:3:4:5:6]:4711"), wantKey: "ip:2001:db8:1:2::/64"},
		{name: "bare IPv6", req: newRequest("2001:db8:1:2:3:4:5:6"), wantKey: "ip:2001:db8:1:2::/64"},
		{name: "IPv4-mapped IPv6 is IPv4", req: newRequest("[::ffff:203.0.113.7]:4711"), wantKey: "ip:203.0.113.7"},
		{name: "zone is dropped", req: newRequest("[fe80::1%eth0]:4711"), wantKey: "ip:fe80::/64"},
		{name: "loopback", req: newRequest("127.0.0.1:4711"), wantKey: "ip:127.0.0.1"},
		{
			name:    "spoofed X-Forwarded-For is ignored",
			req:     newRequest("203.0.113.7:4711", xff("198.51.100.1"), hdr{"X-Real-IP", "198.51.100.2"}, hdr{"Forwarded", "for=198.51.100.3"}),
			wantKey: "ip:203.0.113.7",
		},
		{name: "unix socket peer", req: newRequest("@"), wantErr: ErrInvalidAddress},
		{name: "empty RemoteAddr", req: newRequest(""), wantErr: ErrInvalidAddress},
		{name: "garbage RemoteAddr", req: newRequest("example.com:80"), wantErr: ErrInvalidAddress},
		{name: "port out of range", req: newRequest("203.0.113.7:65536"), wantErr: ErrInvalidAddress},
		{name: "bracketed IPv4", req: newRequest("[203.0.113.7]:80"), wantErr: ErrInvalidAddress},
		{name: "1 MB RemoteAddr", req: newRequest(megabyte("1", ":80")), wantErr: ErrInvalidAddress},
	})
}

func TestRemoteIPIPv6Rotation(t *testing.T) {
	// An attacker owning 2001:db8:1:2::/64 gets one key, not 2^64.
	f := RemoteIP()
	a, _ := f(newRequest("[2001:db8:1:2::1]:1"))
	b, _ := f(newRequest("[2001:db8:1:2:ffff:ffff:ffff:ffff]:1"))
	c, _ := f(newRequest("[2001:db8:1:3::1]:1"))
	if a != b {
		t.Errorf("two addresses of one /64 got keys %q and %q", a, b)
	}
	if a == c {
		t.Errorf("two different /64 networks share key %q", a)
	}
}

func TestIPv6Prefix(t *testing.T) {
	req := newRequest("[2001:db8:aaaa:bbcc:dddd:eeee:ffff:1111]:1")
	for _, tc := range []struct {
		bits int
		want string
	}{
		{32, "ip:2001:db8::/32"},
		{48, "ip:2001:db8:aaaa::/48"},
		{56, "ip:2001:db8:aaaa:bb00::/56"},
		{64, "ip:2001:db8:aaaa:bbcc::/64"},
		{128, "ip:2001:db8:aaaa:bbcc:dddd:eeee:ffff:1111"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			g := IPv6Prefix(tc.bits)
			for name, f := range map[string]Func{
				"RemoteIP":         g.RemoteIP(),
				"ForwardedFor":     g.ForwardedFor(testTrusted...),
				"ForwardedForHops": g.ForwardedForHops(1),
				"TrustedHeader":    g.TrustedHeader("X-Real-IP", testTrusted...),
				"Forwarded":        g.Forwarded(testTrusted...),
			} {
				r := req
				if name != "RemoteIP" {
					r = newRequest("10.0.0.1:1",
						xff("2001:db8:aaaa:bbcc:dddd:eeee:ffff:1111"),
						hdr{"X-Real-IP", "2001:db8:aaaa:bbcc:dddd:eeee:ffff:1111"},
						hdr{"Forwarded", `for="[2001:db8:aaaa:bbcc:dddd:eeee:ffff:1111]"`})
				}
				if got, err := f(r); err != nil || got != tc.want {
					t.Errorf("%s: got %q, %v; want %q", name, got, err, tc.want)
				}
			}
			// IPv4 is never grouped.
			if got, _ := g.RemoteIP()(newRequest("203.0.113.7:1")); got != "ip:203.0.113.7" {
				t.Errorf("IPv4: got %q", got)
			}
		})
	}
	if got, _ := (IPv6Grouping{}).RemoteIP()(req); got != "ip:2001:db8:aaaa:bbcc::/64" {
		t.Errorf("zero IPv6Grouping: got %q, want the /64 default", got)
	}
}

func TestForwardedFor(t *testing.T) {
	runKeyCases(t, ForwardedFor(testTrusted...), []keyCase{
		{name: "direct client without header", req: newRequest("203.0.113.7:1"), wantKey: "ip:203.0.113.7"},
		{
			name:    "untrusted peer sends X-Forwarded-For",
			req:     newRequest("203.0.113.7:1", xff("198.51.100.1")),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "untrusted peer sends garbage",
			req:     newRequest("203.0.113.7:1", xff("bogus")),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "untrusted peer claims to be a trusted proxy",
			req:     newRequest("203.0.113.7:1", xff("198.51.100.1, 10.0.0.2")),
			wantKey: "ip:203.0.113.7",
		},
		{name: "one trusted hop", req: newRequest("10.0.0.1:1", xff("203.0.113.7")), wantKey: "ip:203.0.113.7"},
		{
			name:    "spoofed leftmost X-Forwarded-For",
			req:     newRequest("10.0.0.1:1", xff("198.51.100.1, 203.0.113.7")),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "spoofed trusted address on the left",
			req:     newRequest("10.0.0.1:1", xff("10.9.9.9, 203.0.113.7")),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "trusted proxies on the right",
			req:     newRequest("10.0.0.1:1", xff("198.51.100.1, 203.0.113.7, 10.0.0.2, 10.0.0.3")),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "several X-Forwarded-For lines",
			req:     newRequest("10.0.0.1:1", xff("198.51.100.1"), xff("203.0.113.7, 10.0.0.2")),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "several lines, client alone in the last",
			req:     newRequest("10.0.0.1:1", xff("198.51.100.1, 198.51.100.2"), xff("203.0.113.7")),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "trusted proxies span lines",
			req:     newRequest("10.0.0.1:1", xff("198.51.100.1, 203.0.113.7"), xff("10.0.0.2"), xff("fd00::3")),
			wantKey: "ip:203.0.113.7",
		},
		{name: "trusted peer without header", req: newRequest("10.0.0.1:1"), wantKey: "ip:10.0.0.1"},
		{
			name:    "every address trusted: leftmost",
			req:     newRequest("10.0.0.1:1", xff("10.0.0.5, 10.0.0.2")),
			wantKey: "ip:10.0.0.5",
		},
		{
			name:    "empty elements are skipped",
			req:     newRequest("10.0.0.1:1", xff(" ,203.0.113.7,, \t,10.0.0.2,")),
			wantKey: "ip:203.0.113.7",
		},
		{name: "garbage", req: newRequest("10.0.0.1:1", xff("bogus")), wantErr: ErrInvalidAddress},
		{name: "unknown", req: newRequest("10.0.0.1:1", xff("unknown")), wantErr: ErrInvalidAddress},
		{
			name:    "garbage right of the client",
			req:     newRequest("10.0.0.1:1", xff("203.0.113.7, bogus")),
			wantErr: ErrInvalidAddress,
		},
		{
			name:    "garbage in a later line",
			req:     newRequest("10.0.0.1:1", xff("203.0.113.7"), xff("10.0.0.2 10.0.0.3")),
			wantErr: ErrInvalidAddress,
		},
		{
			name:    "garbage left of the client is never read",
			req:     newRequest("10.0.0.1:1", xff(`bogus, "quoted", ;;, 203.0.113.7`)),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "IPv4-mapped client",
			req:     newRequest("10.0.0.1:1", xff("::ffff:203.0.113.7")),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "IPv4-mapped trusted peer",
			req:     newRequest("[::ffff:10.0.0.1]:1", xff("203.0.113.7")),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "IPv4-mapped trusted proxy in the list",
			req:     newRequest("10.0.0.1:1", xff("203.0.113.7, ::ffff:10.0.0.2")),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "IPv4-mapped untrusted peer",
			req:     newRequest("[::ffff:203.0.113.7]:1", xff("198.51.100.1")),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "zone on the trusted peer",
			req:     newRequest("[fd00::1%eth0]:1", xff("2001:db8:1:2:3:4:5:6")),
			wantKey: "ip:2001:db8:1:2::/64",
		},
		{
			name:    "zone on a trusted proxy in the list",
			req:     newRequest("10.0.0.1:1", xff("203.0.113.7, fd00::2%eth1")),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "zone on the client",
			req:     newRequest("10.0.0.1:1", xff("fe80::1%eth0")),
			wantKey: "ip:fe80::/64",
		},
		{
			name:    "IPv6 client grouped by /64",
			req:     newRequest("[fd00::1]:1", xff("2001:db8:1:2:3:4:5:6")),
			wantKey: "ip:2001:db8:1:2::/64",
		},
		{name: "client with port", req: newRequest("10.0.0.1:1", xff("203.0.113.7:4711")), wantKey: "ip:203.0.113.7"},
		{
			name:    "bracketed IPv6 client with port",
			req:     newRequest("10.0.0.1:1", xff("[2001:db8:1:2::1]:4711")),
			wantKey: "ip:2001:db8:1:2::/64",
		},
		{
			name:    "bracketed IPv6 client",
			req:     newRequest("10.0.0.1:1", xff("[2001:db8:1:2::1]")),
			wantKey: "ip:2001:db8:1:2::/64",
		},
		{name: "bracketed IPv4", req: newRequest("10.0.0.1:1", xff("[203.0.113.7]")), wantErr: ErrInvalidAddress},
		{name: "hostname", req: newRequest("10.0.0.1:1", xff("client.example")), wantErr: ErrInvalidAddress},
		{
			name:    "1 MB header, client on the right",
			req:     newRequest("10.0.0.1:1", xff(megabyte("198.51.100.1, ", "203.0.113.7"))),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "1 MB garbage element",
			req:     newRequest("10.0.0.1:1", xff(megabyte("x", ""))),
			wantErr: ErrInvalidAddress,
		},
		{
			name:    "1 MB of trusted addresses",
			req:     newRequest("10.0.0.1:1", xff(megabyte("10.0.0.9,", "10.0.0.2"))),
			wantKey: "ip:10.0.0.9",
		},
		{name: "unix socket peer", req: newRequest("@", xff("203.0.113.7")), wantErr: ErrInvalidAddress},
	})
}

func TestForwardedForHops(t *testing.T) {
	runKeyCases(t, ForwardedForHops(1), []keyCase{
		{name: "one hop", req: newRequest("10.0.0.1:1", xff("203.0.113.7")), wantKey: "ip:203.0.113.7"},
		{
			name:    "spoofed leftmost X-Forwarded-For",
			req:     newRequest("10.0.0.1:1", xff("198.51.100.1, 203.0.113.7")),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "several X-Forwarded-For lines",
			req:     newRequest("10.0.0.1:1", xff("198.51.100.1"), xff("203.0.113.7")),
			wantKey: "ip:203.0.113.7",
		},
		{name: "unix socket peer", req: newRequest("@", xff("203.0.113.7")), wantKey: "ip:203.0.113.7"},
		{name: "no header", req: newRequest("10.0.0.1:1"), wantErr: ErrNoKey},
		{name: "only empty elements", req: newRequest("10.0.0.1:1", xff(" , ,")), wantErr: ErrNoKey},
		{name: "garbage", req: newRequest("10.0.0.1:1", xff("198.51.100.1, bogus")), wantErr: ErrInvalidAddress},
		{
			name:    "garbage left of the client is never read",
			req:     newRequest("10.0.0.1:1", xff("bogus, 203.0.113.7")),
			wantKey: "ip:203.0.113.7",
		},
		{name: "IPv4-mapped", req: newRequest("10.0.0.1:1", xff("::ffff:203.0.113.7")), wantKey: "ip:203.0.113.7"},
		{name: "zone", req: newRequest("10.0.0.1:1", xff("fe80::1%eth0")), wantKey: "ip:fe80::/64"},
		{
			name:    "1 MB header",
			req:     newRequest("10.0.0.1:1", xff(megabyte("198.51.100.1, ", "203.0.113.7"))),
			wantKey: "ip:203.0.113.7",
		},
	})
	runKeyCases(t, ForwardedForHops(2), []keyCase{
		{
			name:    "two hops",
			req:     newRequest("10.0.0.1:1", xff("198.51.100.1, 203.0.113.7, 192.0.2.1")),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "two hops over several lines",
			req:     newRequest("10.0.0.1:1", xff("198.51.100.1"), xff("203.0.113.7"), xff("192.0.2.1")),
			wantKey: "ip:203.0.113.7",
		},
		{name: "fewer hops than proxies", req: newRequest("10.0.0.1:1", xff("203.0.113.7")), wantErr: ErrMalformedHeader},
		{
			name:    "garbage right of the client",
			req:     newRequest("10.0.0.1:1", xff("203.0.113.7, bogus")),
			wantErr: ErrInvalidAddress,
		},
	})
}

func TestTrustedHeader(t *testing.T) {
	runKeyCases(t, TrustedHeader("X-Real-IP", testTrusted...), []keyCase{
		{
			name:    "untrusted peer sends the header",
			req:     newRequest("203.0.113.7:1", hdr{"X-Real-IP", "198.51.100.1"}),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "untrusted peer sends garbage",
			req:     newRequest("203.0.113.7:1", hdr{"X-Real-IP", "bogus"}),
			wantKey: "ip:203.0.113.7",
		},
		{name: "trusted peer", req: newRequest("10.0.0.1:1", hdr{"X-Real-IP", "203.0.113.7"}), wantKey: "ip:203.0.113.7"},
		{
			name:    "header name is case-insensitive",
			req:     newRequest("10.0.0.1:1", hdr{"x-real-ip", "203.0.113.7"}),
			wantKey: "ip:203.0.113.7",
		},
		{name: "trusted peer without header", req: newRequest("10.0.0.1:1"), wantErr: ErrNoKey},
		{name: "empty header", req: newRequest("10.0.0.1:1", hdr{"X-Real-IP", " "}), wantErr: ErrNoKey},
		{
			name:    "several lines",
			req:     newRequest("10.0.0.1:1", hdr{"X-Real-IP", "198.51.100.1"}, hdr{"X-Real-IP", "203.0.113.7"}),
			wantErr: ErrMalformedHeader,
		},
		{
			name:    "a list",
			req:     newRequest("10.0.0.1:1", hdr{"X-Real-IP", "198.51.100.1, 203.0.113.7"}),
			wantErr: ErrMalformedHeader,
		},
		{name: "garbage", req: newRequest("10.0.0.1:1", hdr{"X-Real-IP", "bogus"}), wantErr: ErrInvalidAddress},
		{
			name:    "IPv4-mapped",
			req:     newRequest("10.0.0.1:1", hdr{"X-Real-IP", "::ffff:203.0.113.7"}),
			wantKey: "ip:203.0.113.7",
		},
		{name: "zone", req: newRequest("10.0.0.1:1", hdr{"X-Real-IP", "fe80::1%eth0"}), wantKey: "ip:fe80::/64"},
		{name: "port", req: newRequest("10.0.0.1:1", hdr{"X-Real-IP", "203.0.113.7:4711"}), wantKey: "ip:203.0.113.7"},
		{
			name:    "IPv6 grouped",
			req:     newRequest("[fd00::1]:1", hdr{"X-Real-IP", "2001:db8:1:2:3:4:5:6"}),
			wantKey: "ip:2001:db8:1:2::/64",
		},
		{
			name:    "1 MB header",
			req:     newRequest("10.0.0.1:1", hdr{"X-Real-IP", megabyte("9", "")}),
			wantErr: ErrInvalidAddress,
		},
		{name: "unix socket peer", req: newRequest("@", hdr{"X-Real-IP", "203.0.113.7"}), wantErr: ErrInvalidAddress},
	})

	cloudflare := MustParsePrefixes("173.245.48.0/20", "2400:cb00::/32")
	runKeyCases(t, TrustedHeader("CF-Connecting-IP", cloudflare...), []keyCase{
		{
			name:    "from Cloudflare",
			req:     newRequest("173.245.48.10:1", hdr{"CF-Connecting-IP", "203.0.113.7"}),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "from Cloudflare over IPv6",
			req:     newRequest("[2400:cb00::1]:1", hdr{"CF-Connecting-IP", "203.0.113.7"}),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "origin hit directly",
			req:     newRequest("198.51.100.1:1", hdr{"CF-Connecting-IP", "203.0.113.7"}),
			wantKey: "ip:198.51.100.1",
		},
	})
}

func TestNoTrustIsRemoteIP(t *testing.T) {
	req := newRequest("203.0.113.7:1", xff("198.51.100.1"), hdr{"X-Real-IP", "198.51.100.1"}, hdr{"Forwarded", "for=198.51.100.1"})
	for name, f := range map[string]Func{
		"ForwardedFor":  ForwardedFor(),
		"TrustedHeader": TrustedHeader("X-Real-IP"),
		"Forwarded":     Forwarded(),
	} {
		if got, err := f(req); err != nil || got != "ip:203.0.113.7" {
			t.Errorf("%s without trusted proxies: got %q, %v; want the peer", name, got, err)
		}
	}
}

func TestTrustSetNormalises(t *testing.T) {
	f := ForwardedFor(
		netip.MustParsePrefix("::ffff:10.0.0.0/104"), // IPv4-mapped form of 10.0.0.0/8
		netip.MustParsePrefix("192.168.1.77/24"),     // host bits set
	)
	for _, peer := range []string{"10.1.2.3:1", "[::ffff:10.1.2.3]:1", "192.168.1.1:1"} {
		if got, err := f(newRequest(peer, xff("203.0.113.7"))); err != nil || got != "ip:203.0.113.7" {
			t.Errorf("peer %s: got %q, %v; want it trusted", peer, got, err)
		}
	}
}

func TestConstructorPanics(t *testing.T) {
	for name, build := range map[string]func(){
		"IPv6Prefix(0)":               func() { IPv6Prefix(0) },
		"IPv6Prefix(31)":              func() { IPv6Prefix(31) },
		"IPv6Prefix(129)":             func() { IPv6Prefix(129) },
		"ForwardedForHops(0)":         func() { ForwardedForHops(0) },
		"ForwardedFor(invalid)":       func() { ForwardedFor(netip.Prefix{}) },
		"ForwardedFor(0.0.0.0/0)":     func() { ForwardedFor(netip.MustParsePrefix("0.0.0.0/0")) },
		"Forwarded(::/0)":             func() { Forwarded(netip.MustParsePrefix("::/0")) },
		"ForwardedFor(::ffff:0:0/96)": func() { ForwardedFor(netip.MustParsePrefix("::ffff:0:0/96")) }, // 0.0.0.0/0, mapped
		"TrustedHeader(empty)":        func() { TrustedHeader("", testTrusted...) },
		"TrustedHeader(bad name)":     func() { TrustedHeader("X Real IP", testTrusted...) },
		"TrustedHeader(0.0.0.0/0)":    func() { TrustedHeader("X-Real-IP", netip.MustParsePrefix("0.0.0.0/0")) },
		"Header(empty)":               func() { Header("") },
		"Header(colon)":               func() { Header("X-Key:") },
		"Join()":                      func() { Join() },
		"Join(nil)":                   func() { Join(RemoteIP(), nil) },
		"FirstOf()":                   func() { FirstOf() },
		"ContextValue(nil)":           func() { ContextValue(nil) },
		"ContextValue([]int)":         func() { ContextValue([]int{1}) },
		"RouteFrom(nil)":              func() { RouteFrom(nil) },
		"MustParsePrefixes(bad)":      func() { MustParsePrefixes("bogus") },
	} {
		t.Run(name, func(t *testing.T) {
			defer func() {
				r := recover()
				if r == nil {
					t.Fatal("did not panic")
				}
				msg, ok := r.(string)
				if !ok {
					msg = r.(error).Error()
				}
				if !strings.HasPrefix(msg, "keyfunc: ") {
					t.Errorf("panic message %q does not start with \"keyfunc: \"", msg)
				}
			}()
			build()
		})
	}
}

func TestParseAddr(t *testing.T) {
	for _, tc := range []struct {
		in      string
		obfPort bool
		want    string // "" means not an address
	}{
		{"192.0.2.1", false, "192.0.2.1"},
		{"192.0.2.1:0", false, "192.0.2.1"},
		{"192.0.2.1:65535", false, "192.0.2.1"},
		{"192.0.2.1:65536", false, ""},
		{"192.0.2.1:", false, ""},
		{"192.0.2.1:080x", false, ""},
		{"192.0.2.1:_abc", false, ""},
		{"192.0.2.1:_abc", true, "192.0.2.1"},
		{"192.0.2.1:_", true, ""},
		{"192.0.2.1:_a/b", true, ""},
		{"2001:db8::1", false, "2001:db8::1"},
		{"[2001:db8::1]", false, "2001:db8::1"},
		{"[2001:db8::1]:80", false, "2001:db8::1"},
		{"[2001:db8::1]80", false, ""},
		{"[2001:db8::1", false, ""},
		{"[192.0.2.1]", false, ""},
		{"::ffff:192.0.2.1", false, "192.0.2.1"},
		{"[::ffff:192.0.2.1]:80", false, "192.0.2.1"},
		{"fe80::1%eth0", false, "fe80::1"},
		{"[fe80::1%eth0]:80", false, "fe80::1"},
		{"192.0.2.1%eth0", false, ""},
		{"", false, ""},
		{" 192.0.2.1", false, ""},
		{"192.0.2", false, ""},
		{"a:b", false, ""},
		{strings.Repeat("1", maxAddrLen+1), false, ""},
	} {
		a, ok := parseAddr(tc.in, tc.obfPort)
		got := ""
		if ok {
			got = a.String()
		}
		if got != tc.want {
			t.Errorf("parseAddr(%q, %v) = %q; want %q", tc.in, tc.obfPort, got, tc.want)
		}
	}
}
