package keyfunc

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// TestNAT64WellKnownPrefix: behind a NAT64 translator using the well-known
// prefix 64:ff9b::/96 (RFC 6052), every IPv4 client appears inside one /64.
// Each must keep its own key, the key it would have connecting directly.
func TestNAT64WellKnownPrefix(t *testing.T) {
	runKeyCases(t, RemoteIP(), []keyCase{
		{"198.51.100.7", newRequest("[64:ff9b::c633:6407]:4711"), "ip:198.51.100.7", nil},
		{"203.0.113.9", newRequest("[64:ff9b::cb00:7109]:4711"), "ip:203.0.113.9", nil},
		{"dotted form", newRequest("[64:ff9b::198.51.100.7]:4711"), "ip:198.51.100.7", nil},
		{"next to the prefix", newRequest("[64:ff9b::1:c633:6407]:4711"), "ip:64:ff9b::/64", nil},
	})
}

// rfc6052Examples are the examples of RFC 6052 section 2.4: 192.0.2.33
// embedded after a prefix of each defined length.
var rfc6052Examples = []struct{ prefix, addr string }{
	{"2001:db8::/32", "2001:db8:c000:221::"},
	{"2001:db8:100::/40", "2001:db8:1c0:2:21::"},
	{"2001:db8:122::/48", "2001:db8:122:c000:2:2100::"},
	{"2001:db8:122:300::/56", "2001:db8:122:3c0:0:221::"},
	{"2001:db8:122:344::/64", "2001:db8:122:344:c0:2:2100:0"},
	{"2001:db8:122:344::/96", "2001:db8:122:344::192.0.2.33"},
}

func TestNAT64ConfiguredPrefix(t *testing.T) {
	for _, ex := range rfc6052Examples {
		t.Run(ex.prefix, func(t *testing.T) {
			f := NAT64(netip.MustParsePrefix(ex.prefix)).RemoteIP()
			checkKey(t, f, newRequest("["+ex.addr+"]:4711"), "ip:192.0.2.33", nil)
			checkKey(t, f, newRequest("192.0.2.33:4711"), "ip:192.0.2.33", nil) // the same client, directly
			// Outside the prefix: an ordinary IPv6 client.
			checkKey(t, f, newRequest("[2001:db9::1]:4711"), "ip:2001:db9::/64", nil)
			// The well-known prefix is still recognised.
			checkKey(t, f, newRequest("[64:ff9b::c000:221]:4711"), "ip:192.0.2.33", nil)
		})
	}
	// RFC 8215 local-use prefix, a /48: the address straddles the u octet.
	localUse := NAT64(netip.MustParsePrefix("64:ff9b:1::/48"))
	runKeyCases(t, localUse.RemoteIP(), []keyCase{
		{"local-use 198.51.100.7", newRequest("[64:ff9b:1:c633:64:700::]:1"), "ip:198.51.100.7", nil},
		{"local-use 203.0.113.9", newRequest("[64:ff9b:1:cb00:71:900::]:1"), "ip:203.0.113.9", nil},
	})
	// Without the configuration, the local-use block is ordinary IPv6.
	checkKey(t, RemoteIP(), newRequest("[64:ff9b:1:c633:64:700::]:1"), "ip:64:ff9b:1:c633::/64", nil)
}

func TestNAT64EveryStrategy(t *testing.T) {
	g := IPv6Prefix(56).NAT64(netip.MustParsePrefix("2001:db8:64::/96"))
	client := "2001:db8:64::cb00:7109" // 203.0.113.9
	for _, tc := range []struct {
		name string
		f    Func
		req  *http.Request
	}{
		{"RemoteIP", g.RemoteIP(), newRequest("[" + client + "]:1")},
		{"ForwardedFor", g.ForwardedFor(testTrusted...), newRequest("10.0.0.1:80", xff(client))},
		{"ForwardedForHops", g.ForwardedForHops(1), newRequest("10.0.0.1:80", xff(client))},
		{"TrustedHeader", g.TrustedHeader("X-Real-IP", testTrusted...), newRequest("10.0.0.1:80", hdr{"X-Real-IP", client})},
		{"Forwarded", g.Forwarded(testTrusted...), newRequest("10.0.0.1:80", fwd(`for="[`+client+`]"`))},
	} {
		t.Run(tc.name, func(t *testing.T) { checkKey(t, tc.f, tc.req, "ip:203.0.113.9", nil) })
	}
	// The grouping still applies to IPv6 clients outside the prefixes.
	checkKey(t, g.RemoteIP(), newRequest("[2001:db8:1:2aa::1]:1"), "ip:2001:db8:1:200::/56", nil)
	// So does the NAT64 decoding under a /128 grouping.
	checkKey(t, IPv6Prefix(128).RemoteIP(), newRequest("[64:ff9b::cb00:7109]:1"), "ip:203.0.113.9", nil)
}

