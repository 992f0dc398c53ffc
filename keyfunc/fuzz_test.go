package keyfunc

import (
	"errors"
	"net/http"
	"net/netip"
	"strings"
	"testing"
)

// The fuzz targets below run their seeds (f.Add and testdata/fuzz) as
// ordinary tests; `go test -fuzz=^FuzzXxx$ ./keyfunc` explores further.
// Each asserts invariants rather than exact keys: no panic; a result is a
// bounded key with the right prefix or a short *KeyError; an address in an
// untrusted position never becomes the key.

// maxIPKeyLen is the longest "ip:" key: "ip:" and a full IPv6 address.
const maxIPKeyLen = len("ip:ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")

// checkResult asserts the invariants every Func result keeps.
func checkResult(t *testing.T, key string, err error, prefix string, maxLen int) {
	t.Helper()
	if err != nil {
		if key != "" {
			t.Fatalf("key %q returned with error %v", key, err)
		}
		var ke *KeyError
		if !errors.As(err, &ke) {
			t.Fatalf("error %v (%T) is not a *KeyError", err, err)
		}
		if !errors.Is(err, ErrNoKey) && !errors.Is(err, ErrInvalidAddress) && !errors.Is(err, ErrMalformedHeader) {
			t.Fatalf("error %v wraps no sentinel", err)
		}
		if n := len(err.Error()); n > 250 {
			t.Fatalf("error message is %d bytes", n)
		}
		return
	}
	if !strings.HasPrefix(key, prefix) {
		t.Fatalf("key %q lacks prefix %q", key, prefix)
	}
	if len(key) > maxLen {
		t.Fatalf("key %q is longer than %d bytes", key, maxLen)
	}
}

// checkIPKey asserts that an "ip:" key holds a normalised address or a
// /64 network.
func checkIPKey(t *testing.T, key string) {
	t.Helper()
	s := strings.TrimPrefix(key, "ip:")
	if p, err := netip.ParsePrefix(s); err == nil {
		if p.Bits() != defaultIPv6Bits || !p.Addr().Is6() || p.Addr().Is4In6() || p != p.Masked() {
			t.Fatalf("key %q is not an IPv6 /64 network", key)
		}
		return
	}
	a, err := netip.ParseAddr(s)
	if err != nil || !a.Is4() {
		t.Fatalf("key %q is neither an IPv4 address nor an IPv6 network", key)
	}
}

func headerRequest(peer, name string, lines ...string) *http.Request {
	return &http.Request{RemoteAddr: peer, Header: http.Header{name: lines}}
}

// referenceXFF is a deliberately naive X-Forwarded-For walk: split every
// line, keep the non-empty elements, walk from the right.
func referenceXFF(lines []string, trust trustSet, peer netip.Addr) (netip.Addr, bool) {
	var all []string
	for _, l := range lines {
		for _, e := range strings.Split(l, ",") {
			if e = strings.Trim(e, " \t"); e != "" {
				all = append(all, e)
			}
		}
	}
	client := peer
	for i := len(all) - 1; i >= 0; i-- {
		a, ok := parseAddr(all[i], false)
		if !ok {
			return netip.Addr{}, false
		}
		if !trust.contains(a) {
			return a, true
		}
		client = a
	}
	return client, true
}

