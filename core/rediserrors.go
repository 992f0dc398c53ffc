package core

import (
	"context"
	"errors"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"
)

// What a failed command says about Redis is decided here, and only here:
// whether a script call may be sent again without counting twice
// (resendable), and whether Redis can serve decisions at all
// (availability). Both read the one list of Redis's refusals, which says
// of each refusal both.

// refusal is a reply with which Redis refuses a command as a whole,
// whatever the command, before running it.
type refusal struct {
	prefix string // how the reply begins (or the refusal inside a script: see scriptRefusal)
	// resend: a script call refused so has counted nothing (refused before
	// it ran, or at its first write: a replica's READONLY), and a pause of
	// milliseconds may see the refusal end.
	resend bool
	// down: the refusal says Redis cannot serve decisions now, so it
	// counts against Redis's health. A cluster's redirect does not: it is
	// about one slot, while the master answers for the others.
	down bool
}

// refusals are Redis's refusals of a command as a whole. OOM (a Redis out
// of memory under noeviction), BUSY (another script runs too long),
// NOREPLICAS (min-replicas-to-write) and the refusals of a client that has
// not authenticated (a Redis restarted with a password the client lacks:
// NOAUTH, WRONGPASS, and the protocol error with which Redis turns away an
// unauthenticated client's longer commands, a script call among them)
// refuse every decision too, but are not resent: a pause of milliseconds
// would not end them.
//
// MOVED and ASK reach sluice only when go-redis has followed as many
// redirects as its MaxRedirects allows (3 by default) and the last still
// pointed elsewhere: a slot caught between two masters' views while it
// moves (a master migrating it to one not yet importing it, as when the
// importing master's replica took over mid-migration), or slot maps that
// disagree for a moment. Nothing ran, so the call may be resent: a pause
// may see the migration move on, and go-redis reloads its slot map
// meanwhile.
var refusals = [...]refusal{
	{prefix: "LOADING", resend: true, down: true},
	{prefix: "READONLY", resend: true, down: true},
	{prefix: "MASTERDOWN", resend: true, down: true},
	{prefix: "TRYAGAIN", resend: true}, // about one slot: see isTryAgain
	{prefix: "CLUSTERDOWN", resend: true, down: true},
	{prefix: "ERR max number of clients reached", resend: true, down: true},
	{prefix: "BUSY ", down: true}, // (not BUSYKEY, BUSYGROUP: about one key)
	{prefix: "NOREPLICAS", down: true},
	{prefix: "OOM", down: true},
	{prefix: "MISCONF", down: true}, // writes refused after a failed save
	{prefix: "NOAUTH", down: true},
	{prefix: "WRONGPASS", down: true},
	{prefix: "ERR Protocol error: unauthenticated", down: true},
	{prefix: "MOVED ", resend: true},
	{prefix: "ASK ", resend: true},
}

// scriptRefusal returns the refusal of a write inside the script that msg
// words, from the refusal's own first word on ("READONLY You can't write
// …"), or "". Redis 6 hands it to the script's pcall as "@user_script: N:
// -OOM …", which the script sends on for its request (Redis 7 hands over
// the reply itself), and words a call that fails as a whole with it "ERR
// Error running script (call to f_…): @user_script:N: @user_script: N:
// -READONLY …" (one position or two). Only those forms are read, from
// their start: a hook's error text that quotes a command's keys (chosen by
// clients) must not pass for one.
func scriptRefusal(msg string) string {
	const running = "ERR Error running script (call to f_"
	if strings.HasPrefix(msg, running) {
		i := strings.Index(msg[len(running):], "): ")
		if i < 0 {
			return ""
		}
		msg = msg[len(running)+i+3:]
	}
	for range 2 {
		const script = "@user_script:"
		if !strings.HasPrefix(msg, script) {
			return ""
		}
		msg = strings.TrimPrefix(msg[len(script):], " ")
		n := 0
		for n < len(msg) && '0' <= msg[n] && msg[n] <= '9' {
			n++
		}
		if n == 0 || !strings.HasPrefix(msg[n:], ": ") {
			return ""
		}
		if msg = msg[n+2:]; strings.HasPrefix(msg, "-") {
			return msg[1:]
		}
	}
	return ""
}

// What a failed call says is read from the errors' types and texts,
// walking what wraps them (a hook of the client's may wrap a command's
// error: go-redis keeps a command's error as its hooks return it) as
// errors.As would, but without the allocation errors.As makes for its
// target: every failed decision is classified, and an outage fails many.

