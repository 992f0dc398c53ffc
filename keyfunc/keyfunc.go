// Package keyfunc decides who is limited.
package keyfunc

import (
	"net/http"
)

// Func returns the rate-limiting key of a request.
type Func func(r *http.Request) (string, error)