func FuzzRemoteAddr(f *testing.F) {
	for _, s := range []string{
		"203.0.113.7:4711", "203.0.113.7", "[2001:db8::1]:80", "2001:db8::1", "[::ffff:10.0.0.1]:1",
		"[fe80::1%eth0]:80", "@", "", "[203.0.113.7]:80", "203.0.113.7:65536", "1.2.3.4:000080",
		"[64:ff9b::c633:6407]:4711",
	} {
		f.Add(s)
	}
	remoteIP := RemoteIP()
	f.Fuzz(func(t *testing.T, s string) {
		key, err := remoteIP(&http.Request{RemoteAddr: s})
		checkResult(t, key, err, "ip:", maxIPKeyLen)
		a, ok := parseAddr(s, false)
		if ok != (err == nil) {
			t.Fatalf("parseAddr ok=%v but RemoteIP error %v", ok, err)
		}
		if !ok {
			if !errors.Is(err, ErrInvalidAddress) {
				t.Fatalf("unparseable peer gave %v", err)
			}
		} else {
			checkIPKey(t, key)
			if !a.IsValid() || a.Zone() != "" || a.Is4In6() {
				t.Fatalf("parseAddr(%q) = %v is not normalised", s, a)
			}
			if b, ok := parseAddr(a.String(), false); !ok || b != a {
				t.Fatalf("%v does not round-trip: %v, %v", a, b, ok)
			}
			// A NAT64 address is keyed as the IPv4 client it embeds.
			if wellKnownNAT64.Contains(a) {
				b := a.As16()
				if want := "ip:" + netip.AddrFrom4([4]byte(b[12:])).String(); key != want {
					t.Fatalf("NAT64 peer %v: key %q, want %q", a, key, want)
				}
			}
		}
		// Whatever netip parses, parseAddr parses too, to the same address.
		if len(s) > maxAddrLen {
			return
		}
		if ap, err := netip.ParseAddrPort(s); err == nil && (!ok || a != ap.Addr().WithZone("").Unmap()) {
			t.Fatalf("netip parses %q as %v; parseAddr gives %v, %v", s, ap, a, ok)
		}
		if na, err := netip.ParseAddr(s); err == nil && (!ok || a != na.WithZone("").Unmap()) {
			t.Fatalf("netip parses %q as %v; parseAddr gives %v, %v", s, na, a, ok)
		}
	})
}

