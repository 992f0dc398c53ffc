//go:build race

package keyfunc

// raceEnabled reports whether the race detector, which changes allocation
// counts, is on.
const raceEnabled = true
