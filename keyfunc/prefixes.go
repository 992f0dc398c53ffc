package keyfunc

import (
	"fmt"
	"net/netip"
	"strings"
)

// ParsePrefixes parses trusted proxy networks from configuration, such as an
// environment variable or a file with Cloudflare's published ranges. Each
// argument may hold several entries separated by commas or whitespace; an
// entry is a CIDR prefix ("10.0.0.0/8", "2400:cb00::/32") or a single
// address ("192.0.2.10", meaning /32 or /128). Host bits are masked off.
// Empty input gives an empty list.
//
// A prefix of length 0 ("0.0.0.0/0", "::/0") is an error: trusting every
// address lets every client choose its key.
func ParsePrefixes(list ...string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range list {
		for _, entry := range strings.FieldsFunc(s, func(r rune) bool {
			return r == ',' || r == ' ' || r == '\t' || r == '\n' || r == '\r'
		}) {
			p, err := parsePrefix(entry)
			if err != nil {
				return nil, err
			}
			out = append(out, p)
		}
	}
	return out, nil
}

func parsePrefix(entry string) (netip.Prefix, error) {
	var p netip.Prefix
	if strings.IndexByte(entry, '/') >= 0 {
		var err error
		if p, err = netip.ParsePrefix(entry); err != nil {
			return netip.Prefix{}, fmt.Errorf("keyfunc: invalid trusted proxy network %q: %w", entry, err)
		}
	} else {
		a, err := netip.ParseAddr(entry)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("keyfunc: invalid trusted proxy address %q: %w", entry, err)
		}
		a = a.WithZone("")
		p = netip.PrefixFrom(a, a.BitLen())
	}
	if _, ok := trustedPrefix(p); !ok {
		return netip.Prefix{}, fmt.Errorf("keyfunc: trusted proxy network %q trusts every address, which lets every client choose its key", entry)
	}
	return p.Masked(), nil
}

// MustParsePrefixes is ParsePrefixes for lists fixed in the source code; it
// panics on an error.
func MustParsePrefixes(list ...string) []netip.Prefix {
	ps, err := ParsePrefixes(list...)
	if err != nil {
		panic(err)
	}
	return ps
}