func FuzzForwardedFor(f *testing.F) {
	for _, seed := range [][4]string{
		{"10.0.0.1:1", "203.0.113.7", "", "6.6.6.6"},
		{"10.0.0.1:1", "198.51.100.1, 203.0.113.7", "10.0.0.2", "6.6.6.6"},
		{"203.0.113.7:1", "198.51.100.1", "", "10.0.0.9"},
		{"10.0.0.1:1", "10.0.0.5, 10.0.0.2", "", "6.6.6.6"},
		{"[fd00::1%eth0]:1", "::ffff:203.0.113.7", "fd00::2", "bogus"},
		{"10.0.0.1:1", "bogus", "", ""},
		{"10.0.0.1:1", "bogus, 203.0.113.7", ",, ,", "x"},
		{"10.0.0.1:1", "[2001:db8::1]:80", "", ""},
		{"@", "203.0.113.7", "", ""},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	forwardedFor := ForwardedFor(testTrusted...)
	trust := newTrustSet("", testTrusted)
	f.Fuzz(func(t *testing.T, peer, line1, line2, spoof string) {
		lines := []string{line1, line2}
		key, err := forwardedFor(headerRequest(peer, xForwardedFor, lines...))
		checkResult(t, key, err, "ip:", maxIPKeyLen)
		if err == nil {
			checkIPKey(t, key)
		}
		peerAddr, ok := parseAddr(peer, false)
		if !ok {
			if !errors.Is(err, ErrInvalidAddress) {
				t.Fatalf("unparseable peer %q gave %q, %v", peer, key, err)
			}
			return
		}
		if !trust.contains(peerAddr) {
			if want := (IPv6Grouping{}).addrKey(peerAddr); key != want {
				t.Fatalf("untrusted peer %v: key %q, %v; want the peer's %q", peerAddr, key, err, want)
			}
			return
		}
		want, ok := referenceXFF(lines, trust, peerAddr)
		if !ok {
			if !errors.Is(err, ErrInvalidAddress) {
				t.Fatalf("reference walk meets garbage; got %q, %v", key, err)
			}
			return
		}
		if wantKey := (IPv6Grouping{}).addrKey(want); key != wantKey {
			t.Fatalf("key %q, %v; reference walk gives %q", key, err, wantKey)
		}
		if trust.contains(want) {
			return // every hop trusted: the leftmost counts, so prepending may change it
		}
		// The client found is untrusted: nothing a client adds on the left,
		// in the same line or in lines of its own, changes the key.
		spoofed := []string{spoof, spoof + ", " + line1, line2}
		if got, err := forwardedFor(headerRequest(peer, xForwardedFor, spoofed...)); got != key {
			t.Fatalf("spoofed %q changed the key from %q to %q, %v", spoof, key, got, err)
		}
	})
}

func FuzzForwardedForHops(f *testing.F) {
	f.Add(uint8(1), "198.51.100.1, 203.0.113.7", "")
	f.Add(uint8(2), "198.51.100.1", "203.0.113.7, 10.0.0.1")
	f.Add(uint8(2), "203.0.113.7", "")
	f.Add(uint8(1), "", " , ")
	f.Add(uint8(3), "a, b, c", "1.2.3.4")
	f.Fuzz(func(t *testing.T, n uint8, line1, line2 string) {
		hops := int(n%4) + 1
		lines := []string{line1, line2}
		key, err := ForwardedForHops(hops)(headerRequest("@", xForwardedFor, lines...))
		checkResult(t, key, err, "ip:", maxIPKeyLen)
		var all []string
		for _, l := range lines {
			for _, e := range strings.Split(l, ",") {
				if e = strings.Trim(e, " \t"); e != "" {
					all = append(all, e)
				}
			}
		}
		switch {
		case len(all) == 0:
			if !errors.Is(err, ErrNoKey) {
				t.Fatalf("no addresses: got %q, %v", key, err)
			}
		case err == nil:
			a, _ := parseAddr(all[len(all)-hops], false)
			if want := (IPv6Grouping{}).addrKey(a); key != want {
				t.Fatalf("key %q; want %q (hop %d of %q)", key, want, hops, all)
			}
		case len(all) >= hops && errors.Is(err, ErrMalformedHeader):
			t.Fatalf("enough addresses %q but %v", all, err)
		}
	})
}

func FuzzTrustedHeader(f *testing.F) {
	f.Add("10.0.0.1:1", "203.0.113.7", "")
	f.Add("203.0.113.7:1", "198.51.100.1", "")
	f.Add("10.0.0.1:1", "198.51.100.1", "203.0.113.7")
	f.Add("10.0.0.1:1", "198.51.100.1, 203.0.113.7", "")
	f.Add("[::ffff:10.0.0.1]:1", "fe80::1%eth0", "")
	f.Add("10.0.0.1:1", "bogus", "")
	f.Fuzz(func(t *testing.T, peer, v1, v2 string) {
		lines := []string{v1, v2}
		key, err := TrustedHeader("X-Real-IP", testTrusted...)(headerRequest(peer, "X-Real-Ip", lines...))
		checkResult(t, key, err, "ip:", maxIPKeyLen)
		if err == nil {
			checkIPKey(t, key)
		}
		peerAddr, ok := parseAddr(peer, false)
		if !ok {
			return
		}
		if !newTrustSet("", testTrusted).contains(peerAddr) {
			if want := (IPv6Grouping{}).addrKey(peerAddr); key != want {
				t.Fatalf("untrusted peer: key %q, %v; want %q", key, err, want)
			}
			return
		}
		var values []string
		for _, v := range lines {
			if v = trimOWS(v); v != "" {
				values = append(values, v)
			}
		}
		if len(values) != 1 || strings.Contains(values[0], ",") {
			if err == nil {
				t.Fatalf("values %q gave key %q", values, key)
			}
			return
		}
		if a, ok := parseAddr(values[0], false); ok != (err == nil) || ok && key != (IPv6Grouping{}).addrKey(a) {
			t.Fatalf("value %q gave %q, %v", values[0], key, err)
		}
	})
}

// splitForwarded splits a line into elements left to right, the way a
// strict RFC 7239 parser does; ok is false on an unterminated quoted string.
func splitForwarded(line string) (elems []string, ok bool) {
	start, inQuote := 0, false
	for i := 0; i < len(line); i++ {
		switch c := line[i]; {
		case inQuote && c == '\\':
			i++
		case c == '"':
			inQuote = !inQuote
		case c == ',' && !inQuote:
			elems = append(elems, line[start:i])
			start = i + 1
		}
	}
	return append(elems, line[start:]), !inQuote
}

func FuzzForwarded(f *testing.F) {
	for _, seed := range [][4]string{
		{"10.0.0.1:1", "for=203.0.113.7", "", "for=6.6.6.6"},
		{"10.0.0.1:1", `for=198.51.100.1, for="[2001:db8::1]:4711";proto=https`, `for="[fd00::2]"`, `for="`},
		{"10.0.0.1:1", `for=_hidden, for=unknown`, "", ""},
		{"10.0.0.1:1", `for="unterminated, for=203.0.113.7`, "", `"`},
		{"10.0.0.1:1", `for=203.0.113.7;host="a,b\"c"`, "", "x"},
		{"10.0.0.1:1", `proto=http;by=10.0.0.1`, "", ""},
		{"203.0.113.7:1", `for=198.51.100.1`, "", ""},
		{"10.0.0.1:1", `for=10.0.0.5, for=10.0.0.2`, "", "for=6.6.6.6"},
		{"10.0.0.1:1", `for="203.0.113\.7:_port"`, "", ""},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3])
	}
	fwd := Forwarded(testTrusted...)
	trust := newTrustSet("", testTrusted)
	f.Fuzz(func(t *testing.T, peer, line1, line2, spoof string) {
		lines := []string{line1, line2}
		key, err := fwd(headerRequest(peer, forwarded, lines...))
		checkResult(t, key, err, "ip:", maxIPKeyLen)
		if err == nil {
			checkIPKey(t, key)
		}
		peerAddr, ok := parseAddr(peer, false)
		if !ok {
			return
		}
		if !trust.contains(peerAddr) {
			if want := (IPv6Grouping{}).addrKey(peerAddr); key != want {
				t.Fatalf("untrusted peer: key %q, %v; want %q", key, err, want)
			}
			return
		}
		client, cerr := clientFromForwarded(lines, trust, peerAddr)
		if (cerr == nil) != (err == nil) || err == nil && key != (IPv6Grouping{}).addrKey(client) {
			t.Fatalf("Func gave %q, %v; walk gave %v, %v", key, err, client, cerr)
		}

		// Differential: when a strict left-to-right split succeeds, walking
		// its elements gives the same answer.
		var all []string
		strict := true
		for _, l := range lines {
			elems, ok := splitForwarded(l)
			strict = strict && ok
			all = append(all, elems...)
		}
		if strict {
			want, werr := peerAddr, error(nil)
			for i := len(all) - 1; i >= 0; i-- {
				e := trimOWS(all[i])
				if e == "" {
					continue
				}
				a, err := forwardedFor(e)
				if err != nil {
					werr = err
					break
				}
				want = a
				if !trust.contains(a) {
					break
				}
			}
			if (werr == nil) != (cerr == nil) || werr == nil && want != client {
				t.Fatalf("right-to-left walk gave %v, %v; strict split gives %v, %v", client, cerr, want, werr)
			}
		}

		if cerr != nil || trust.contains(client) {
			return
		}
		// The client found is untrusted: nothing a client adds on the left
		// changes the key, however broken.
		spoofed := []string{spoof, spoof + ", " + line1, line2}
		if got, err := fwd(headerRequest(peer, forwarded, spoofed...)); got != key {
			t.Fatalf("spoofed %q changed the key from %q to %q, %v", spoof, key, got, err)
		}
	})
}

