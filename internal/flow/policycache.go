package flow

import (
	"sync/atomic"

	"github.com/sluicehq/sluice/core"
)

// policySlots is how many rule sets a policyCache remembers: the limiters
// of a few plans or routes, each reused by many requests.
const policySlots = 16

// policyCache remembers the RateLimit-Policy values of the last rule sets a
// flow has seen, keyed by their content (each rule's name and limit), which
// is all the value depends on. It holds nothing of the limiters themselves:
// limiters that a limiter function builds at run time and drops are
// collected, and a new limiter of the same rules hits the same entry.
//
// A hit costs a few atomic loads and comparisons and allocates nothing; a
// miss formats the value and replaces the oldest entry (three allocations).
// Safe for concurrent use: entries are immutable once stored.
type policyCache struct {
	slots [policySlots]atomic.Pointer[policyEntry]
	next  atomic.Uint32
}

type policyEntry struct {
	rules []ruleContent
	value string
}

// ruleContent is what the RateLimit-Policy item of a rule depends on.
type ruleContent struct {
	name  string
	limit core.Limit
}

// get returns the RateLimit-Policy value of rules.
func (c *policyCache) get(rules []core.RuleResult) string {
	for i := range c.slots {
		if e := c.slots[i].Load(); e != nil && e.matches(rules) {
			return e.value
		}
	}
	e := &policyEntry{rules: make([]ruleContent, len(rules)), value: Policy(rules)}
	for i, rr := range rules {
		e.rules[i] = ruleContent{rr.Name, rr.Limit}
	}
	c.slots[c.next.Add(1)%policySlots].Store(e)
	return e.value
}

func (e *policyEntry) matches(rules []core.RuleResult) bool {
	if len(e.rules) != len(rules) {
		return false
	}
	for i, rr := range rules {
		if e.rules[i].name != rr.Name || e.rules[i].limit != rr.Limit {
			return false
		}
	}
	return true
}
