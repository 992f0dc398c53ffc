package keyfunc

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strconv"
	"strings"
)

// Header returns the Func keying a request by the value of a header, such as
// an API key: "hdr#x-api-key:<32 hex digits>", a hash of the value (see
// below). The header name (lowercased) is part
// of the key, so Header("X-API-Key") and Header("X-Tenant") never share
// keys. Only the first line of the header is read, as http.Header.Get does,
// so the key is the value an authentication middleware checks.
//
// A client chooses the value of any header it sends: a fresh value is a
// fresh key, with its own fresh budget. Key by a header only when the value
// is verified: an API key checked (and an unknown one rejected) before the
// limiter runs, in which case User is often the better key. FirstOf limits
// requests without the header by client IP:
//
//	keyfunc.FirstOf(keyfunc.Header("X-API-Key"), keyfunc.RemoteIP())
//
// but a client sending made-up keys never reaches the IP alternative, so
// when keys are not checked first, put a limiter keyed by client IP in front
// of the one keyed by API key: guessing keys then costs the guesser's own
// budget.
//
// The value is always hashed: "hdr#x-api-key:" followed by 32 hex digits of
// its SHA-256. Header values are often secrets, and a key name in Redis is
// visible to anyone who can list the keys; hashing also bounds the key, so a
// 1 MB header makes a 46-byte key. The hash has no secret (every instance
// must make the same key), so it hides a value with enough entropy, an API
// key or a token, but not a guessable one: do not key by a header carrying
// a password (Authorization: Basic). An absent or empty header is an
// ErrNoKey.
// Header panics on an empty or invalid header name.
func Header(name string) Func {
	key := canonicalHeader("Header", name)
	qualifier := strings.ToLower(key) + ":"
	errMissing := &KeyError{Source: key, Err: ErrNoKey}
	return func(r *http.Request) (string, error) {
		var v string
		if lines := r.Header[key]; len(lines) > 0 {
			v = trimOWS(lines[0])
		}
		if v == "" {
			return "", errMissing
		}
		return hashedKey("hdr", qualifier, v), nil
	}
}

// userKey is the context key of WithUser.
type userKey struct{}

// WithUser returns a copy of ctx that carries the authenticated user id, for
// User to find. Call it in the authentication middleware that runs before
// the rate limiter:
//
//	r = r.WithContext(keyfunc.WithUser(r.Context(), session.UserID))
func WithUser(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, userKey{}, id)
}

// UserFromContext returns the user id stored by WithUser, and whether there
// is a non-empty one.
func UserFromContext(ctx context.Context) (string, bool) {
	id, _ := ctx.Value(userKey{}).(string)
	return id, id != ""
}

var errNoUser = &KeyError{Source: "context", Err: detail(ErrNoKey, "no user (keyfunc.WithUser)")}

// User returns the Func keying a request by the authenticated user that an
// earlier middleware stored with WithUser: "user:<id>" (ids longer than 64
// bytes or with non-printable bytes are hashed: "user#<32 hex digits>").
// Because the id comes from the service's own authentication, a client
// cannot forge it. A request without a user is an ErrNoKey, so
//
//	keyfunc.FirstOf(keyfunc.User(), keyfunc.RemoteIP())
//
// limits signed-in users by account and everyone else by address. The
// limiter must run after the authentication middleware. When that middleware
// stores the user under its own context key, use ContextValue.
func User() Func {
	return func(r *http.Request) (string, error) {
		id, ok := UserFromContext(r.Context())
		if !ok {
			return "", errNoUser
		}
		return valueKey("user", "", id), nil
	}
}

// ContextValue returns the Func keying a request by the value stored in its
// context under key, for authentication middleware that keeps the user (or
// tenant) under its own key: "ctx:<value>", hashed as "ctx#<32 hex digits>"
// when longer than 64 bytes or not printable ASCII. The value is otherwise
// stored in clear in the Redis key name: key by an identity, not by a
// secret (a session id), which anyone listing the keys would read.
//
// The value may be a string, any integer type or a fmt.Stringer, of a
// named type too (type UserID int64); a missing (nil) value or an empty
// string is an ErrNoKey, any other type an error that names it. Keys of different ContextValue Funcs share the "ctx:"
// prefix; Join a distinguishing Func if one limiter mixes them. ContextValue
// panics if key is nil or not comparable, as context.WithValue does.
func ContextValue(key any) Func {
	if key == nil {
		panic("keyfunc: ContextValue: nil key")
	}
	if !reflect.TypeOf(key).Comparable() {
		panic(fmt.Sprintf("keyfunc: ContextValue: key of type %T is not comparable", key))
	}
	errMissing := &KeyError{Source: "context", Err: detail(ErrNoKey, "no value under context key %#v", key)}
	return func(r *http.Request) (string, error) {
		v := r.Context().Value(key)
		s, ok := idString(v)
		if !ok {
			return "", &KeyError{Source: "context", Err: fmt.Errorf(
				"keyfunc: value of type %T under context key %#v is not a string, an integer or a fmt.Stringer", v, key)}
		}
		if s == "" {
			return "", errMissing
		}
		return valueKey("ctx", "", s), nil
	}
}

// UserKey returns the key User makes for the user id v: "user:<id>", hashed
// like User's when longer than 64 bytes or not printable ASCII. It serves
// router adapters that find the id in their own context (ginlimit.UserKey,
// echolimit.UserKey). v may be a string, any integer type or a
// fmt.Stringer, of a named type too; nil, a nil pointer or an empty id is
// an ErrNoKey, any other type an error naming it.
func UserKey(v any) (string, error) {
	s, ok := idString(v)
	if !ok {
		return "", &KeyError{Source: "context", Err: fmt.Errorf(
			"keyfunc: user id of type %T is not a string, an integer or a fmt.Stringer", v)}
	}
	if s == "" {
		return "", errNoUser
	}
	return valueKey("user", "", s), nil
}

// idString formats an id found in a context: a string, any integer type or
// a fmt.Stringer, named types (type UserID int64) included. nil and a nil
// pointer give "" (no id); ok is false for any other type.
func idString(v any) (s string, ok bool) {
	switch v := v.(type) {
	case nil:
		return "", true
	case string:
		return v, true
	case int:
		return strconv.FormatInt(int64(v), 10), true
	case int8:
		return strconv.FormatInt(int64(v), 10), true
	case int16:
		return strconv.FormatInt(int64(v), 10), true
	case int32:
		return strconv.FormatInt(int64(v), 10), true
	case int64:
		return strconv.FormatInt(v, 10), true
	case uint:
		return strconv.FormatUint(uint64(v), 10), true
	case uint8:
		return strconv.FormatUint(uint64(v), 10), true
	case uint16:
		return strconv.FormatUint(uint64(v), 10), true
	case uint32:
		return strconv.FormatUint(uint64(v), 10), true
	case uint64:
		return strconv.FormatUint(v, 10), true
	case fmt.Stringer:
		if rv := reflect.ValueOf(v); rv.Kind() == reflect.Pointer && rv.IsNil() {
			return "", true // a nil pointer: calling String would panic
		}
		return v.String(), true
	}
	// A named type (type UserID int64), as ids in contexts usually are.
	switch rv := reflect.ValueOf(v); rv.Kind() {
	case reflect.String:
		return rv.String(), true
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return strconv.FormatInt(rv.Int(), 10), true
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		return strconv.FormatUint(rv.Uint(), 10), true
	}
	return "", false
}
