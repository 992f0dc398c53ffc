package flow

import "errors"

// The errors the flow hands to the error handler on paths that can run for
// every request: every anonymous request's key error, every request while
// Redis is down. Each costs one allocation and formats its message only
// when it is read, where fmt.Errorf cost several and formatted it at once,
// for an error handler that may only count it (the default one logs one
// line per kind every ErrorLogInterval).

// keyError is fmt.Errorf("%w: %w", ErrKey, err): a key function's error.
type keyError struct{ err error }

func (e *keyError) Error() string        { return ErrKey.Error() + ": " + e.err.Error() }
func (e *keyError) Is(target error) bool { return target == ErrKey }
func (e *keyError) Unwrap() error        { return e.err }

// prefixError is fmt.Errorf(prefix+"%w", err).
type prefixError struct {
	prefix string
	err    error
}

func (e *prefixError) Error() string { return e.prefix + e.err.Error() }
func (e *prefixError) Unwrap() error { return e.err }

// errEmptyKey is the error of a key function that returned "" and no error.
var errEmptyKey = errors.New("the key function returned an empty key")
