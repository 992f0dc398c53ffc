package keyfunc

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
)

// wellKnownNAT64 is the NAT64 well-known prefix of RFC 6052. Every IP
// strategy recognises it, with or without NAT64.
var wellKnownNAT64 = netip.MustParsePrefix("64:ff9b::/96")

// ipv4Mapped holds the IPv4-mapped IPv6 addresses, which are IPv4 addresses
// (every strategy unmaps them) and cannot be inside a NAT64 prefix.
var ipv4Mapped = netip.MustParsePrefix("::ffff:0:0/96")

// nat64Set holds the NAT64 prefixes given to IPv6Grouping.NAT64, longest
// first, so that the most specific prefix decides. It is never modified
// after construction, so IPv6Grouping values share it.
type nat64Set struct{ prefixes []netip.Prefix }

// NAT64 returns the IP strategies with the default /64 grouping that also
// recognise the given NAT64 prefixes: see IPv6Grouping.NAT64.
func NAT64(prefixes ...netip.Prefix) IPv6Grouping { return IPv6Grouping{}.NAT64(prefixes...) }

// NAT64 returns g also recognising the NAT64 prefixes of a translator in
// front of the service (the network-specific prefix it was configured
// with, such as 2001:db8:64::/96 or one taken from 64:ff9b:1::/48, RFC
// 8215). An IPv6 address inside one of them is an IPv4 client translated by
// NAT64, and is keyed by the IPv4 address it embeds: its key is exactly the
// key of the same IPv4 client connecting directly ("ip:198.51.100.7"), not
// the /64 that every IPv4 client behind the translator shares.
//
// The well-known prefix 64:ff9b::/96 is recognised without being listed.
// Prefix lengths 32, 40, 48, 56, 64 and 96 are the ones RFC 6052 defines,
// and each embeds the IPv4 address at its own place (skipping bits 64-71
// for the shorter ones); the length must be the one the translator uses,
// since the same address means a different IPv4 client under another
// length. When prefixes overlap, the longest one decides. List only
// prefixes that your translator owns: an address inside them is believed to
// carry the client's IPv4 address. Prefixes are matched against the client
// address that the strategy found (the peer, or the address a trusted proxy
// reported); trusted proxies are matched as they are.
//
// NAT64 panics on an invalid prefix, an IPv4 prefix, a prefix holding
// IPv4-mapped addresses (::ffff:0:0/96) or a length other than 32, 40, 48,
// 56, 64 or 96. It adds to the prefixes g already recognises.
func (g IPv6Grouping) NAT64(prefixes ...netip.Prefix) IPv6Grouping {
	var all []netip.Prefix
	if g.nat64 != nil {
		all = slices.Clone(g.nat64.prefixes)
	}
	for _, p := range prefixes {
		if !p.IsValid() {
			panic(fmt.Sprintf("keyfunc: NAT64: invalid prefix %v", p))
		}
		if a := p.Addr(); !a.Is6() || p.Overlaps(ipv4Mapped) {
			panic(fmt.Sprintf("keyfunc: NAT64(%v): a NAT64 prefix is an IPv6 prefix, not an IPv4 one or one holding IPv4-mapped addresses", p))
		}
		switch p.Bits() {
		case 32, 40, 48, 56, 64, 96:
		default:
			panic(fmt.Sprintf("keyfunc: NAT64(%v): RFC 6052 defines NAT64 prefix lengths 32, 40, 48, 56, 64 and 96 only", p))
		}
		all = append(all, p.Masked())
	}
	// Longest first, the longest match deciding; equal prefixes side by
	// side, so that Compact drops every repeat.
	slices.SortFunc(all, func(a, b netip.Prefix) int {
		return cmp.Or(cmp.Compare(b.Bits(), a.Bits()), a.Addr().Compare(b.Addr()))
	})
	g.nat64 = &nat64Set{prefixes: slices.Compact(all)}
	return g
}

// unNAT64 returns the IPv4 address embedded in a, when a is inside the
// well-known NAT64 prefix or one of g's, and a otherwise. It never
// allocates.
func (g IPv6Grouping) unNAT64(a netip.Addr) netip.Addr {
	if !a.Is6() {
		return a
	}
	if wellKnownNAT64.Contains(a) {
		return embeddedIPv4(a, 96)
	}
	if g.nat64 != nil {
		for _, p := range g.nat64.prefixes {
			if p.Contains(a) {
				return embeddedIPv4(a, p.Bits())
			}
		}
	}
	return a
}

// embeddedIPv4 extracts the IPv4 address that RFC 6052 section 2.2 embeds
// after a prefix of length bits (32, 40, 48, 56, 64 or 96): the 32 bits
// right after the prefix, skipping bits 64 to 71 (the "u" octet).
func embeddedIPv4(a netip.Addr, bits int) netip.Addr {
	b := a.As16()
	var v4 [4]byte
	i := bits / 8
	for k := range v4 {
		if i == 8 {
			i++
		}
		v4[k] = b[i]
		i++
	}
	return netip.AddrFrom4(v4)
}
