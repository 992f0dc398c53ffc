// Package core decides rate limits in Redis, atomically, for many
// application instances at once.
//
// A Limiter holds one or more rules (a policy). Each decision runs one Lua
// script that reads Redis's own clock (TIME), evaluates every rule of the
// key and, only when all of them admit, consumes from all of them.
// Application clocks never enter a decision, so instances with skewed
// clocks agree; concurrent callers never over-admit, because Redis runs the
// script atomically. Should Redis's own clock step back, state written at
// a later time still counts: the step gives nothing back (a meter holds
// as much more debt as the clock stepped back, and no window starts anew
// until the clock has caught up), RetryAfter and ResetAfter count from
// the clock's new time, and keys live as long as their state needs. A
// LeakyBucket's Delay then includes the step, and WithMaxDelay may deny
// until the clock has caught up.
//
// Concurrent decisions of one Limiter share script calls: a caller queues
// its decision and waits for its own answer or its own deadline; queued
// decisions go to Redis together, in one script call that decides each of
// them in order, all or nothing, with its own answer and its own error. A
// lone caller sends its decision itself at once, with no timer and no
// goroutine handoff. The deadline holds whatever the go-redis client's own
// timeouts are (on a default *redis.Client, which ignores context
// deadlines while it reads, a lone call goes on a copy of the client that
// enforces them; see docs/performance.md).
//
// # Choosing an algorithm
//
// See the Algorithm constants. In short: TokenBucket or GCRA for APIs (a
// burst, then a steady rate); LeakyBucket to smooth work to a steady pace
// (it delays instead of rejecting); SlidingWindowLog when a limit must hold
// exactly over every trailing window (memory grows with the requests in
// the window); SlidingWindowCounter for a cheap close approximation;
// FixedWindow for the cheapest count per calendar window when twice the
// rate across a window edge is acceptable.
//
// # Arithmetic
//
// Scripts compute in integers: time in microseconds, and for the meters
// (LeakyBucket, TokenBucket, GCRA) debt kept in units of 1/r of a
// microsecond, r = Rate / gcd(Rate, P) with P the Period in microseconds
// (of a millisecond, P in milliseconds, where the clock is read in
// milliseconds), so an emission interval like one third of a second is
// exact and PerSecond(10) leaves Remaining 9 after one event. Only where a
// limit's arithmetic would pass 2^50 is the clock read in whole
// milliseconds: for a meter when Burst × P / gcd(Rate, P) > 2^50, and for
// SlidingWindowCounter when 2 × Rate × P > 2^50 (PerDay(13033) and
// PerDay(6516) respectively); FixedWindow
// and SlidingWindowLog, whose arithmetic has no such product, always
// count microseconds (see Limit). Limits that pass 2^50 in milliseconds
// too are rejected as ErrInvalidLimit; so are rates above 2^50, and
// limits whose whole refill (the meters) or two periods (the windows)
// would take more than 2^50µs, about 35 years, which no reported duration
// could hold exactly.
//
// # Keys
//
// A rule's state lives at "<prefix>:{<stored key>}:<fingerprint>:<rule index>".
// The braces form a Redis Cluster hash tag, so all rules of one user key sit
// in one slot and one script can touch them. The stored key is the user key,
// except that user keys longer than 64 bytes, empty, starting with '#' or
// holding '}' are stored as '#' plus a SHA-256 prefix, so any bytes of any
// length are safe. The fingerprint is 128 bits of SHA-256 in 22 base64url
// characters, outside the hash tag, over every rule's name, algorithm,
// rate, period and burst (and, for TokenBucket, LeakyBucket and
// SlidingWindowLog, the form of their state since it last
// changed, so that keys of earlier builds are never misread): limiters
// with different rules never share state, even among millions of them,
// and limiters with the same rules and prefix (the many instances of one
// service) do. Changing a limit therefore starts its counters afresh, and
// so does moving from a sluice whose keys had the earlier 8-hex-digit
// fingerprint: its keys are never read and expire on their TTL, about one
// Period (see docs/keys.md).
//
// Every key is written with a TTL (SET ... PX, or PEXPIRE for the sliding
// log), rounded up to whole milliseconds and never 0, and never shorter
// than the time until the key would be back to its untouched state: one
// Period for FixedWindow, two for SlidingWindowCounter; for the sliding
// log, one Period after its newest event, rounded up to the end of a
// Period-long cell; for the buckets and GCRA, the time to refill Burst,
// rounded up to the end of a cell (the Period, or that time when it is
// shorter), so that a busy key's expiry moves once a cell at most (see
// docs/keys.md). A key whose TTL is removed from outside (PERSIST) gets
// one again with its next window or cell. Redis memory per key is in
// docs/how-it-decides.md.
//
// # In memory
//
// Local is the pure-Go twin of every script, with the same decisions at an
// explicit time. Differential tests hold the two to the same answers.
package core