// findIn returns the first error of err's tree, in errors.As's order, that
// match accepts, or nil. (An error's own As method is not asked.)
func findIn(err error, match func(error) bool) error {
	for err != nil {
		if match(err) {
			return err
		}
		switch u := err.(type) {
		case interface{ Unwrap() error }:
			err = u.Unwrap()
		case interface{ Unwrap() []error }:
			for _, e := range u.Unwrap() {
				if found := findIn(e, match); found != nil {
					return found
				}
			}
			return nil
		default:
			return nil
		}
	}
	return nil
}

func isReply(err error) bool { _, ok := err.(redis.Error); return ok }

func isNetError(err error) bool { _, ok := err.(net.Error); return ok }

func isOpError(err error) bool { _, ok := err.(*net.OpError); return ok }

func isTimeoutError(err error) bool { _, ok := err.(*timeoutError); return ok }

// replyText returns what Redis replied, when err is or wraps a reply of
// Redis's; Redis's replies are recognised by how they begin. Otherwise it
// returns err's text: a hook of the client's may have rebuilt the reply as
// an error of another type with the same text (one that redacts or
// retypes errors). A network error and a timeout, which no reply's text
// begins like, give "": their text would be built anew at each call.
func replyText(err error) string {
	if reply := findIn(err, isReply); reply != nil {
		return reply.Error()
	}
	if findIn(err, isNetError) != nil || errors.Is(err, context.DeadlineExceeded) {
		return ""
	}
	return err.Error()
}

// refusedBy returns the refusal of Redis's that msg, a reply's text (see
// replyText), is, or nil.
func refusedBy(msg string) *refusal {
	if msg == "" {
		return nil
	}
	inScript := scriptRefusal(msg)
	for i := range refusals {
		r := &refusals[i]
		if strings.HasPrefix(msg, r.prefix) || inScript != "" && strings.HasPrefix(inScript, r.prefix) {
			return r
		}
	}
	return nil
}

// resendable reports whether a script call that failed with err may be
// sent again without counting twice: no connection could be made or taken
// from the pool; Redis refused the command before running it (loading its
// data, a replica, a cluster slot moving or down, too many clients); or,
// when the call went alone, its write failed (a command written in part
// never runs) or its new connection was closed during the handshake. A
// script that failed inside (a key of the wrong type) answers per
// request, not with an error of the call. Nothing after the
// write is resendable: a read timeout, a connection reset, a connection
// closed by go-redis under the call (as a failover client does to its
// connections to a replaced master): the script may have run, and on a
// master whose writes reached the new one before the switch. Nor a write
// that failed after other script calls of its pipeline went out whole.
func resendable(err error, alone bool) bool {
	if err == nil {
		return false
	}
	if found := findIn(err, isOpError); found != nil {
		switch found.(*net.OpError).Op {
		case "dial":
			return true
		case "write":
			return alone
		}
		return false // a read, or a deadline set after the write
	}
	// Bare, not in a net.OpError: go-redis's report of a new connection
	// whose handshake failed because it was closed under it (a failover
	// client closing its connections to a replaced master), where the
	// script was never written; but also a TLS connection's write cut
	// short by such a close (crypto/tls reports it bare), after which
	// other script calls of the pipeline may have gone out whole. So, as
	// for a failed write, only a call that went alone.
	if errors.Is(err, net.ErrClosed) {
		return alone
	}
	if errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted) {
		return true
	}
	r := refusedBy(replyText(err))
	return r != nil && r.resend
}

// availability reports whether err says Redis cannot serve decisions (as
// opposed to an error about one request, such as a key of the wrong type).
func availability(err error) bool {
	// The limiter's own timeout counts, whatever error it names as its
	// cause (see timeoutError): Redis did not answer in time; unless its
	// master answered it, on a cluster (see slotCmd).
	if t, ok := findIn(err, isTimeoutError).(*timeoutError); ok && t.answered {
		return false
	}
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	// A connection closed on this side says nothing about Redis: go-redis
	// closes a failover client's connections to a master that the
	// sentinels have replaced, calls in flight on them included.
	if errors.Is(err, net.ErrClosed) {
		return false
	}
	if findIn(err, isNetError) != nil {
		return true
	}
	msg := replyText(err)
	if r := refusedBy(msg); r != nil {
		return r.down
	}
	// Anything that is not a reply from Redis: a closed pool, EOF, a refused
	// connection. (A reply a hook rebuilt with its text is read as one.)
	return !isRedisReply(err) && !looksLikeReply(msg)
}

