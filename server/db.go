package server

import "github.com/raftlock/raftlock/fsm"

// Databases (SELECT 0-15). The node's table keys are a database's number followed by the
// client's key (fsm.DBKey). A request's key arguments are rewritten into table keys once it is
// known to run here (dispatch, a script's redis.call, EXEC's queue): handlers, the node, the
// tracker and the waiters see table keys only, and forwarding sends the client's own keys to a
// leader whose connection SELECTed the same database. Whatever goes back to a client (an
// invalidation, an error naming a key) gets the client's key back (userKey).

// withDBKeys returns args with cmd's key arguments replaced by database db's table keys (a new
// list; args is left as it is). For arguments as the reader copied them (argArena.copy) the keys and the list take
// no allocation: the database's byte goes in the spare byte before each key, and the list in
// the room past args' length. Either way a command's keys are made table keys once, in one
// database: a table key made in place shares its spare byte with any made before it.
func withDBKeys(cmd *command, args [][]byte, db int) [][]byte {
	var out [][]byte
	cmd.keyPositions(args, func(i int) {
		k := tableKeyRoom(args, i)
		if out == nil {
			if k != nil {
				out = args[2*len(args) : 3*len(args)]
			} else {
				out = make([][]byte, len(args))
			}
			copy(out, args)
		}
		if k != nil {
			k[0] = byte(db)
			out[i] = k
		} else {
			out[i] = fsm.DBKey(db, args[i])
		}
	})
	if out == nil {
		return args
	}
	return out
}

// tableKeyRoom returns args[i] with the spare byte before it, when args are the reader's copy
// (argArena.copy); nil otherwise. The proof is in the memory: the copy's second list holds, at i, a slice one
// byte longer than args[i] that ends where it does, and no other code makes that shape.
func tableKeyRoom(args [][]byte, i int) []byte {
	n := len(args)
	if cap(args) < 3*n || len(args[i]) == 0 {
		return nil
	}
	k := args[:2*n][n+i]
	if len(k) != len(args[i])+1 || &k[1] != &args[i][0] {
		return nil
	}
	return k
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
