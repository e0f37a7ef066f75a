package fsm

// Databases: raftlock keeps Redis's 16 (SELECT 0-15) in one table. A table key is its database's
// number, one byte, followed by the client's key, so every key of a database is contiguous in
// key order and a key cannot collide with another database's. Commands carry table keys.
// Entries and snapshots written before databases existed (entry versions 1 and 2, snapshot
// versions 1 and 2) hold database 0's keys without the byte: decoding adds it.

// Databases is how many databases there are (SELECT 0 to Databases-1).
const Databases = 16

// DBKey returns the table key of key in database db (0 <= db < Databases), in a new slice.
func DBKey(db int, key []byte) []byte {
	out := make([]byte, 1+len(key))
	out[0] = byte(db)
	copy(out[1:], key)
	return out
}

// SplitDBKey splits a table key into its database and the client's key (which aliases k).
func SplitDBKey(k []byte) (db int, key []byte) {
	if len(k) == 0 {
		return 0, k
	}
	return int(k[0]), k[1:]
}

// keyed reports whether a command of kind k names a table key (and not a member, a script or
// a channel).
func keyed(k Kind) bool {
	switch k {
	case KindGrant, KindRelease, KindRenew, KindExpire, KindWrite:
		return true
	}
	return false
}

// legacyKey is the table key of a key read from an entry or snapshot written before databases:
// database 0's.
func legacyKey(key []byte) []byte { return DBKey(0, key) }