// looksLikeReply reports whether msg, the text of an error that is not a
// reply of Redis's by its type, is that of one about a single command
// (NOSCRIPT, WRONGTYPE, ERR …, as Redis words its errors: an upper-case
// code, then a space), as an error a hook of the client's rebuilt from a
// reply has: such an error says nothing about Redis's health.
func looksLikeReply(msg string) bool {
	code, _, found := strings.Cut(msg, " ")
	if !found || code == "" {
		return false
	}
	for _, r := range code {
		if (r < 'A' || r > 'Z') && r != '-' {
			return false
		}
	}
	return true
}

// isRedisReply reports whether err is a reply from Redis.
func isRedisReply(err error) bool { return findIn(err, isReply) != nil }

// isNoScript reports whether err is Redis's NOSCRIPT: it lost the script
// (a restart, SCRIPT FLUSH, a failover to a replica that never saw it).
func isNoScript(err error) bool {
	return err != nil && strings.HasPrefix(replyText(err), "NOSCRIPT")
}

// isTryAgain reports whether err is a cluster master's refusal of a call
// whose keys lie in one slot being resharded, some of them moved already
// and some not (TRYAGAIN): it lasts as long as the move. Alone, each
// request's keys are all on one side (a request's keys share their hash
// tag, and move together unless caught mid-move), and its master serves it
// or redirects it (ASK).
func isTryAgain(err error) bool {
	return err != nil && strings.HasPrefix(replyText(err), "TRYAGAIN")
}

// isKeyNoPerm reports whether err is Redis's refusal of a call as a whole,
// before it ran, because the connection's ACL user may not touch one of
// the keys it declares: NOPERM about a key ("… access one of the keys used
// as arguments", "… access the '<key>' key"). A refusal inside a script,
// after it may have written (a command the user may not run), names the
// script ("script: <sha>") and is not one; nor, on the safe side, is a
// refusal whose key or user name contains "script".
func isKeyNoPerm(err error) bool {
	if err == nil {
		return false
	}
	msg := replyText(err)
	return strings.HasPrefix(msg, "NOPERM") && strings.Contains(msg, " key") && !strings.Contains(msg, "script")
}

// slotRefusal reports whether err is a cluster master's refusal of a call
// for its slot, which says nothing of the master's health: a redirect
// (MOVED, ASK) or TRYAGAIN.
func slotRefusal(err error) bool {
	r := refusedBy(replyText(err))
	return r != nil && r.resend && !r.down
}

// isNotHere reports whether err is a cluster master's answer to a request,
// inside a script of requests of several slots (its node form), whose keys
// it does not serve: their slot has moved (the client's slot map is
// stale), is being migrated away, or is being imported; or its cluster is
// down (the call, declaring no keys, was not refused as a whole). The
// request has written nothing (its first access failed, or, when a down
// cluster still serves reads, its first write); sent on its own, with its
// keys declared, it is routed to the master of its slot, which refuses it
// whole (CLUSTERDOWN: resent after a pause, then a failure of Redis) while
// its cluster is down.
func isNotHere(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "attempted to access a non local key") ||
		strings.Contains(msg, "attempted to access a slot not served") ||
		strings.Contains(msg, "while the cluster is down")
}

// noScriptFlags reports whether err is the refusal of a node form by a
// Redis that knows no script flags (before 7): its "#!lua" line does not
// compile, so nothing ran.
func noScriptFlags(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return strings.Contains(msg, "Error compiling script") && strings.Contains(msg, "near '#'")
}

// execPipe sends pipe, whose commands keep the errors go-redis sets on
// them, except when Exec reports an error that none of them carries while
// none has an answer either: go-redis fails so a new connection's
// handshake (a password Redis no longer takes), reporting it from Exec
// only, and the commands would read as a DEL or a SET done and a script
// that answered nothing. None of them ran: each gets that error.
func execPipe(ctx context.Context, pipe redis.Pipeliner) {
	cmds, err := pipe.Exec(ctx)
	if err == nil {
		return
	}
	for _, cmd := range cmds {
		if cmd.Err() != nil || answered(cmd) {
			return
		}
	}
	for _, cmd := range cmds {
		cmd.SetErr(err)
	}
}

// answered reports whether cmd holds a reply: a script call's list, a
// SET's OK. (A DEL's 0 tells nothing.)
func answered(cmd redis.Cmder) bool {
	switch c := cmd.(type) {
	case scriptCmd:
		return c.Val() != nil
	case *slotCmd:
		return c.Val() != nil
	case *redis.StatusCmd:
		return c.Val() != ""
	}
	return false
}
