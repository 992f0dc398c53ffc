package core

// slidingWindowCounter is the twin of lua/sliding_window_counter.lua.
func slidingWindowCounter(r *compiledRule, s *localState, now, n int64) decision {
	rate, period := int64(r.Limit.Rate), r.periodTicks
	w := now / period
	var p, c int64
	if s.present {
		if s.w >= w {
			w, p, c = s.w, s.p, s.c
		} else if s.w == w-1 {
			p = s.c
		}
	}
	e := now - w*period
	wait := max(-e, 0) // until the current window starts: the clock stepped back
	e = max(e, 0)
	capacity := rate * period
	used := p*(period-e) + c*period
	var d decision
	if used < capacity {
		d.avail = (capacity - used) / period
	}
	if c > 0 {
		d.resetBefore = wait + 2*period - e
	} else if p > 0 {
		d.resetBefore = wait + period - e
	}
	if used+n*period > capacity {
		if room := (rate - c - n) * period; room >= 0 {
			d.retry = wait + period - room/p - e
		} else {
			d.retry = wait + period - e + max(period-(rate-n)*period/c, 0)
		}
		return d
	}
	d.ok, d.resetAfter, d.after = true, wait+2*period-e, d.avail-n
	d.next = localState{w: w, p: p, c: c + n}
	return d
}
