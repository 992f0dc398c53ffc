package keyfunc

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestHeader(t *testing.T) {
	long := strings.Repeat("k", 65)
	runKeyCases(t, Header("X-API-Key"), []keyCase{
		{name: "value", req: newRequest("203.0.113.7:1", hdr{"X-Api-Key", "abc123"}), wantKey: "hdr#x-api-key:" + sha16("abc123")},
		{name: "lowercase name", req: newRequest("203.0.113.7:1", hdr{"x-api-key", "abc123"}), wantKey: "hdr#x-api-key:" + sha16("abc123")},
		{
			name:    "first line only",
			req:     newRequest("203.0.113.7:1", hdr{"X-API-Key", "abc123"}, hdr{"X-API-Key", "other"}),
			wantKey: "hdr#x-api-key:" + sha16("abc123"),
		},
		{
			name:    "short values are hashed too: API keys are secrets",
			req:     newRequest("203.0.113.7:1", hdr{"X-API-Key", long[:64]}),
			wantKey: "hdr#x-api-key:" + sha16(long[:64]),
		},
		{
			name:    "65 bytes are hashed",
			req:     newRequest("203.0.113.7:1", hdr{"X-API-Key", long}),
			wantKey: "hdr#x-api-key:" + sha16(long),
		},
		{
			name:    "1 MB header is hashed",
			req:     newRequest("203.0.113.7:1", hdr{"X-API-Key", megabyte("k", "")}),
			wantKey: "hdr#x-api-key:" + sha16(megabyte("k", "")),
		},
		{
			name:    "control characters are hashed",
			req:     newRequest("203.0.113.7:1", hdr{"X-API-Key", "a\x00b"}),
			wantKey: "hdr#x-api-key:" + sha16("a\x00b"),
		},
		{
			name:    "non-ASCII is hashed",
			req:     newRequest("203.0.113.7:1", hdr{"X-API-Key", "clé"}),
			wantKey: "hdr#x-api-key:" + sha16("clé"),
		},
		{
			name:    "surrounding whitespace is trimmed",
			req:     newRequest("203.0.113.7:1", hdr{"X-API-Key", " abc123\t"}),
			wantKey: "hdr#x-api-key:" + sha16("abc123"),
		},
		{name: "missing", req: newRequest("203.0.113.7:1"), wantErr: ErrNoKey},
		{name: "empty", req: newRequest("203.0.113.7:1", hdr{"X-API-Key", ""}), wantErr: ErrNoKey},
	})
}

func TestHeaderNamesDoNotCollide(t *testing.T) {
	r := newRequest("203.0.113.7:1", hdr{"X-API-Key", "same"}, hdr{"X-Tenant", "same"})
	a, _ := Header("X-API-Key")(r)
	b, _ := Header("X-Tenant")(r)
	if a == b {
		t.Fatalf("two headers share key %q", a)
	}
}

func withUser(id string) *http.Request {
	r := newRequest("203.0.113.7:1")
	return r.WithContext(WithUser(r.Context(), id))
}

func TestUser(t *testing.T) {
	runKeyCases(t, User(), []keyCase{
		{name: "user", req: withUser("alice"), wantKey: "user:alice"},
		{name: "long id is hashed", req: withUser(strings.Repeat("a", 100)), wantKey: "user#" + sha16(strings.Repeat("a", 100))},
		{name: "no user", req: newRequest("203.0.113.7:1"), wantErr: ErrNoKey},
		{name: "empty user", req: withUser(""), wantErr: ErrNoKey},
	})
	if id, ok := UserFromContext(WithUser(context.Background(), "alice")); id != "alice" || !ok {
		t.Errorf("UserFromContext = %q, %v", id, ok)
	}
	if _, ok := UserFromContext(context.Background()); ok {
		t.Error("UserFromContext found a user in an empty context")
	}
}

type ctxKey struct{}

// Ids of named types, as a context usually holds them.
type (
	userID    int64
	accountID uint16
	sessionID string
)

type stringer struct{}

func (stringer) String() string { return "s-7" }

func withValue(v any) *http.Request {
	r := newRequest("203.0.113.7:1")
	return r.WithContext(context.WithValue(r.Context(), ctxKey{}, v))
}

func TestContextValue(t *testing.T) {
	runKeyCases(t, ContextValue(ctxKey{}), []keyCase{
		{name: "string", req: withValue("acme"), wantKey: "ctx:acme"},
		{name: "int", req: withValue(42), wantKey: "ctx:42"},
		{name: "negative int64", req: withValue(int64(-42)), wantKey: "ctx:-42"},
		{name: "uint64", req: withValue(uint64(1) << 63), wantKey: "ctx:9223372036854775808"},
		{name: "uint8", req: withValue(uint8(7)), wantKey: "ctx:7"},
		{name: "Stringer", req: withValue(stringer{}), wantKey: "ctx:s-7"},
		{name: "named integer", req: withValue(userID(-7)), wantKey: "ctx:-7"},
		{name: "named unsigned", req: withValue(accountID(9)), wantKey: "ctx:9"},
		{name: "named string", req: withValue(sessionID("s-1")), wantKey: "ctx:s-1"},
		{name: "empty named string", req: withValue(sessionID("")), wantErr: ErrNoKey},
		{name: "long string is hashed", req: withValue(strings.Repeat("x", 65)), wantKey: "ctx#" + sha16(strings.Repeat("x", 65))},
		{name: "missing", req: newRequest("203.0.113.7:1"), wantErr: ErrNoKey},
		{name: "empty string", req: withValue(""), wantErr: ErrNoKey},
	})
	_, err := ContextValue(ctxKey{})(withValue(3.5))
	if err == nil || !strings.Contains(err.Error(), "float64") {
		t.Errorf("float value: got error %v; want one naming the type", err)
	}
}

type nilStringer struct{ s string }

func (p *nilStringer) String() string { return p.s }

func TestIDsFromContexts(t *testing.T) {
	type ctxKey struct{}
	f := ContextValue(ctxKey{})
	r := httptest.NewRequest("GET", "/", nil)
	r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, (*nilStringer)(nil)))
	if _, err := f(r); !errors.Is(err, ErrNoKey) {
		t.Errorf("a nil pointer Stringer: %v, want ErrNoKey (and no panic)", err)
	}
	long := strings.Repeat("u", 100)
	for _, c := range []struct {
		v    any
		want string
		err  error
	}{
		{"alice", "user:alice", nil},
		{int16(7), "user:7", nil},
		{userID(7), "user:7", nil},
		{sessionID("alice"), "user:alice", nil},
		{long, "user#" + sha16(long), nil},
		{(*nilStringer)(nil), "", ErrNoKey},
		{"", "", ErrNoKey},
		{3.5, "", nil},
	} {
		got, err := UserKey(c.v)
		if got != c.want || (c.err != nil && !errors.Is(err, c.err)) || (got == "") != (err != nil) {
			t.Errorf("UserKey(%#v) = %q, %v; want %q, %v", c.v, got, err, c.want, c.err)
		}
	}
}
