package keyfunc

import (
	"net/netip"
	"strings"
)

// Forwarded returns the Func keying a request by the client address in the
// RFC 7239 Forwarded header, believed only as far as trustedProxies vouch for
// it. The trust walk is ForwardedFor's: an untrusted peer is the client;
// otherwise all Forwarded lines and their comma-separated elements are merged
// into one list and walked from the right, skipping the for= address of
// every element that is in trustedProxies; the first untrusted for= address
// is the client (the leftmost one if all are trusted).
//
// Each element walked must be well-formed and carry exactly one for=
// parameter; its node may be an IPv4 address, a bracketed IPv6 address (as a
// quoted string, "[2001:db8::1]:4711"), with an optional port, numeric or
// obfuscated. An obfuscated node ("for=_hidden") or "for=unknown" cannot be
// keyed and is an ErrInvalidAddress; broken syntax or a missing for= is an
// ErrMalformedHeader. Elements to the left of the client are never parsed,
// so a client cannot turn its request into an error by sending a broken
// header of its own. Parsing is lenient only where that cannot change whose
// address is believed: unquoted values may contain ':' and brackets, and an
// IPv6 node may lack its brackets.
//
// With no trustedProxies Forwarded is RemoteIP. It panics on an invalid prefix
// or a prefix of length 0. For an IPv4 client the Func allocates only the key.
func Forwarded(trustedProxies ...netip.Prefix) Func {
	return IPv6Grouping{}.Forwarded(trustedProxies...)
}

// Forwarded is the package-level Forwarded with g's IPv6 grouping.
func (g IPv6Grouping) Forwarded(trustedProxies ...netip.Prefix) Func {
	return g.behindProxies("Forwarded", forwarded, trustedProxies, clientFromForwarded)
}

// clientFromForwarded walks the merged Forwarded lines from the right and
// returns the first for= address not in trust, or the leftmost one if all
// are trusted (peer if there is none). It does not allocate unless it fails
// or a quoted node contains a backslash escape.
func clientFromForwarded(lines []string, trust trustSet, peer netip.Addr) (netip.Addr, error) {
	client := peer
	for i := len(lines) - 1; i >= 0; i-- {
		for line := lines[i]; line != ""; {
			elem, rest, ok := lastForwardedElement(line)
			if !ok {
				return netip.Addr{}, newKeyError(forwarded, detail(ErrMalformedHeader, "unterminated quoted string"), line)
			}
			line = rest
			if elem = trimOWS(elem); elem == "" {
				continue
			}
			a, err := forwardedFor(elem)
			if err != nil {
				return netip.Addr{}, err
			}
			if !trust.contains(a) {
				return a, nil
			}
			client = a
		}
	}
	return client, nil
}

// lastForwardedElement splits the last forwarded-element off a line: the text
// after the last comma that is outside a quoted string. Scanning from the
// right, a '"' is a delimiter unless an odd number of backslashes precedes
// it; for the well-formed elements a proxy writes, this finds the same
// boundaries as a left-to-right parse. ok is false when a quoted string is
// not closed before the start of the line.
func lastForwardedElement(line string) (elem, rest string, ok bool) {
	inQuote := false
	for i := len(line) - 1; i >= 0; i-- {
		switch line[i] {
		case '"':
			if !escaped(line, i) {
				inQuote = !inQuote
			}
		case ',':
			if !inQuote {
				return line[i+1:], line[:i], true
			}
		}
	}
	if inQuote {
		return "", "", false
	}
	return line, "", true
}

// escaped reports whether an odd number of backslashes precedes s[i].
func escaped(s string, i int) bool {
	n := 0
	for i--; i >= 0 && s[i] == '\\'; i-- {
		n++
	}
	return n%2 == 1
}

// forwardedFor parses one forwarded-element (pairs "token=value" separated by
// ';', values tokens or quoted strings) and returns its for= node as an
// address.
func forwardedFor(elem string) (netip.Addr, error) {
	var node string
	var quoted, found bool
	for s := elem; s != ""; {
		if s[0] == ';' { // empty pair
			s = trimOWS(s[1:])
			continue
		}
		i := 0
		for i < len(s) && isTchar(s[i]) {
			i++
		}
		if i == 0 || i == len(s) || s[i] != '=' {
			return netip.Addr{}, newKeyError(forwarded, detail(ErrMalformedHeader, "expected name=value"), elem)
		}
		name := s[:i]
		s = s[i+1:]
		var value string
		var q bool
		if s != "" && s[0] == '"' {
			end := closingQuote(s)
			if end < 0 {
				return netip.Addr{}, newKeyError(forwarded, detail(ErrMalformedHeader, "unterminated quoted string"), elem)
			}
			value, q, s = s[1:end], true, s[end+1:]
		} else {
			j := 0
			for j < len(s) && isValueChar(s[j]) {
				j++
			}
			if j == 0 {
				return netip.Addr{}, newKeyError(forwarded, detail(ErrMalformedHeader, "empty value"), elem)
			}
			value, s = s[:j], s[j:]
		}
		if strings.EqualFold(name, "for") {
			if found {
				return netip.Addr{}, newKeyError(forwarded, detail(ErrMalformedHeader, "for= given twice"), elem)
			}
			node, quoted, found = value, q, true
		}
		s = trimOWS(s)
		if s == "" {
			break
		}
		if s[0] != ';' {
			return netip.Addr{}, newKeyError(forwarded, detail(ErrMalformedHeader, "expected ';'"), elem)
		}
		s = trimOWS(s[1:])
	}
	if !found {
		return netip.Addr{}, newKeyError(forwarded, detail(ErrMalformedHeader, "no for= parameter"), elem)
	}
	return parseNode(node, quoted)
}

// closingQuote returns the index of the '"' closing the quoted string that
// starts at s[0], or -1.
func closingQuote(s string) int {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++ // quoted-pair: skip the escaped byte
		case '"':
			return i
		}
	}
	return -1
}

// isValueChar reports whether c may appear in an unquoted value: a token
// character, or leniently ':', '[' and ']' which some proxies write unquoted
// around IPv6 addresses and ports.
func isValueChar(c byte) bool {
	return isTchar(c) || c == ':' || c == '[' || c == ']'
}

// parseNode parses an RFC 7239 node: an address with an optional numeric or
// obfuscated port. Obfuscated identifiers and "unknown" are errors.
func parseNode(node string, quoted bool) (netip.Addr, error) {
	if quoted && strings.IndexByte(node, '\\') >= 0 {
		if len(node) > 2*maxAddrLen {
			return netip.Addr{}, newKeyError(forwarded, ErrInvalidAddress, node)
		}
		var buf [2 * maxAddrLen]byte
		b := buf[:0]
		for i := 0; i < len(node); i++ {
			if node[i] == '\\' && i+1 < len(node) {
				i++
			}
			b = append(b, node[i])
		}
		node = string(b)
	}
	if node == "" || node[0] == '_' || strings.EqualFold(node, "unknown") {
		return netip.Addr{}, newKeyError(forwarded, detail(ErrInvalidAddress, "obfuscated or unknown node"), node)
	}
	a, ok := parseAddr(node, true)
	if !ok {
		return netip.Addr{}, newKeyError(forwarded, ErrInvalidAddress, node)
	}
	return a, nil
}
