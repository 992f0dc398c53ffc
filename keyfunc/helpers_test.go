package keyfunc

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
)

// hdr is one header line of a test request.
type hdr struct{ name, value string }

// newRequest builds a GET request from remoteAddr carrying the header lines
// in order (lines of the same name are added, never merged).
func newRequest(remoteAddr string, lines ...hdr) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remoteAddr
	for _, l := range lines {
		r.Header.Add(l.name, l.value)
	}
	return r
}

func xff(v string) hdr { return hdr{"X-Forwarded-For", v} }

// testTrusted is the proxy network of most tests: the proxies live in
// 10.0.0.0/8 and fd00::/8; clients use the documentation ranges.
var testTrusted = []netip.Prefix{
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("fd00::/8"),
}

// keyCase is one row of a strategy table: the request and either the key or
// the sentinel error expected.
type keyCase struct {
	name    string
	req     *http.Request
	wantKey string
	wantErr error
}

// runKeyCases runs f on every case as a subtest.
func runKeyCases(t *testing.T, f Func, cases []keyCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkKey(t, f, tc.req, tc.wantKey, tc.wantErr)
		})
	}
}

// checkKey asserts the result of f(r), and the invariants of every result:
// an error is a *KeyError with a short message; a key is bounded.
func checkKey(t *testing.T, f Func, r *http.Request, wantKey string, wantErr error) {
	t.Helper()
	key, err := f(r)
	if wantErr != nil {
		if !errors.Is(err, wantErr) {
			t.Fatalf("f() = %q, %v; want error %v", key, err, wantErr)
		}
		if key != "" {
			t.Errorf("f() returned key %q together with error %v", key, err)
		}
		var ke *KeyError
		if !errors.As(err, &ke) {
			t.Errorf("error %v (%T) is not a *KeyError", err, err)
		}
		if n := len(err.Error()); n > 250 {
			t.Errorf("error message is %d bytes long: %.100q...", n, err.Error())
		}
		return
	}
	if err != nil {
		t.Fatalf("f() = %q, %v; want %q", key, err, wantKey)
	}
	if key != wantKey {
		t.Fatalf("f() = %q; want %q", key, wantKey)
	}
	if len(key) > 200 {
		t.Errorf("key is %d bytes long", len(key))
	}
}

// megabyte returns about 1 MB made of unit repeated, followed by tail.
func megabyte(unit, tail string) string {
	return strings.Repeat(unit, (1<<20)/len(unit)) + tail
}
