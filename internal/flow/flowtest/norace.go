//go:build !race

package flowtest

// raceEnabled: the race detector changes allocation counts.
const raceEnabled = false
