//go:build race

package chilimit

const raceEnabled = true
