package server

import "github.com/raftlock/raftlock/fsm"

// Databases (SELECT 0-15). The node's table keys are a database's number followed by the
// client's key (fsm.DBKey). A request's key arguments are rewritten into table keys once it is
// known to run here (dispatch, a script's redis.call, EXEC's queue): handlers, the node, the
// tracker and the waiters see table keys only, and forwarding sends the client's own keys to a
// leader whose connection SELECTed the same database. Whatever goes back to a client (an
// invalidation, an error naming a key) gets the client's key back (userKey).

// withDBKeys returns args with cmd's key arguments replaced by database db's table keys (a new
// slice; args is left as it is).
func withDBKeys(cmd *command, args [][]byte, db int) [][]byte {
	var out [][]byte
	cmd.keyPositions(args, func(i int) {
		if out == nil {
			out = append([][]byte(nil), args...)
		}
		out[i] = fsm.DBKey(db, args[i])
	})
	if out == nil {
		return args
	}
	return out
}

// dbKeys returns the table keys of keys in database db.
func dbKeys(db int, keys [][]byte) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = fsm.DBKey(db, k)
	}
	return out
}

// userKey is the client's key of a table key.
func userKey(key []byte) []byte {
	_, k := fsm.SplitDBKey(key)
	return k
}
