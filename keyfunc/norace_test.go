//go:build !race

package keyfunc

const raceEnabled = false
