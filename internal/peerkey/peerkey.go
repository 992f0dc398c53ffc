// Package peerkey hands the middleware (internal/flow) keyfunc's key of a
// request's peer address without keyfunc.RemoteIP's warning about
// forwarding headers. The middleware falls back on the peer when the key
// function it was given fails, which is never RemoteIP itself (the
// fallback fails where it does): a proxy may well be trusted then, and
// the warning that none is would be wrong. keyfunc sets Quiet when it is
// initialised; it cannot export it without making it public API.
package peerkey

import "net/http"

// Quiet keys a request by its peer address, as keyfunc.RemoteIP does,
// without the warning.
var Quiet func(r *http.Request) (string, error)
