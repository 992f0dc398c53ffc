package keyfunc

import (
	"strings"
	"testing"
)

func fwd(v string) hdr { return hdr{"Forwarded", v} }

func TestForwarded(t *testing.T) {
	runKeyCases(t, Forwarded(testTrusted...), []keyCase{
		{name: "direct client without header", req: newRequest("203.0.113.7:1"), wantKey: "ip:203.0.113.7"},
		{
			name:    "untrusted peer sends Forwarded",
			req:     newRequest("203.0.113.7:1", fwd("for=198.51.100.1")),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "untrusted peer sends garbage",
			req:     newRequest("203.0.113.7:1", fwd(`for="unterminated`)),
			wantKey: "ip:203.0.113.7",
		},
		{name: "one trusted hop", req: newRequest("10.0.0.1:1", fwd("for=203.0.113.7")), wantKey: "ip:203.0.113.7"},
		{
			name:    "other parameters",
			req:     newRequest("10.0.0.1:1", fwd("by=10.0.0.1;For=203.0.113.7;proto=https;host=example.com")),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "whitespace and empty pairs",
			req:     newRequest("10.0.0.1:1", fwd(" ;proto=http ; for=203.0.113.7 ;; ")),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "quoted IPv4 with port",
			req:     newRequest("10.0.0.1:1", fwd(`for="203.0.113.7:4711"`)),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "quoted IPv6 with port",
			req:     newRequest("10.0.0.1:1", fwd(`for="[2001:db8:1:2::1]:4711"`)),
			wantKey: "ip:2001:db8:1:2::/64",
		},
		{
			name:    "quoted IPv6 without port",
			req:     newRequest("10.0.0.1:1", fwd(`for="[2001:db8:1:2::1]"`)),
			wantKey: "ip:2001:db8:1:2::/64",
		},
		{
			name:    "obfuscated port",
			req:     newRequest("10.0.0.1:1", fwd(`for="[2001:db8:1:2::1]:_abc-1"`)),
			wantKey: "ip:2001:db8:1:2::/64",
		},
		{
			name:    "lenient: unquoted IPv6",
			req:     newRequest("10.0.0.1:1", fwd(`for=[2001:db8:1:2::1]:4711`)),
			wantKey: "ip:2001:db8:1:2::/64",
		},
		{
			name:    "lenient: IPv6 without brackets",
			req:     newRequest("10.0.0.1:1", fwd(`for="2001:db8:1:2::1"`)),
			wantKey: "ip:2001:db8:1:2::/64",
		},
		{
			name:    "quoted-pair escapes",
			req:     newRequest("10.0.0.1:1", fwd(`for="203.0.113\.7";proto="a\"b,c"`)),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "spoofed leftmost element",
			req:     newRequest("10.0.0.1:1", fwd("for=198.51.100.1, for=203.0.113.7")),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "trusted proxies on the right",
			req:     newRequest("10.0.0.1:1", fwd(`for=198.51.100.1, for=203.0.113.7;proto=https, for=10.0.0.2, for="[fd00::3]"`)),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "several Forwarded lines",
			req:     newRequest("10.0.0.1:1", fwd("for=198.51.100.1"), fwd("for=203.0.113.7, for=10.0.0.2")),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "comma inside a quoted string",
			req:     newRequest("10.0.0.1:1", fwd(`for=198.51.100.1, for=203.0.113.7;host="a,for=10.0.0.9"`)),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "client's broken element is never parsed",
			req:     newRequest("10.0.0.1:1", fwd(`for="unterminated, for=;;=, for=203.0.113.7`)),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "client's obfuscated element is never parsed",
			req:     newRequest("10.0.0.1:1", fwd(`for=_hidden, for=203.0.113.7`)),
			wantKey: "ip:203.0.113.7",
		},
		{name: "trusted peer without header", req: newRequest("10.0.0.1:1"), wantKey: "ip:10.0.0.1"},
		{
			name:    "every address trusted: leftmost",
			req:     newRequest("10.0.0.1:1", fwd("for=10.0.0.5, for=10.0.0.2")),
			wantKey: "ip:10.0.0.5",
		},
		{name: "obfuscated node", req: newRequest("10.0.0.1:1", fwd("for=_hidden")), wantErr: ErrInvalidAddress},
		{name: "obfuscated node with port", req: newRequest("10.0.0.1:1", fwd(`for="_hidden:80"`)), wantErr: ErrInvalidAddress},
		{name: "unknown node", req: newRequest("10.0.0.1:1", fwd("for=unknown")), wantErr: ErrInvalidAddress},
		{name: "UNKNOWN node", req: newRequest("10.0.0.1:1", fwd(`for="UNKNOWN"`)), wantErr: ErrInvalidAddress},
		{name: "garbage node", req: newRequest("10.0.0.1:1", fwd("for=bogus")), wantErr: ErrInvalidAddress},
		{name: "empty quoted node", req: newRequest("10.0.0.1:1", fwd(`for=""`)), wantErr: ErrInvalidAddress},
		{name: "bracketed IPv4", req: newRequest("10.0.0.1:1", fwd(`for="[203.0.113.7]"`)), wantErr: ErrInvalidAddress},
		{name: "no for", req: newRequest("10.0.0.1:1", fwd("proto=https;by=10.0.0.1")), wantErr: ErrMalformedHeader},
		{name: "for twice", req: newRequest("10.0.0.1:1", fwd("for=203.0.113.7;for=198.51.100.1")), wantErr: ErrMalformedHeader},
		{name: "empty value", req: newRequest("10.0.0.1:1", fwd("for=")), wantErr: ErrMalformedHeader},
		{name: "no value", req: newRequest("10.0.0.1:1", fwd("for")), wantErr: ErrMalformedHeader},
		{name: "unterminated quote", req: newRequest("10.0.0.1:1", fwd(`for="203.0.113.7`)), wantErr: ErrMalformedHeader},
		{name: "junk after value", req: newRequest("10.0.0.1:1", fwd(`for="203.0.113.7"x`)), wantErr: ErrMalformedHeader},
		{name: "space inside value", req: newRequest("10.0.0.1:1", fwd(`for=203.0.113.7 x`)), wantErr: ErrMalformedHeader},
		{
			name:    "garbage right of the client",
			req:     newRequest("10.0.0.1:1", fwd("for=203.0.113.7, for=bogus")),
			wantErr: ErrInvalidAddress,
		},
		{
			name:    "IPv4-mapped client",
			req:     newRequest("10.0.0.1:1", fwd(`for="[::ffff:203.0.113.7]"`)),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "IPv4-mapped trusted proxy",
			req:     newRequest("10.0.0.1:1", fwd(`for=203.0.113.7, for="[::ffff:10.0.0.2]"`)),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "zone on a trusted proxy",
			req:     newRequest("10.0.0.1:1", fwd(`for=203.0.113.7, for="[fd00::2%eth0]"`)),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "1 MB header, client on the right",
			req:     newRequest("10.0.0.1:1", fwd(megabyte("for=198.51.100.1, ", "for=203.0.113.7"))),
			wantKey: "ip:203.0.113.7",
		},
		{
			name:    "1 MB quoted node",
			req:     newRequest("10.0.0.1:1", fwd(`for="`+megabyte(`\1`, `"`))),
			wantErr: ErrInvalidAddress,
		},
		{
			name:    "1 MB unterminated quote",
			req:     newRequest("10.0.0.1:1", fwd(megabyte(`\"`, ""))),
			wantErr: ErrMalformedHeader,
		},
	})
}

func TestLastForwardedElement(t *testing.T) {
	for _, tc := range []struct {
		line, elem, rest string
		ok               bool
	}{
		{"a, b", " b", "a", true},
		{"a", "a", "", true},
		{`a, b="x,y"`, ` b="x,y"`, "a", true},
		{`a, b="x\",y"`, ` b="x\",y"`, "a", true},
		{`a, b="x\\",y`, "y", `a, b="x\\"`, true},
		{`b="x`, "", "", false},
		{`,`, "", "", true},
	} {
		elem, rest, ok := lastForwardedElement(tc.line)
		if elem != tc.elem || rest != tc.rest || ok != tc.ok {
			t.Errorf("lastForwardedElement(%q) = %q, %q, %v; want %q, %q, %v",
				tc.line, elem, rest, ok, tc.elem, tc.rest, tc.ok)
		}
	}
}

func TestForwardedErrorIsShort(t *testing.T) {
	f := Forwarded(testTrusted...)
	_, err := f(newRequest("10.0.0.1:1", fwd("for="+strings.Repeat("x", 1<<20))))
	if err == nil || len(err.Error()) > 120 {
		t.Fatalf("got %d-byte error %.200v", len(err.Error()), err)
	}
}
