package fsm

import "time"

// View is what a request sees when the leader evaluates it: the applied table plus, for each
// held key, how much of its lease this node's timer says is left. raftnode implements it; the
// server reads through it. It only exists during one evaluation and must not be retained.
type View interface {
	// Lookup returns the lock on key and its remaining lease (0 when it has no lease).
	Lookup(key []byte) (l Lock, remaining time.Duration, held bool)
	// Len is the number of held keys.
	Len() int
}
