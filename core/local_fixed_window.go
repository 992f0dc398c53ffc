package core

// fixedWindow is the twin of lua/fixed_window.lua.
func fixedWindow(r *compiledRule, s *localState, now, n int64) decision {
	rate, period := int64(r.Limit.Rate), r.periodTicks
	w, c := now/period, int64(0)
	if s.present && s.w >= w {
		w, c = s.w, s.c
	}
	left := (w+1)*period - now
	d := decision{avail: rate - c}
	if c > 0 {
		d.resetBefore = left
	}
	if c+n > rate {
		d.retry = left
		return d
	}
	d.ok, d.resetAfter, d.after = true, left, d.avail-n
	d.next = localState{w: w, c: c + n}
	return d
}
