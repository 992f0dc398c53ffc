package core

// meter is the twin of lua/meter.lua: LeakyBucket, TokenBucket and GCRA,
// with maxDelay their parameter d (see compiledRule.meterDelay). The state
// is the TAT: t its whole ticks, v the remainder in units.
func meter(r *compiledRule, s *localState, now, n int64) decision {
	rate, event, capacity, maxDelay := r.rateUnits, r.eventUnits, r.capUnits, r.meterDelay()
	var debt int64
	need := n * event
	if s.present && s.t >= now {
		ahead := s.t - now
		if ahead > ceilDiv(capacity, rate) || ahead*rate+s.v > capacity {
			// The clock stepped back: denied, with the exact wait (see meter.lua).
			d := decision{resetBefore: ahead + ceilDiv(s.v, rate)}
			if x := s.v + need - capacity; x >= 0 {
				d.retry = ahead + ceilDiv(x, rate)
			} else {
				d.retry = ahead - (-x)/rate
			}
			if maxDelay >= 0 {
				d.retry = max(d.retry, d.resetBefore-maxDelay)
			}
			return d
		}
		debt = ahead*rate + s.v
	}
	admissible := func(l int64) int64 {
		count := (capacity - l) / event
		if maxDelay >= 0 {
			var byDelay int64
			if bound := maxDelay * rate; l <= bound {
				byDelay = (bound-l)/event + 1
			}
			count = min(count, byDelay)
		}
		return count
	}
	wait := ceilDiv(debt, rate)
	d := decision{avail: admissible(debt), resetBefore: wait}
	overCap := debt+need > capacity
	overDelay := maxDelay >= 0 && wait > maxDelay
	if overCap || overDelay {
		if overCap {
			d.retry = ceilDiv(debt+need-capacity, rate)
		}
		if overDelay {
			d.retry = max(d.retry, wait-maxDelay)
		}
		return d
	}
	after := debt + need
	d.ok, d.after = true, admissible(after)
	if maxDelay != polices {
		d.delay = wait
	}
	d.resetAfter = ceilDiv(after, rate)
	d.next = localState{t: now + after/rate, v: after % rate}
	return d
}