func TestNAT64LongestPrefixDecides(t *testing.T) {
	g := NAT64(netip.MustParsePrefix("2001:db8::/32"), netip.MustParsePrefix("2001:db8:122:344::/96"))
	checkKey(t, g.RemoteIP(), newRequest("[2001:db8:122:344::192.0.2.33]:1"), "ip:192.0.2.33", nil)
	checkKey(t, g.RemoteIP(), newRequest("[2001:db8:c000:221::]:1"), "ip:192.0.2.33", nil)
	// Chained: the second call adds to the first.
	g = NAT64(netip.MustParsePrefix("2001:db8:122:344::/96")).NAT64(netip.MustParsePrefix("2001:db8::/32"))
	checkKey(t, g.RemoteIP(), newRequest("[2001:db8:122:344::192.0.2.33]:1"), "ip:192.0.2.33", nil)
}

func TestNAT64Panics(t *testing.T) {
	for _, tc := range []struct {
		name   string
		prefix netip.Prefix
		want   string
	}{
		{"invalid", netip.Prefix{}, "invalid prefix"},
		{"IPv4", netip.MustParsePrefix("192.0.2.0/24"), "not an IPv4"},
		{"IPv4-mapped", netip.MustParsePrefix("::ffff:0:0/96"), "IPv4-mapped"},
		{"holding IPv4-mapped", netip.MustParsePrefix("::/32"), "IPv4-mapped"},
		{"length 80", netip.MustParsePrefix("2001:db8::/80"), "lengths 32, 40, 48, 56, 64 and 96"},
		{"length 128", netip.MustParsePrefix("2001:db8::1/128"), "lengths 32, 40, 48, 56, 64 and 96"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer func() {
				msg, _ := recover().(string)
				if !strings.HasPrefix(msg, "keyfunc: NAT64") || !strings.Contains(msg, tc.want) {
					t.Errorf("panic %q; want a keyfunc: NAT64 message containing %q", msg, tc.want)
				}
			}()
			NAT64(tc.prefix)
		})
	}
}

// FuzzNAT64 embeds an IPv4 address after a prefix of each RFC 6052 length,
// with arbitrary prefix and suffix bits, and checks that the key is the
// IPv4 client's own key.
func FuzzNAT64(f *testing.F) {
	f.Add([]byte("\x20\x01\x0d\xb8\x01\x22\x03\x44\x00\x00\x00\x00\x00\x00\x00\x00"), []byte{192, 0, 2, 33}, uint8(5))
	f.Add([]byte("\x00\x64\xff\x9b\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"), []byte{198, 51, 100, 7}, uint8(2))
	f.Fuzz(func(t *testing.T, raw, v4 []byte, which uint8) {
		if len(raw) != 16 || len(v4) != 4 {
			return
		}
		lengths := [...]int{32, 40, 48, 56, 64, 96}
		bits := lengths[int(which)%len(lengths)]
		var b [16]byte
		copy(b[:], raw)
		i := bits / 8
		for k := range 4 {
			if i == 8 {
				i++
			}
			b[i] = v4[k]
			i++
		}
		a := netip.AddrFrom16(b)
		p := netip.PrefixFrom(a, bits).Masked()
		if p.Overlaps(ipv4Mapped) || wellKnownNAT64.Contains(a) {
			return
		}
		want := "ip:" + netip.AddrFrom4([4]byte(v4)).String()
		key, err := NAT64(p).RemoteIP()(&http.Request{RemoteAddr: "[" + a.String() + "]:1"})
		if err != nil || key != want {
			t.Fatalf("%v under %v: key %q, %v; want %q", a, p, key, err, want)
		}
	})
}
