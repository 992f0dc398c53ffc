package core

import (
	"context"
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluicehq/sluice/internal/redistest"
)

// Every reply with which Redis refuses a command as a whole says Redis
// cannot serve decisions, and the refusals that cannot have run a script
// make a script call resendable: the two classifications read one list,
// so a refusal added for one is known to the other.
func TestRedisRefusalsClassifiedOnce(t *testing.T) {
	for _, tc := range []struct {
		msg    string
		resend bool
	}{
		{"LOADING Redis is loading the dataset in memory", true},
		{"READONLY You can't write against a read only replica.", true},
		{"ERR Error running script (call to f_8d2d5b2c): @user_script:1: -READONLY You can't write against a read only replica.", true},
		{"MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.", true},
		{"CLUSTERDOWN The cluster is down", true},
		{"ERR max number of clients reached", true},
		{"BUSY Redis is busy running a script.", false},
		{"MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.", false},
		{"NOREPLICAS Not enough good replicas to write.", false},
		{"OOM command not allowed when used memory > 'maxmemory'.", false},
		{"NOAUTH Authentication required.", false},
		{"WRONGPASS invalid username-password pair or user is disabled.", false},
		{"ERR Protocol error: unauthenticated multibulk length", false},
		// a write refused inside the script, as Redis 6 words it (the
		// script sends it on for its one request)
		{"@user_script: 212: -OOM command not allowed when used memory > 'maxmemory'.\r\n", false},
		{"@user_script: 212: -NOREPLICAS Not enough good replicas to write.\r\n", false},
		{"@user_script: 212: -READONLY You can't write against a read only replica.\r\n", true},
		// the same failing the call as a whole, as Redis 6 words it
		{"ERR Error running script (call to f_8d2d5b2c): @user_script:1: @user_script: 1: -READONLY You can't write against a read only replica.", true},
		{"ERR Error running script (call to f_8d2d5b2c): @user_script:1: @user_script: 1: -OOM command not allowed when used memory > 'maxmemory'.", false},
	} {
		// a reply from Redis (redis.Error), the same wrapped by a hook of
		// the client's, as go-redis keeps a command's error, and rebuilt
		// by one with the same text
		for _, err := range []error{scriptError(tc.msg), fmt.Errorf("redis evalsha: %w", scriptError(tc.msg)), errors.New(tc.msg)} {
			if !availability(err) {
				t.Errorf("availability(%q) = false; want true: Redis refuses every decision", err)
			}
			for _, alone := range []bool{false, true} {
				if got := resendable(err, alone); got != tc.resend {
					t.Errorf("resendable(%q, alone %v) = %v; want %v", err, alone, got, tc.resend)
				}
			}
		}
	}
	for _, msg := range []string{
		"WRONGTYPE Operation against a key holding the wrong kind of value",
		"BUSYKEY Target key name already exists.",
		// a hook's text quoting a command's keys, which clients choose
		"WRONGTYPE Operation against a key holding the wrong kind of value [sluice:{x: -OOM}]",
		"NOSCRIPT No matching script. Please use EVAL.",
		"ERR unknown command",
	} {
		for _, err := range []error{scriptError(msg), errors.New(msg)} {
			if availability(err) || resendable(err, true) {
				t.Errorf("%q (%T): a reply about one command taken for Redis refusing decisions", msg, err)
			}
		}
	}
	if !availability(errors.New("redis: client is closed")) {
		t.Errorf("an error that is no reply from Redis must count against its health")
	}
	// A slot half moved refuses a call of several of its keys (TRYAGAIN): it
	// ran nothing, and says nothing of the master's health.
	if err := scriptError("TRYAGAIN Multiple keys request during rehashing of slot"); availability(err) || !resendable(err, false) {
		t.Errorf("TRYAGAIN: availability %v, resendable %v; want false, true", availability(err), resendable(err, false))
	}
	// A lost reply, as a hook rebuilds it quoting the command's keys (chosen
	// by clients): the script may have run, and is never sent again.
	for _, msg := range []string{"[evalsha 1a2b 1 sluice:{u: -LOADING}:x:0]: EOF", "[evalsha 1a2b 1 sluice:{u: -MOVED 1 x}:x:0]: read: connection reset by peer"} {
		if err := errors.New(msg); resendable(err, true) || resendable(err, false) {
			t.Errorf("%q: resendable; the script may have run", msg)
		}
	}
}

// A connection closed under a call is resendable only when the call went
// alone: go-redis reports a closed handshake bare (nothing was written),
// and so does crypto/tls a write cut short, after which other script calls
// of the same pipeline may have gone out whole and run.
func TestClosedConnectionResendableOnlyAlone(t *testing.T) {
	for _, tc := range []struct {
		err         error
		alone, want bool
	}{
		{net.ErrClosed, true, true},
		{net.ErrClosed, false, false},
		{fmt.Errorf("redis: handshake: %w", net.ErrClosed), false, false},
		{&net.OpError{Op: "write", Err: net.ErrClosed}, true, true},
		{&net.OpError{Op: "write", Err: net.ErrClosed}, false, false},
		{&net.OpError{Op: "read", Err: net.ErrClosed}, true, false},
		{&net.OpError{Op: "dial", Err: net.ErrClosed}, false, true},
	} {
		if got := resendable(tc.err, tc.alone); got != tc.want {
			t.Errorf("resendable(%v, alone %v) = %v; want %v", tc.err, tc.alone, got, tc.want)
		}
	}
}

