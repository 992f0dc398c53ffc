package keyfunc

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// sha16 is the hashed form of a value in keys, computed independently.
func sha16(v string) string {
	sum := sha256.Sum256([]byte(v))
	return hex.EncodeToString(sum[:16])
}

// constKey returns a Func that always returns k.
func constKey(k string) Func { return func(*http.Request) (string, error) { return k, nil } }

// failing returns a Func that always fails with err.
func failing(err error) Func { return func(*http.Request) (string, error) { return "", err } }

func TestJoin(t *testing.T) {
	r := withUser("alice")
	r.Pattern = "GET /reports"
	runKeyCases(t, Join(User(), Route()), []keyCase{
		{name: "user and route", req: r, wantKey: "join:user:alice|route:GET /reports"},
		{name: "missing part is an error", req: withUser("alice"), wantErr: ErrNoKey},
	})
	runKeyCases(t, Join(constKey(""), RemoteIP()), []keyCase{
		{name: "a part of your own with an empty key", req: newRequest("203.0.113.7:1"), wantErr: ErrNoKey},
	})
	runKeyCases(t, Join(RemoteIP()), []keyCase{
		{name: "one part", req: newRequest("203.0.113.7:1"), wantKey: "join:ip:203.0.113.7"},
		{name: "bad part", req: newRequest("@"), wantErr: ErrInvalidAddress},
	})
}

func TestJoinIsInjective(t *testing.T) {
	tuples := [][]string{
		{"a", "b"}, {"a|b"}, {"a", "|b"}, {"a|", "b"}, {`a\`, "b"}, {`a\|b`}, {`a\`, `|b`},
		{"a", "b", "c"}, {"a", "b|c"}, {"a|b", "c"}, {""}, {"", ""}, {"|"}, {`\`}, {`\\`, ""},
		{"join:a"}, {"join:a", "b"}, {"a|b|c"},
	}
	seen := map[string][]string{}
	for _, parts := range tuples {
		fs := make([]Func, len(parts))
		for i, p := range parts {
			fs[i] = constKey(p)
		}
		k, err := Join(fs...)(nil)
		if slices.Contains(parts, "") {
			// An empty part is no identity: never a key shared by all
			// that lack it.
			if !errors.Is(err, ErrNoKey) {
				t.Errorf("%q: got %q, %v; want ErrNoKey", parts, k, err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		if prev, ok := seen[k]; ok {
			t.Errorf("%q and %q both join to %q", prev, parts, k)
		}
		seen[k] = parts
	}
}

func TestFirstOf(t *testing.T) {
	apiKeyOrIP := FirstOf(Header("X-API-Key"), RemoteIP())
	runKeyCases(t, apiKeyOrIP, []keyCase{
		{name: "API key", req: newRequest("203.0.113.7:1", hdr{"X-API-Key", "k1"}), wantKey: "hdr#x-api-key:" + sha16("k1")},
		{name: "no API key: client IP", req: newRequest("203.0.113.7:1"), wantKey: "ip:203.0.113.7"},
		{name: "every alternative fails", req: newRequest("@"), wantErr: ErrInvalidAddress},
	})
	runKeyCases(t, FirstOf(ForwardedFor(testTrusted...), Header("X-API-Key")), []keyCase{
		{
			name:    "garbage does not fall through",
			req:     newRequest("10.0.0.1:1", xff("bogus"), hdr{"X-API-Key", "k1"}),
			wantErr: ErrInvalidAddress,
		},
	})
	runKeyCases(t, FirstOf(User(), Header("X-API-Key")), []keyCase{
		{name: "all missing: last ErrNoKey", req: newRequest("203.0.113.7:1"), wantErr: ErrNoKey},
	})
	// A Func of the caller's that returns an empty key without an error
	// has no key: FirstOf goes on, as for ErrNoKey.
	empty := Func(func(*http.Request) (string, error) { return "", nil })
	if k, err := FirstOf(empty, constKey("k"))(nil); k != "k" || err != nil {
		t.Errorf("FirstOf(empty, k) = %q, %v; want the next Func's key", k, err)
	}
	if k, err := FirstOf(empty)(nil); k != "" || !errors.Is(err, ErrNoKey) {
		t.Errorf("FirstOf(empty) = %q, %v; want ErrNoKey", k, err)
	}
	malformed := &KeyError{Source: "X", Err: ErrMalformedHeader}
	if _, err := FirstOf(failing(malformed), constKey("k"))(nil); err != malformed {
		t.Errorf("FirstOf fell through a malformed header: %v", err)
	}
}

func TestKeyError(t *testing.T) {
	for _, tc := range []struct {
		err  *KeyError
		want string
	}{
		{newKeyError("X-Forwarded-For", ErrInvalidAddress, "bogus"), `keyfunc: X-Forwarded-For: invalid address "bogus"`},
		{&KeyError{Source: "X-Api-Key", Err: ErrNoKey}, `keyfunc: X-Api-Key: no key in request`},
		{
			newKeyError("X-Forwarded-For", ErrInvalidAddress, strings.Repeat("x", 1<<20)),
			`keyfunc: X-Forwarded-For: invalid address "` + strings.Repeat("x", maxErrorValue) + `..."`,
		},
		{
			newKeyError("X-Real-Ip", detail(ErrMalformedHeader, "%d values", 2), "a\x00"),
			`keyfunc: X-Real-Ip: malformed header: 2 values "a\x00"`,
		},
		{
			newKeyError("Forwarded", ErrInvalidAddress, strings.Repeat("é", 30)),
			`keyfunc: Forwarded: invalid address "` + strings.Repeat("é", 20) + `..."`,
		},
	} {
		if got := tc.err.Error(); got != tc.want {
			t.Errorf("Error() = %q; want %q", got, tc.want)
		}
	}
	err := error(newKeyError("RemoteAddr", ErrInvalidAddress, "@"))
	if !errors.Is(err, ErrInvalidAddress) || errors.Is(err, ErrNoKey) {
		t.Errorf("errors.Is does not see through %v", err)
	}
}

func TestValueKey(t *testing.T) {
	for _, tc := range []struct{ v, want string }{
		{"abc", "hdr:q:abc"},
		{"with space|and pipe", "hdr:q:with space|and pipe"},
		{"a\tb", "hdr#q:" + sha16("a\tb")},
		{"a\x7f", "hdr#q:" + sha16("a\x7f")},
		{strings.Repeat("z", 64), "hdr:q:" + strings.Repeat("z", 64)},
		{strings.Repeat("z", 65), "hdr#q:" + sha16(strings.Repeat("z", 65))},
		{strings.Repeat("z", 5000), "hdr#q:" + sha16(strings.Repeat("z", 5000))},
	} {
		if got := valueKey("hdr", "q:", tc.v); got != tc.want {
			t.Errorf("valueKey(%.20q) = %q; want %q", tc.v, got, tc.want)
		}
	}
}
