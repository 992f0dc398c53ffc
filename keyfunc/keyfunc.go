package keyfunc

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Func returns the rate-limiting key of a request: the identity whose
// requests are counted together.
//
// A Func either returns a non-empty key or an error, never both. Keys carry
// a short kind prefix ("ip:", "hdr#", "user:", ...) so that keys of
// different strategies never collide, and their length is bounded whatever
// the request carries. An error never means "do not limit this request": see
// the package documentation for what the middleware does with it.
type Func func(r *http.Request) (string, error)

// Sentinel errors, wrapped by the *KeyError a Func returns. Test for them with
// errors.Is.
var (
	// ErrNoKey means the request does not carry the identity the Func looks
	// for: the header is absent or empty, no user is in the context, the
	// request was not routed by a pattern. It is the only error on which
	// FirstOf moves on to its next Func.
	ErrNoKey = errors.New("keyfunc: no key in request")

	// ErrInvalidAddress means something that must be an IP address is not:
	// an unparseable RemoteAddr (such as a unix socket's "@"), garbage in
	// X-Forwarded-For, an obfuscated or "unknown" node in Forwarded.
	ErrInvalidAddress = errors.New("keyfunc: invalid address")

	// ErrMalformedHeader means a forwarding header that a trusted proxy
	// wrote cannot be believed as it is: broken Forwarded syntax, several
	// values where one is expected, fewer X-Forwarded-For hops than the
	// configured number of proxies.
	ErrMalformedHeader = errors.New("keyfunc: malformed header")
)

// KeyError is the error every Func of this package returns. It names where
// the bad value came from and quotes at most a short prefix of it, so that
// a megabyte of header never ends up in a log line.
type KeyError struct {
	// Source is where the value was read: "RemoteAddr", a canonical header
	// name such as "X-Forwarded-For", "context" or "route".
	Source string
	// Value is the offending value, cut to a few dozen bytes ("..." marks a
	// cut); empty when there was no value at all.
	Value string
	// Err is ErrNoKey, ErrInvalidAddress or ErrMalformedHeader, possibly
	// wrapped with a detail, or for ContextValue a description of an
	// unsupported value type.
	Err error
}

// Error reads like "keyfunc: X-Forwarded-For: invalid address "bogus"".
func (e *KeyError) Error() string {
	var b strings.Builder
	b.WriteString("keyfunc: ")
	b.WriteString(e.Source)
	b.WriteString(": ")
	b.WriteString(strings.TrimPrefix(e.Err.Error(), "keyfunc: "))
	if e.Value != "" {
		b.WriteByte(' ')
		b.WriteString(strconv.Quote(e.Value))
	}
	return b.String()
}

// Unwrap returns e.Err, so errors.Is(err, ErrNoKey) and friends work.
func (e *KeyError) Unwrap() error { return e.Err }

// maxErrorValue bounds how much of an offending value a KeyError keeps.
const maxErrorValue = 40

// newKeyError builds a *KeyError keeping a short copy of value (a copy, so
// that the error does not pin a large header in memory).
func newKeyError(source string, err error, value string) *KeyError {
	if len(value) > maxErrorValue {
		n := maxErrorValue
		for n > 0 && !utf8.RuneStart(value[n]) {
			n--
		}
		value = value[:n] + "..."
	} else {
		value = strings.Clone(value)
	}
	return &KeyError{Source: source, Value: value, Err: err}
}

// detail wraps a sentinel with a short explanation.
func detail(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{sentinel}, args...)...)
}

// maxRawValue is the longest value (header, user ID, context value, route)
// that appears in a key as it is; longer values are hashed.
const maxRawValue = 64

// valueKey builds the key of a client-supplied or free-form value: kind,
// ':', qualifier and the value itself when the value is at most maxRawValue
// bytes of printable ASCII; otherwise kind, '#', qualifier and 32 hex digits
// (the first 16 bytes of the value's SHA-256). The qualifier, when not
// empty, ends in ':'. The raw form allocates only the key; the hashed form
// also allocates a hash state and a small copy buffer, never a copy of the
// whole value.
func valueKey(kind, qualifier, v string) string {
	if isPlain(v) {
		return kind + ":" + qualifier + v
	}
	return hashedKey(kind, qualifier, v)
}

// hashedKey is the hashed form of valueKey, whatever the value: for values
// that should not appear in Redis as they are, such as API keys.
func hashedKey(kind, qualifier, v string) string {
	h := sha256.New()
	var chunk [512]byte
	for rest := v; rest != ""; {
		n := copy(chunk[:], rest)
		h.Write(chunk[:n])
		rest = rest[n:]
	}
	var sum [sha256.Size]byte
	var hexSum [32]byte
	hex.Encode(hexSum[:], h.Sum(sum[:0])[:16])
	return kind + "#" + qualifier + string(hexSum[:])
}

