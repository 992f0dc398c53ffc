package core

import (
	"slices"
	"testing"
	"time"
)

// pinnedRule is one rule per algorithm whose key fingerprint and script
// arguments were taken from the build before the algorithm table
// (core/algorithms.go): a change to either would make every existing key
// unreadable, or change what the script decides.
var pinnedRules = []struct {
	alg         Algorithm
	fingerprint string
	args        []string // with WithMaxDelay(300ms)
}{
	{FixedWindow, "5nrTryps0ovtJRa30MljTw", []string{"1", "1", "10", "1000000", "1", "0", "0"}},
	{SlidingWindowLog, "9FCgk5UbpPgxXtK4-ZjNmA", []string{"2", "1", "10", "1000000", "0", "0", "0"}},
	{SlidingWindowCounter, "OLmYRMt_NyV5gYMmh-QmbA", []string{"3", "1", "10", "1000000", "32", "8796093022207", "0"}},
	{LeakyBucket, "hN1ktfOoqwBPmeaCz4o0Vg", []string{"4", "1", "1", "100000", "2000000", "300000", "1000000"}},
	{TokenBucket, "LrRb7ZyvB_IVcbN-lyBV1A", []string{"5", "1", "1", "100000", "2000000", "-2", "1000000"}},
	{GCRA, "UmU2Yt1EqamOuXFis3ljYQ", []string{"6", "1", "1", "100000", "2000000", "-2", "1000000"}},
}

func TestFingerprintAndArgsPinned(t *testing.T) {
	if len(pinnedRules) != len(Algorithms()) {
		t.Errorf("%d algorithms, %d pinned: pin the new one's fingerprint", len(Algorithms()), len(pinnedRules))
	}
	for _, p := range pinnedRules {
		t.Run(string(p.alg), func(t *testing.T) {
			l := Limit{Rate: 10, Period: time.Second}
			if !p.alg.windowed() {
				l.Burst = 20
			}
			rules, err := compilePolicy([]Rule{{Name: "r", Algorithm: p.alg, Limit: l}},
				options{maxDelaySet: true, maxDelay: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if got := fingerprint(rules); got != p.fingerprint {
				t.Errorf("fingerprint %q, want %q", got, p.fingerprint)
			}
			var args []string
			for _, a := range rules[0].args {
				args = append(args, a.(string))
			}
			if !slices.Equal(args, p.args) {
				t.Errorf("script arguments %q, want %q", args, p.args)
			}
		})
	}
	var all []Rule
	for _, a := range Algorithms() {
		all = append(all, Rule{Name: string(a), Algorithm: a, Limit: PerMinute(7)})
	}
	rules, err := compileRules(all)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fingerprint(rules), "9eeblQwdoIS0kn4VXaEgDg"; got != want {
		t.Errorf("fingerprint of a policy of every algorithm %q, want %q", got, want)
	}
}
