package fsm

import "testing"

// The slots CLUSTER KEYSLOT of redis-server 7 gives for these keys (hash tags, empty and
// unclosed braces), and the slot of a table key and its hidden keys is its client key's.
func TestKeySlot(t *testing.T) {
	for key, want := range map[string]int{
		"foo": 12182, "123456789": 12739, "{user1000}.following": 3443, "foo{}{bar}": 8363,
		"foo{{bar}}zap": 4015, "foo{bar}{zap}": 5061, "": 0, "{}": 15257, "a{": 14311,
	} {
		if got := KeySlot([]byte(key)); got != want {
			t.Errorf("KeySlot(%q) = %d, want %d", key, got, want)
		}
	}
	tk := DBKey(3, []byte("{user1000}.lock"))
	for _, k := range [][]byte{tk, MarkerKey(tk), DelayKey(tk), HolderKey(tk, 7), WaiterKey(tk, 9)} {
		if got := SlotOf(k); got != 3443 {
			t.Errorf("SlotOf(%q) = %d, want 3443 (the slot of {user1000})", k, got)
		}
	}
}