// isPlain reports whether v may appear in a key as it is: not empty, at most
// maxRawValue bytes, printable ASCII only (no control characters, no
// invalid or multi-byte UTF-8).
func isPlain(v string) bool {
	if v == "" || len(v) > maxRawValue {
		return false
	}
	for i := 0; i < len(v); i++ {
		if v[i] < 0x20 || v[i] > 0x7e {
			return false
		}
	}
	return true
}

// errEmptyPart is Join's error for a part whose Func returned an empty key
// without an error.
var errEmptyPart = &KeyError{Source: "join", Err: detail(ErrNoKey, "a part's key is empty")}

// errEmptyAlternative is FirstOf's, for an alternative whose Func returned
// an empty key without an error.
var errEmptyAlternative = &KeyError{Source: "first-of", Err: detail(ErrNoKey, "an alternative's key is empty")}

// Join returns a Func whose key combines the keys of all fs, in order, such
// as the authenticated user and the route:
//
//	keyfunc.Join(keyfunc.User(), keyfunc.Route()) // "join:user:alice|route:GET /reports"
//
// The key is "join:" followed by the parts separated by '|', where '\' and
// '|' inside a part are escaped with a '\'. Different tuples of parts thus
// never produce the same key, whatever the parts contain. If any Func fails,
// Join returns its error unchanged (a missing part is not skipped: that
// would merge "alice on /a" with "alice anywhere"). A Func of your own that
// returns an empty key without an error is taken as ErrNoKey too, for the
// same reason.
//
// Join panics if fs is empty or holds a nil Func.
func Join(fs ...Func) Func {
	fs = checkFuncs("Join", fs)
	return func(r *http.Request) (string, error) {
		var b strings.Builder
		b.WriteString("join:")
		for i, f := range fs {
			k, err := f(r)
			if err != nil {
				return "", err
			}
			if k == "" { // a Func of the caller's: no identity, not a shared one
				return "", errEmptyPart
			}
			if i > 0 {
				b.WriteByte('|')
			}
			writeEscaped(&b, k)
		}
		return b.String(), nil
	}
}

// writeEscaped writes s with '\' and '|' escaped by a '\'.
func writeEscaped(b *strings.Builder, s string) {
	for {
		i := strings.IndexAny(s, `\|`)
		if i < 0 {
			b.WriteString(s)
			return
		}
		b.WriteString(s[:i])
		b.WriteByte('\\')
		b.WriteByte(s[i])
		s = s[i+1:]
	}
}

// FirstOf returns a Func that tries fs in order and returns the first key
// found. It moves on only when a Func fails with ErrNoKey, that is when the
// request simply does not carry that identity:
//
//	keyfunc.FirstOf(keyfunc.Header("X-API-Key"), keyfunc.RemoteIP())
//
// limits by API key when the header is present and by client IP otherwise
// (a header the client can fill with anything: see Header for why an
// unchecked API key needs a per-IP limiter in front). Any other error (a garbage address from a trusted proxy, a malformed
// header) is returned at once and does not fall through: a client must not be
// able to pick the strategy that suits it by sending a broken value. A Func
// of your own that returns an empty key without an error counts as
// ErrNoKey. When every Func reports ErrNoKey, FirstOf returns the last of
// those errors.
//
// The keys of the strategies in this package carry distinct prefixes, so a
// key found by one alternative never collides with a key of another.
//
// FirstOf panics if fs is empty or holds a nil Func.
func FirstOf(fs ...Func) Func {
	fs = checkFuncs("FirstOf", fs)
	return func(r *http.Request) (string, error) {
		var last error
		for _, f := range fs {
			k, err := f(r)
			if err == nil && k == "" {
				err = errEmptyAlternative // a Func of the caller's: no key
			}
			if err == nil {
				return k, nil
			}
			if !errors.Is(err, ErrNoKey) {
				return "", err
			}
			last = err
		}
		return "", last
	}
}

// checkFuncs panics on an empty list or a nil Func and returns a private copy.
func checkFuncs(caller string, fs []Func) []Func {
	if len(fs) == 0 {
		panic("keyfunc: " + caller + " needs at least one Func")
	}
	for i, f := range fs {
		if f == nil {
			panic(fmt.Sprintf("keyfunc: %s: Func %d is nil", caller, i))
		}
	}
	return slices.Clone(fs)
}

// canonicalHeader validates a header name given to a constructor and
// returns its canonical form, the key of http.Header. Reading
// r.Header[canonical] directly avoids canonicalising on every request.
func canonicalHeader(caller, name string) string {
	if name == "" {
		panic("keyfunc: " + caller + ": empty header name")
	}
	for i := 0; i < len(name); i++ {
		if !isTchar(name[i]) {
			panic(fmt.Sprintf("keyfunc: %s: invalid header name %q", caller, name))
		}
	}
	return textproto.CanonicalMIMEHeaderKey(name)
}

// isTchar reports whether c may appear in an RFC 9110 token.
func isTchar(c byte) bool {
	switch {
	case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		return true
	}
	return strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0
}

// trimOWS trims the optional whitespace (spaces and tabs) around s.
func trimOWS(s string) string {
	for s != "" && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for s != "" && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}
