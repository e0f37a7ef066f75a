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
	// Script returns the stored source of a script by its SHA1 hex digest.
	Script(sha string) (string, bool)
}

// Member is one server of the cluster as a node reports it: its raft configuration entry plus
// the client address replicated through SetMember. It lives here, with View, because it is the
// vocabulary raftnode and the server share.
type Member struct {
	ID         string
	RaftAddr   string
	ClientAddr string // empty until the member has announced itself
	Voter      bool
	Leader     bool
}
