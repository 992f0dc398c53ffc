package redistest

import "testing"

// Slot agrees with Redis's CLUSTER KEYSLOT on known keys (from the cluster
// specification and go-redis's tests), hash tags included.
func TestSlot(t *testing.T) {
	for key, want := range map[string]int{
		"123456789":            0x31C3 % ClusterSlots,
		"":                     0,
		"foo":                  12182,
		"{foo}bar":             12182,
		"x{foo}y{bar}":         12182,
		"{user1000}.following": 3443,
		"{user1000}.followers": 3443,
	} {
		if got := Slot(key); got != want {
			t.Errorf("Slot(%q) = %d, want %d", key, got, want)
		}
	}
	// An empty tag is no tag: the whole key is hashed.
	if Slot("{}foo") == Slot("foo") {
		t.Errorf("Slot(%q) hashed the empty tag away", "{}foo")
	}
}