func FuzzHeader(f *testing.F) {
	f.Add("abc123", "abc124")
	f.Add(strings.Repeat("k", 64), strings.Repeat("k", 65))
	f.Add("a\x00b", "a b")
	f.Add("clé", "cl\xe9")
	f.Add("", " ")
	header := Header("X-API-Key")
	maxLen := len("hdr#x-api-key:") + 32
	f.Fuzz(func(t *testing.T, v1, v2 string) {
		k1, err1 := header(headerRequest("203.0.113.7:1", "X-Api-Key", v1))
		k2, err2 := header(headerRequest("203.0.113.7:1", "X-Api-Key", v2))
		checkResult(t, k1, err1, "hdr", maxLen)
		checkResult(t, k2, err2, "hdr", maxLen)
		if err1 != nil {
			if trimOWS(v1) != "" || !errors.Is(err1, ErrNoKey) {
				t.Fatalf("value %q gave %v", v1, err1)
			}
			return
		}
		if k1 != "hdr#x-api-key:"+sha16(trimOWS(v1)) {
			t.Fatalf("value %q gave key %q", v1, k1)
		}
		if err2 == nil && (k1 == k2) != (trimOWS(v1) == trimOWS(v2)) {
			t.Fatalf("values %q and %q gave keys %q and %q", v1, v2, k1, k2)
		}
	})
}

