package core

// logEntry is one admitted request of a SlidingWindowLog: its time and
// its cost (a member of the sorted set, see lua/sliding_window_log.lua).
type logEntry struct {
	at, n int64
}

// slidingWindowLog is the twin of lua/sliding_window_log.lua.
func slidingWindowLog(r *compiledRule, s *localState, now, n int64) decision {
	rate, period := int64(r.Limit.Rate), r.periodTicks
	var latest int64
	if len(s.log) > 0 {
		latest = s.log[len(s.log)-1].at
	}
	// Should the clock step back behind the newest request, the window
	// still ends there, as in the script.
	from := max(now, latest) - period
	first, used := 0, s.c // requests at or before from have left the window
	for first < len(s.log) && s.log[first].at <= from {
		used -= s.log[first].n
		first++
	}
	live := s.log[first:]
	d := decision{avail: rate - used}
	if len(live) > 0 {
		d.resetBefore = latest + period - now
	}
	if used+n > rate {
		need, left := used+n-rate, int64(0)
		for _, e := range live {
			if left += e.n; left >= need {
				d.retry = e.at + period - now
				break
			}
		}
		return d
	}
	d.ok, d.resetAfter, d.after = true, period, d.avail-n
	if d.resetBefore > period {
		d.resetAfter = d.resetBefore
	}
	// Should the clock step back, the request counts from the newest one's
	// time, as in the script. (Appending may write into s.log's spare
	// capacity, beyond what s holds: s is replaced by next once all rules
	// admit, and never reads past its own length. Local.decide copies a
	// log that holds little of its array when it stores it.)
	d.next = localState{log: append(live, logEntry{at: max(now, latest), n: n}), c: used + n}
	return d
}