// A master's refusal of one request of a cross-slot script call (its slot
// is elsewhere) sends that request again on its own; a Redis that knows no
// script flags turns the limiter to per-slot calls. Redis 7 words the first
// as measured on 7.0.15; Redis 6's words are those of its source.
func TestClusterScriptRefusals(t *testing.T) {
	for _, msg := range []string{
		"ERR Script attempted to access a non local key in a cluster node script: 3fb55c69dbe7c7132a406f51d6c90eb602e3b6c5, on @user_script:2.",
		"ERR Script attempted to access a non local key in a cluster node", // as pcall sees it
		"Lua script attempted to access a non local key in a cluster node",
		"ERR Script attempted to access a slot not served",
		"ERR Script attempted to execute a command while the cluster is down",
		"ERR Script attempted to execute a write command while the cluster is down and readonly",
	} {
		if !isNotHere(scriptError(msg)) {
			t.Errorf("isNotHere(%q) = false", msg)
		}
		if noScriptFlags(scriptError(msg)) {
			t.Errorf("noScriptFlags(%q) = true", msg)
		}
	}
	old := scriptError("ERR Error compiling script (new function): user_script:1: unexpected symbol near '#'")
	if !noScriptFlags(old) || isNotHere(old) {
		t.Errorf("Redis 6's refusal of a flagged script: noScriptFlags %v, isNotHere %v", noScriptFlags(old), isNotHere(old))
	}
	for _, err := range []error{nil, scriptError("WRONGTYPE Operation against a key holding the wrong kind of value"), scriptError("ERR Error compiling script (new function): user_script:9: '=' expected near 'x'")} {
		if isNotHere(err) || noScriptFlags(err) {
			t.Errorf("%v taken for a cluster refusal", err)
		}
	}
}

// A Redis that asks for a password the client does not give (restarted
// with requirepass, say) refuses every decision: that counts against its
// health, and the breaker opens, as for any Redis that cannot decide.
func TestAuthRefusalCountsAgainstHealth(t *testing.T) {
	srv := redistest.StartT(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	lim := newOn(t, c, GCRA, PerSecond(100), WithHealthCheck(3, time.Second), WithTimeout(time.Second))
	ctx := context.Background()
	if _, err := lim.Allow(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigSet(ctx, "requirepass", "secret").Err(); err != nil {
		t.Fatal(err)
	}
	_ = admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal").Err() // every connection must authenticate anew
	var last error
	for range 5 {
		_, last = lim.Allow(ctx, "k")
	}
	if h := lim.Health(); h != Unhealthy || !errors.Is(last, ErrUnavailable) {
		t.Errorf("after 5 decisions refused for want of a password: Health() %v, last error %v; want unhealthy, ErrUnavailable", h, last)
	}
}

// A client whose password Redis no longer takes (rotated on the server)
// fails every call of a batch with that refusal, Resets and probes
// included: go-redis reports a new connection's failed handshake from
// Exec only, leaving the pipeline's commands with neither an error nor a
// value, which read as a DEL or SET that succeeded and a script that
// answered nothing.
func TestWrongPasswordFailsEveryCall(t *testing.T) {
	srv := redistest.StartT(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	ctx := context.Background()
	if err := admin.ConfigSet(ctx, "requirepass", "a").Err(); err != nil {
		t.Fatal(err)
	}
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "a"})
	defer c.Close()
	lim := newOn(t, c, GCRA, PerSecond(100), WithHealthCheck(3, 50*time.Millisecond), WithTimeout(time.Second))
	if _, err := lim.Allow(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if err := admin.ConfigSet(ctx, "requirepass", "b").Err(); err != nil {
		t.Fatal(err)
	}
	_ = admin.Do(ctx, "CLIENT", "KILL", "TYPE", "normal").Err() // every connection must authenticate anew
	if err := lim.Reset(ctx, "k"); err == nil {
		t.Errorf("Reset with a password Redis refuses: no error; want the refusal")
	}
	var last error
	for range 5 {
		_, last = lim.Allow(ctx, "k")
	}
	if !errors.Is(last, ErrUnavailable) {
		t.Fatalf("after 5 decisions refused for a wrong password: %v; want ErrUnavailable", last)
	}
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if lim.Health() == Healthy {
			t.Fatalf("Health() healthy while Redis refuses the client's password (the probe's SET read as done)")
		}
	}
}

// Only a refusal of a call's declared key, before it ran, sends the call's
// decisions again one by one: not one of a command the user may not run,
// nor any refusal from inside a script, which may have written already.
func TestKeyNoPermSplitsOnlyBeforeTheScriptRuns(t *testing.T) {
	for _, c := range []struct {
		msg  string
		want bool
	}{
		{"NOPERM this user has no permissions to access one of the keys used as arguments", true},                  // Redis 6.2, 7.0
		{"NOPERM User lim has no permissions to access the 'sluice:{bad}:3f:0' key", true},                         // later wording
		{"NOPERM this user has no permissions to run the 'evalsha' command", false},                                // the command itself
		{"NOPERM User lim has no permissions to run the 'set' command script: 3eae9d6, on @user_script:1.", false}, // inside, after writes
		{"ERR The user executing the script can't run this command or subcommand script: 3eae9d6, on @user_script:1.", false},
		{"NOPERM User lim has no permissions to access the 'sluice:{script}:3f:0' key", false}, // a key naming a script: not split (safe side)
		{"WRONGTYPE Operation against a key holding the wrong kind of value", false},
	} {
		if got := isKeyNoPerm(scriptError(c.msg)); got != c.want {
			t.Errorf("isKeyNoPerm(%q) = %v; want %v", c.msg, got, c.want)
		}
	}
}