// unjoin decodes a Join key, to check that no information is lost.
func unjoin(k string) []string {
	k = strings.TrimPrefix(k, "join:")
	var parts []string
	var b strings.Builder
	for i := 0; i < len(k); i++ {
		switch k[i] {
		case '\\':
			i++
			b.WriteByte(k[i])
		case '|':
			parts = append(parts, b.String())
			b.Reset()
		default:
			b.WriteByte(k[i])
		}
	}
	return append(parts, b.String())
}

func FuzzJoin(f *testing.F) {
	f.Add("a", "b|c", "a|b", "c")
	f.Add(`a\`, "|b", `a\|`, "b")
	f.Add("join:x", "y", "join:x|y", "z")
	f.Add("a", "b", "a|b", "") // an empty part
	f.Fuzz(func(t *testing.T, a, b, c, d string) {
		if a == "" || b == "" || c == "" || d == "" {
			// An empty part is an ErrNoKey, never a key (TestJoinIsInjective).
			if _, err := Join(constKey(a), constKey(b), constKey(c), constKey(d))(nil); !errors.Is(err, ErrNoKey) {
				t.Fatalf("(%q, %q, %q, %q): %v; want ErrNoKey", a, b, c, d, err)
			}
			return
		}
		ab, _ := Join(constKey(a), constKey(b))(nil)
		cd, _ := Join(constKey(c), constKey(d))(nil)
		single, _ := Join(constKey(a))(nil)
		if (ab == cd) != (a == c && b == d) {
			t.Fatalf("(%q, %q) -> %q and (%q, %q) -> %q", a, b, ab, c, d, cd)
		}
		if single == cd {
			t.Fatalf("(%q) and (%q, %q) both join to %q", a, c, d, cd)
		}
		if got := unjoin(ab); len(got) != 2 || got[0] != a || got[1] != b {
			t.Fatalf("%q decodes to %q; want [%q %q]", ab, got, a, b)
		}
	})
}

func FuzzParsePrefixes(f *testing.F) {
	f.Add("10.0.0.0/8, 192.0.2.1 2400:cb00::/32")
	f.Add("0.0.0.0/0")
	f.Add("fe80::1%eth0, ::ffff:10.0.0.0/104")
	f.Add("10.0.0.1/8\n")
	f.Fuzz(func(t *testing.T, s string) {
		ps, err := ParsePrefixes(s)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "keyfunc: ") || ps != nil {
				t.Fatalf("got %v, %v", ps, err)
			}
			return
		}
		for _, p := range ps {
			if !p.IsValid() || p.Bits() == 0 || p != p.Masked() {
				t.Fatalf("%q gave prefix %v", s, p)
			}
		}
		if len(ps) > 0 {
			newTrustSet("FuzzParsePrefixes", ps) // must not panic
		}
	})
}
