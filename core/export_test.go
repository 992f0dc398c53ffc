package core

// GroupBySlot makes l group its decisions by slot, as it does on a cluster
// whose masters refused the script's node form (Redis before 7: see
// slotsOnly), for the tests of package core_test.
func GroupBySlot(l *Limiter) { l.batch.slotsOnly.Store(true) }

// size returns the number of keys l holds.
func (l *Local) size() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.keys)
}
