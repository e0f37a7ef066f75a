package server

import (
	"slices"
	"sort"
	"strings"

	"github.com/raftlock/raftlock/node"
)

// command describes one command: its handler and what COMMAND reports about it.
type command struct {
	name    string
	arity   int    // Redis's convention: n = exactly n args with the name, -n = at least n
	flags   string // Redis's command flags, space-separated
	keys    keySpec
	fam     family // for latency figures (metrics.go)
	run     func(r *request)
	summary string

	flagList []string // flags, split

	// write and leader are derived from flags: a command that reads or writes locks must run on
	// the leader; a follower forwards it (or redirects, or serves a READONLY read itself).
	write  bool
	leader bool
	// movable: the keys are KEYS of a script (EVAL script numkeys key ...), not fixed positions.
	movable bool
	// denyOOM: the command may create keys, so it is refused once the table holds MaxKeys.
	denyOOM bool
	// pipelined: the command may run while earlier commands of its connection are in flight
	// (pipeline.go): it touches only the keys it names (a script: the keys it declares).
	pipelined bool
	// blocking: the command may wait for a change of its keys (BLPOP, BRPOP). On a follower it
	// waits there, forwarding only its tries (lists.go); it never runs pipelined.
	blocking bool
	// aclID is the command's name in the ACL catalog (users.go); aclSubs its known
	// subcommands' (a container command's: CLIENT KILL is "client|kill").
	aclID   int
	aclSubs map[string]int
	// keyPerm is what a user's key patterns must allow on each of its keys: derived from the
	// command's key-spec flags (aclKeyFlags) as Redis 7.0's ACL derives it.
	keyPerm keyPerm
	// noAuth: the command runs before the connection authenticated (AUTH, HELLO, QUIT, RESET).
	noAuth bool
	// stage, when set, is the command in two halves (stage.go): it parses and returns what to
	// propose (or replies and returns a nil eval), and finish replies from the outcome. A
	// pipelining connection runs such a command on its own goroutine, not a worker's.
	stage func(r *request) (keys [][]byte, eval node.Eval, finish finishFunc)
}

// keySpec is where a command's keys are: Redis's first, last (negative: from the end) and step.
type keySpec struct{ first, last, step int }

// keyArgs returns the keys a command names in args (a script's declared keys for EVAL and
// friends). With a step of 1 (every command but MSET) it shares args' memory.
func (cmd *command) keyArgs(args [][]byte) [][]byte {
	if cmd.movable {
		if n, ok := parseInt(args[2]); ok && n >= 0 && int(n) <= len(args)-3 {
			return args[3 : 3+n]
		}
		return nil
	}
	first, last := cmd.keys.first, cmd.keys.last
	if first <= 0 || first >= len(args) {
		return nil
	}
	if last < 0 {
		last = len(args) + last
	}
	if cmd.name == "mlock" {
		last = mlockKeysEnd(args) - 1 // its options follow its keys
	}
	last = min(last, len(args)-1)
	if cmd.keys.step <= 1 {
		return args[first : last+1]
	}
	var keys [][]byte
	for i := first; i <= last; i += cmd.keys.step {
		keys = append(keys, args[i])
	}
	return keys
}

// keyPositions calls fn with the index in args of each key keyArgs returns, in order.
func (cmd *command) keyPositions(args [][]byte, fn func(i int)) {
	step := max(cmd.keys.step, 1)
	for n, i := len(cmd.keyArgs(args)), cmd.keys.first; n > 0; n, i = n-1, i+step {
		fn(i)
	}
}

// arityOK applies Redis's arity convention: n = exactly n args with the name, -n = at least n.
func (cmd *command) arityOK(nargs int) bool { return arityOK(cmd.arity, nargs) }

func arityOK(arity, nargs int) bool {
	return arity > 0 && nargs == arity || arity < 0 && nargs >= -arity
}

// lookupCommand finds a command by name, ignoring ASCII case, without allocating.
func lookupCommand(name []byte) *command {
	if len(name) > maxCommandName {
		return nil
	}
	var buf [maxCommandName]byte
	for i, ch := range name {
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		buf[i] = ch
	}
	return commands[string(buf[:len(name)])] // no allocation: the compiler sees the lookup
}

// commands is the command table, keyed by lowercase name: one row a command, grouped by the
// file its handler lives in. keys is Redis's first, last and step key positions (COMMAND, and
// cluster-aware clients, read them); flags are Redis's.
var commands = map[string]*command{}

func init() {
	for _, cmd := range []*command{
		// locks.go
		{name: "lock", arity: -3, fam: famLock, flags: "write denyoom", keys: keySpec{1, 1, 1}, run: cmdLock, stage: stageLock, summary: "Acquire a lock with a lease; returns its fencing token or nil"},
		{name: "unlock", arity: -2, fam: famLock, flags: "write", keys: keySpec{1, 1, 1}, run: cmdUnlock, stage: stageUnlock, summary: "Release a lock held with the given token"},
		{name: "renew", arity: -3, fam: famLock, flags: "write", keys: keySpec{1, 1, 1}, run: cmdRenew, summary: "Extend the lease of a lock held with the given token"},
		{name: "lockinfo", arity: 2, fam: famRead, flags: "readonly", keys: keySpec{1, 1, 1}, run: cmdLockInfo, summary: "Owner, fencing token and remaining lease of a lock"},
		{name: "validate", arity: 3, fam: famRead, flags: "readonly", keys: keySpec{1, 1, 1}, run: cmdValidate, summary: "Whether a token is the current holder's"},
		{name: "semacquire", arity: -4, fam: famLock, flags: "write denyoom noscript", keys: keySpec{1, 1, 1}, run: cmdSemAcquire, summary: "Take a permit of a semaphore with a lease; returns its fencing token or nil"},
		{name: "semrelease", arity: 3, fam: famLock, flags: "write", keys: keySpec{1, 1, 1}, run: cmdSemRelease, summary: "Give back the permit held with the given token"},
		{name: "mlock", arity: -3, fam: famLock, flags: "write denyoom noscript", keys: keySpec{2, -1, 1}, run: cmdMLock, summary: "Take several locks at once, all or none; returns one fencing token per key or nil"},
		{name: "lockwaiters", arity: 2, fam: famRead, flags: "readonly", keys: keySpec{1, 1, 1}, run: cmdLockWaiters, summary: "The requests waiting for a lock, in order"},
		{name: "locks", arity: -1, fam: famRead, flags: "readonly", run: cmdLocks, summary: "List the locks, shares and permits held in the database, paged"},
		// strings.go
		{name: "mset", arity: -3, fam: famLock, flags: "write denyoom", keys: keySpec{1, -1, 2}, run: cmdMSet, summary: "Set several keys at once, all or none"},
		{name: "set", arity: -3, fam: famLock, flags: "write denyoom", keys: keySpec{1, 1, 1}, run: cmdSet, stage: stageSet, summary: "Set a key (a lock) with NX/XX, an expiry and GET"},
		{name: "get", arity: 2, fam: famRead, flags: "readonly fast", keys: keySpec{1, 1, 1}, run: cmdGet, summary: "Get the value (owner) of a key"},
		{name: "getrange", arity: 4, fam: famRead, flags: "readonly", keys: keySpec{1, 1, 1}, run: cmdGetRange, summary: "Get a substring of a key's value"},
		{name: "setnx", arity: 3, fam: famLock, flags: "write denyoom fast", keys: keySpec{1, 1, 1}, run: cmdSetNX, summary: "Set a key only if it does not exist"},
		{name: "setex", arity: 4, fam: famLock, flags: "write denyoom", keys: keySpec{1, 1, 1}, run: cmdSetEX, summary: "Set a key with an expiry in seconds"},
		{name: "psetex", arity: 4, fam: famLock, flags: "write denyoom", keys: keySpec{1, 1, 1}, run: cmdPSetEX, summary: "Set a key with an expiry in milliseconds"},
		{name: "getset", arity: 3, fam: famLock, flags: "write denyoom fast", keys: keySpec{1, 1, 1}, run: cmdGetSet, summary: "Set a key and return its old value"},
		{name: "getdel", arity: 2, fam: famLock, flags: "write fast", keys: keySpec{1, 1, 1}, run: cmdGetDel, summary: "Return a key's value and delete it"},
		{name: "getex", arity: -2, fam: famLock, flags: "write fast", keys: keySpec{1, 1, 1}, run: cmdGetEX, summary: "Return a key's value and change its expiry"},
		{name: "mget", arity: -2, fam: famRead, flags: "readonly fast", keys: keySpec{1, -1, 1}, run: cmdMGet, summary: "Get the values of keys"},
		{name: "incr", arity: 2, fam: famLock, flags: "write denyoom fast", keys: keySpec{1, 1, 1}, run: cmdIncr, summary: "Increment the integer in a key"},
		{name: "decr", arity: 2, fam: famLock, flags: "write denyoom fast", keys: keySpec{1, 1, 1}, run: cmdDecr, summary: "Decrement the integer in a key"},
		{name: "incrby", arity: 3, fam: famLock, flags: "write denyoom fast", keys: keySpec{1, 1, 1}, run: cmdIncrBy, summary: "Add to the integer in a key"},
		{name: "decrby", arity: 3, fam: famLock, flags: "write denyoom fast", keys: keySpec{1, 1, 1}, run: cmdDecrBy, summary: "Subtract from the integer in a key"},
		// hashes.go
		{name: "hset", arity: -4, fam: famCollection, flags: "write denyoom fast", keys: keySpec{1, 1, 1}, run: cmdHSet, summary: "Set fields of a hash"},
		{name: "hmset", arity: -4, fam: famCollection, flags: "write denyoom fast", keys: keySpec{1, 1, 1}, run: cmdHMSet, summary: "Set fields of a hash (replies OK)"},
		{name: "hsetnx", arity: 4, fam: famCollection, flags: "write denyoom fast", keys: keySpec{1, 1, 1}, run: cmdHSetNX, summary: "Set a field of a hash only if it is missing"},
		{name: "hdel", arity: -3, fam: famCollection, flags: "write fast", keys: keySpec{1, 1, 1}, run: cmdHDel, summary: "Delete fields of a hash"},
		{name: "hincrby", arity: 4, fam: famCollection, flags: "write denyoom fast", keys: keySpec{1, 1, 1}, run: cmdHIncrBy, summary: "Add to the integer in a field of a hash"},
		{name: "hget", arity: 3, fam: famRead, flags: "readonly fast", keys: keySpec{1, 1, 1}, run: cmdHGet, summary: "The value of a field of a hash"},
		{name: "hmget", arity: -3, fam: famRead, flags: "readonly fast", keys: keySpec{1, 1, 1}, run: cmdHMGet, summary: "The values of fields of a hash"},
		{name: "hexists", arity: 3, fam: famRead, flags: "readonly fast", keys: keySpec{1, 1, 1}, run: cmdHExists, summary: "Whether a hash has a field"},
		{name: "hstrlen", arity: 3, fam: famRead, flags: "readonly fast", keys: keySpec{1, 1, 1}, run: cmdHStrLen, summary: "The length of a field's value"},
		{name: "hlen", arity: 2, fam: famRead, flags: "readonly fast", keys: keySpec{1, 1, 1}, run: cmdHLen, summary: "The number of fields of a hash"},
		{name: "hkeys", arity: 2, fam: famRead, flags: "readonly", keys: keySpec{1, 1, 1}, run: cmdHKeys, summary: "The fields of a hash"},
		{name: "hvals", arity: 2, fam: famRead, flags: "readonly", keys: keySpec{1, 1, 1}, run: cmdHVals, summary: "The values of a hash"},
		{name: "hgetall", arity: 2, fam: famRead, flags: "readonly", keys: keySpec{1, 1, 1}, run: cmdHGetAll, summary: "The fields and values of a hash"},
		// keys.go
		{name: "del", arity: -2, fam: famLock, flags: "write", keys: keySpec{1, -1, 1}, run: cmdDel, stage: stageDel, summary: "Delete keys"},
		{name: "unlink", arity: -2, fam: famLock, flags: "write fast", keys: keySpec{1, -1, 1}, run: cmdDel, summary: "Delete keys (as DEL: nothing is freed in the background)"},
		{name: "type", arity: 2, fam: famRead, flags: "readonly fast", keys: keySpec{1, 1, 1}, run: cmdType, summary: "The type of a key's value"},
		{name: "persist", arity: 2, fam: famLock, flags: "write fast", keys: keySpec{1, 1, 1}, run: cmdPersist, summary: "Remove a key's expiry"},
		{name: "pexpiretime", arity: 2, fam: famRead, flags: "readonly fast", keys: keySpec{1, 1, 1}, run: cmdPExpireTime, summary: "A key's expiry as a Unix time in milliseconds"},
		{name: "expiretime", arity: 2, fam: famRead, flags: "readonly fast", keys: keySpec{1, 1, 1}, run: cmdExpireTime, summary: "A key's expiry as a Unix time in seconds"},
		{name: "flushdb", arity: -1, fam: famAdmin, flags: "write noscript", run: cmdFlushDB, summary: "Delete every key of the database"},
		{name: "flushall", arity: -1, fam: famAdmin, flags: "write noscript", run: cmdFlushAll, summary: "Delete every key of every database"},
		{name: "keys", arity: 2, fam: famRead, flags: "readonly", run: cmdKeys, summary: "The keys of the database that match a pattern"},
		{name: "scan", arity: -2, fam: famRead, flags: "readonly", run: cmdScan, summary: "Iterate over the database's keys"},
		{name: "exists", arity: -2, fam: famRead, flags: "readonly fast", keys: keySpec{1, -1, 1}, run: cmdExists, summary: "Count existing keys"},
		{name: "pttl", arity: 2, fam: famRead, flags: "readonly fast", keys: keySpec{1, 1, 1}, run: cmdPTTL, summary: "Remaining lease in milliseconds"},
		{name: "ttl", arity: 2, fam: famRead, flags: "readonly fast", keys: keySpec{1, 1, 1}, run: cmdTTL, summary: "Remaining lease in seconds"},
		{name: "pexpire", arity: -3, fam: famLock, flags: "write fast", keys: keySpec{1, 1, 1}, run: cmdPExpire, summary: "Set a key's lease in milliseconds"},
		{name: "expire", arity: -3, fam: famLock, flags: "write fast", keys: keySpec{1, 1, 1}, run: cmdExpire, summary: "Set a key's lease in seconds"},
		{name: "pexpireat", arity: -3, fam: famLock, flags: "write fast", keys: keySpec{1, 1, 1}, run: cmdPExpireAt, summary: "Set a key's expiry as a Unix time in milliseconds"},
		{name: "expireat", arity: -3, fam: famLock, flags: "write fast", keys: keySpec{1, 1, 1}, run: cmdExpireAt, summary: "Set a key's expiry as a Unix time in seconds"},
		{name: "dbsize", arity: 1, fam: famRead, flags: "readonly fast", run: cmdDBSize, summary: "Number of held locks"},
		// zsets.go
		{name: "zadd", arity: -4, fam: famCollection, flags: "write denyoom fast", keys: keySpec{1, 1, 1}, run: cmdZAdd, summary: "Add members to a sorted set, or change their scores"},
		{name: "zincrby", arity: 4, fam: famCollection, flags: "write denyoom fast", keys: keySpec{1, 1, 1}, run: cmdZIncrBy, summary: "Add to the score of a member of a sorted set"},
		{name: "zrem", arity: -3, fam: famCollection, flags: "write fast", keys: keySpec{1, 1, 1}, run: cmdZRem, summary: "Remove members of a sorted set"},
		{name: "zremrangebyscore", arity: 4, fam: famCollection, flags: "write", keys: keySpec{1, 1, 1}, run: cmdZRemRangeByScore, summary: "Remove the members of a sorted set in a score range"},
		{name: "zremrangebyrank", arity: 4, fam: famCollection, flags: "write", keys: keySpec{1, 1, 1}, run: cmdZRemRangeByRank, summary: "Remove the members of a sorted set in a rank range"},
		{name: "zpopmin", arity: -2, fam: famCollection, flags: "write fast", keys: keySpec{1, 1, 1}, run: cmdZPopMin, summary: "Remove and return the members of a sorted set with the lowest scores"},
		{name: "zpopmax", arity: -2, fam: famCollection, flags: "write fast", keys: keySpec{1, 1, 1}, run: cmdZPopMax, summary: "Remove and return the members of a sorted set with the highest scores"},
		{name: "zscore", arity: 3, fam: famRead, flags: "readonly fast", keys: keySpec{1, 1, 1}, run: cmdZScore, summary: "The score of a member of a sorted set"},
		{name: "zmscore", arity: -3, fam: famRead, flags: "readonly fast", keys: keySpec{1, 1, 1}, run: cmdZMScore, summary: "The scores of members of a sorted set"},
		{name: "zcard", arity: 2, fam: famRead, flags: "readonly fast", keys: keySpec{1, 1, 1}, run: cmdZCard, summary: "The number of members of a sorted set"},
		{name: "zcount", arity: 4, fam: famRead, flags: "readonly fast", keys: keySpec{1, 1, 1}, run: cmdZCount, summary: "The number of members of a sorted set in a score range"},
		{name: "zrank", arity: 3, fam: famRead, flags: "readonly fast", keys: keySpec{1, 1, 1}, run: cmdZRank, summary: "The rank of a member of a sorted set, lowest score first"},
		{name: "zrevrank", arity: 3, fam: famRead, flags: "readonly fast", keys: keySpec{1, 1, 1}, run: cmdZRevRank, summary: "The rank of a member of a sorted set, highest score first"},
		{name: "zrange", arity: -4, fam: famRead, flags: "readonly", keys: keySpec{1, 1, 1}, run: cmdZRange, summary: "Members of a sorted set in a rank, score or lexicographical range"},
		{name: "zrevrange", arity: -4, fam: famRead, flags: "readonly", keys: keySpec{1, 1, 1}, run: cmdZRevRange, summary: "Members of a sorted set in a rank range, highest score first"},
		{name: "zrangebyscore", arity: -4, fam: famRead, flags: "readonly", keys: keySpec{1, 1, 1}, run: cmdZRangeByScore, summary: "Members of a sorted set in a score range"},
		{name: "zrevrangebyscore", arity: -4, fam: famRead, flags: "readonly", keys: keySpec{1, 1, 1}, run: cmdZRevRangeByScore, summary: "Members of a sorted set in a score range, highest score first"},
		{name: "zrangebylex", arity: -4, fam: famRead, flags: "readonly", keys: keySpec{1, 1, 1}, run: cmdZRangeByLex, summary: "Members of a sorted set in a lexicographical range"},
		{name: "zrevrangebylex", arity: -4, fam: famRead, flags: "readonly", keys: keySpec{1, 1, 1}, run: cmdZRevRangeByLex, summary: "Members of a sorted set in a lexicographical range, in reverse"},
		// scripting.go
		{name: "eval", arity: -3, fam: famScript, flags: "write noscript movablekeys", keys: keySpec{3, 3, 1}, run: cmdEval, stage: stageEval, summary: "Run a Lua script on the leader; its effects are replicated"},
		{name: "evalsha", arity: -3, fam: famScript, flags: "write noscript movablekeys", keys: keySpec{3, 3, 1}, run: cmdEvalSHA, stage: stageEvalSHA, summary: "Run a stored Lua script by its SHA1"},
		{name: "eval_ro", arity: -3, fam: famScript, flags: "readonly noscript movablekeys", keys: keySpec{3, 3, 1}, run: cmdEvalRO, summary: "Run a read-only Lua script"},
		{name: "evalsha_ro", arity: -3, fam: famScript, flags: "readonly noscript movablekeys", keys: keySpec{3, 3, 1}, run: cmdEvalSHARO, summary: "Run a stored read-only Lua script by its SHA1"},
		{name: "script", arity: -2, fam: famScript, flags: "write noscript", run: cmdScript, summary: "SCRIPT LOAD, EXISTS, FLUSH, KILL"},
		// functions.go
		{name: "function", arity: -2, fam: famScript, flags: "write noscript", run: cmdFunction, summary: "FUNCTION LOAD, DELETE, FLUSH, LIST, DUMP, RESTORE, STATS, KILL"},
		{name: "fcall", arity: -3, fam: famScript, flags: "write noscript movablekeys", keys: keySpec{3, 3, 1}, run: cmdFCall, summary: "Run a function of a stored library on the leader; its effects are replicated"},
		{name: "fcall_ro", arity: -3, fam: famScript, flags: "readonly noscript movablekeys", keys: keySpec{3, 3, 1}, run: cmdFCallRO, summary: "Run a read-only function of a stored library"},
		// sets.go
		{name: "sadd", arity: -3, fam: famCollection, flags: "write denyoom fast", keys: keySpec{1, 1, 1}, run: cmdSAdd, summary: "Add members to a set"},
		{name: "srem", arity: -3, fam: famCollection, flags: "write fast", keys: keySpec{1, 1, 1}, run: cmdSRem, summary: "Remove members from a set"},
		{name: "sismember", arity: 3, fam: famRead, flags: "readonly fast", keys: keySpec{1, 1, 1}, run: cmdSIsMember, summary: "Whether a member is in a set"},
		{name: "smismember", arity: -3, fam: famRead, flags: "readonly fast", keys: keySpec{1, 1, 1}, run: cmdSMIsMember, summary: "Whether each member is in a set"},
		{name: "scard", arity: 2, fam: famRead, flags: "readonly fast", keys: keySpec{1, 1, 1}, run: cmdSCard, summary: "The number of members of a set"},
		{name: "smembers", arity: 2, fam: famRead, flags: "readonly", keys: keySpec{1, 1, 1}, run: cmdSMembers, summary: "The members of a set"},
		// lists.go
		{name: "lpush", arity: -3, fam: famCollection, flags: "write denyoom fast", keys: keySpec{1, 1, 1}, run: cmdLPush, summary: "Push elements onto the head of a list"},
		{name: "rpush", arity: -3, fam: famCollection, flags: "write denyoom fast", keys: keySpec{1, 1, 1}, run: cmdRPush, summary: "Push elements onto the tail of a list"},
		{name: "lpushx", arity: -3, fam: famCollection, flags: "write denyoom fast", keys: keySpec{1, 1, 1}, run: cmdLPushX, summary: "Push elements onto the head of an existing list"},
		{name: "rpushx", arity: -3, fam: famCollection, flags: "write denyoom fast", keys: keySpec{1, 1, 1}, run: cmdRPushX, summary: "Push elements onto the tail of an existing list"},
		{name: "lpop", arity: -2, fam: famCollection, flags: "write fast", keys: keySpec{1, 1, 1}, run: cmdLPop, summary: "Pop elements from the head of a list"},
		{name: "rpop", arity: -2, fam: famCollection, flags: "write fast", keys: keySpec{1, 1, 1}, run: cmdRPop, summary: "Pop elements from the tail of a list"},
		{name: "llen", arity: 2, fam: famRead, flags: "readonly fast", keys: keySpec{1, 1, 1}, run: cmdLLen, summary: "The length of a list"},
		{name: "lrange", arity: 4, fam: famRead, flags: "readonly", keys: keySpec{1, 1, 1}, run: cmdLRange, summary: "A range of a list's elements"},
		{name: "lindex", arity: 3, fam: famRead, flags: "readonly", keys: keySpec{1, 1, 1}, run: cmdLIndex, summary: "The element at an index of a list"},
		{name: "lrem", arity: 4, fam: famCollection, flags: "write", keys: keySpec{1, 1, 1}, run: cmdLRem, summary: "Remove elements equal to one from a list"},
		{name: "lset", arity: 4, fam: famCollection, flags: "write denyoom", keys: keySpec{1, 1, 1}, run: cmdLSet, summary: "Set the element at an index of a list"},
		{name: "ltrim", arity: 4, fam: famCollection, flags: "write", keys: keySpec{1, 1, 1}, run: cmdLTrim, summary: "Trim a list to a range"},
		{name: "blpop", arity: -3, fam: famBlocking, flags: "write noscript blocking", keys: keySpec{1, -2, 1}, run: cmdBLPop, summary: "Pop from the head of the first non-empty list, waiting for one"},
		{name: "brpop", arity: -3, fam: famBlocking, flags: "write noscript blocking", keys: keySpec{1, -2, 1}, run: cmdBRPop, summary: "Pop from the tail of the first non-empty list, waiting for one"},
		// transactions.go
		{name: "multi", arity: 1, fam: famTransaction, flags: "noscript loading stale fast allow_busy", run: cmdMulti, summary: "Start a transaction"},
		{name: "exec", arity: 1, fam: famTransaction, flags: "noscript loading stale skip_slowlog", run: cmdExec, summary: "Run the queued commands as one replicated entry"},
		{name: "discard", arity: 1, fam: famTransaction, flags: "noscript loading stale fast allow_busy", run: cmdDiscard, summary: "Drop the queued commands"},
		{name: "watch", arity: -2, fam: famTransaction, flags: "noscript loading stale fast allow_busy", keys: keySpec{1, -1, 1}, run: cmdWatch, summary: "Make the next EXEC fail if one of the keys changes"},
		{name: "unwatch", arity: 1, fam: famTransaction, flags: "noscript loading stale fast allow_busy", run: cmdUnwatch, summary: "Forget every WATCHed key"},
		// pubsub.go
		{name: "subscribe", arity: -2, fam: famPubSub, flags: "pubsub noscript loading stale", run: cmdSubscribe, summary: "Listen for messages published to channels"},
		{name: "unsubscribe", arity: -1, fam: famPubSub, flags: "pubsub noscript loading stale", run: cmdUnsubscribe, summary: "Stop listening to channels"},
		{name: "psubscribe", arity: -2, fam: famPubSub, flags: "pubsub noscript loading stale", run: cmdPSubscribe, summary: "Listen for messages published to channels matching patterns"},
		{name: "punsubscribe", arity: -1, fam: famPubSub, flags: "pubsub noscript loading stale", run: cmdPUnsubscribe, summary: "Stop listening to patterns"},
		{name: "ssubscribe", arity: -2, fam: famPubSub, flags: "pubsub noscript loading stale", run: cmdSSubscribe, summary: "Listen for messages published to shard channels"},
		{name: "sunsubscribe", arity: -1, fam: famPubSub, flags: "pubsub noscript loading stale", run: cmdSUnsubscribe, summary: "Stop listening to shard channels"},
		{name: "publish", arity: 3, fam: famPubSub, flags: "write pubsub loading stale fast", run: cmdPublish, summary: "Publish a message to every node's subscribers (replicated)"},
		{name: "spublish", arity: 3, fam: famPubSub, flags: "write pubsub loading stale fast", run: cmdSPublish, summary: "Publish a message to a shard channel (replicated)"},
		{name: "pubsub", arity: -2, fam: famPubSub, flags: "pubsub loading stale", run: cmdPubSub, summary: "PUBSUB CHANNELS, NUMSUB, NUMPAT, SHARDCHANNELS, SHARDNUMSUB (every node's)"},
		// connection.go
		{name: "ping", arity: -1, fam: famConnection, flags: "fast", run: cmdPing, summary: "Ping the server"},
		{name: "echo", arity: 2, fam: famConnection, flags: "fast", run: cmdEcho, summary: "Echo the argument"},
		{name: "select", arity: 2, fam: famConnection, flags: "fast", run: cmdSelect, summary: "Select the database (0 to 15) the connection's keys are in"},
		{name: "hello", arity: -1, fam: famConnection, flags: "fast no_auth", run: cmdHello, summary: "Handshake: choose RESP2 or RESP3"},
		{name: "auth", arity: -2, fam: famConnection, flags: "fast no_auth", run: cmdAuth, summary: "Authenticate as a user (AUTH [user] password)"},
		{name: "client", arity: -2, fam: famConnection, run: cmdClient, summary: "Connection management: SETNAME, GETNAME, ID, SETINFO, INFO, LIST, KILL, NO-EVICT, NO-TOUCH, TRACKING, CACHING"},
		{name: "quit", arity: -1, fam: famConnection, flags: "fast no_auth", run: cmdQuit, summary: "Close the connection"},
		{name: "reset", arity: 1, fam: famConnection, flags: "fast no_auth", run: cmdReset, summary: "Reset the connection"},
		{name: "readonly", arity: 1, fam: famConnection, flags: "fast", run: cmdReadonly, summary: "Serve this connection's reads from a follower's own table (possibly stale)"},
		{name: "readwrite", arity: 1, fam: famConnection, flags: "fast", run: cmdReadwrite, summary: "Back to linearizable reads through the leader"},
		// introspection.go
		{name: "info", arity: -1, fam: famAdmin, run: cmdInfo, summary: "Server information and statistics"},
		{name: "command", arity: -1, fam: famAdmin, run: cmdCommand, summary: "Details about commands"},
		{name: "config", arity: -2, fam: famAdmin, run: cmdConfig, summary: "Read and set this node's configuration parameters (every one redis-server 7.0 knows), reset INFO's counters"},
		{name: "wait", arity: 3, fam: famAdmin, flags: "noscript", run: cmdWait, summary: "How many replicas hold this connection's writes: a quorum's, at once"},
		{name: "time", arity: 1, fam: famAdmin, flags: "loading stale fast", run: cmdTime, summary: "This node's clock"},
		{name: "role", arity: 1, fam: famAdmin, flags: "noscript loading stale fast", run: cmdRole, summary: "The node's role: master (every node serves every request)"},
		// cluster.go
		{name: "cluster", arity: -2, fam: famAdmin, run: cmdCluster, summary: "Cluster topology for cluster-mode clients: SLOTS, SHARDS, NODES, INFO, MYID"},
		// admin.go
		{name: "debug", arity: -2, fam: famAdmin, flags: "noscript", run: cmdDebug, summary: "DEBUG CLOCK-SHIFT ms (only on a node started with --test-clock)"},
		{name: "acl", arity: -2, fam: famAdmin, run: cmdACL, summary: "Users and their permissions: WHOAMI, LIST, USERS, GETUSER, SETUSER, DELUSER, CAT, LOG, GENPASS, DRYRUN"},
		{name: "raft", arity: -2, fam: famAdmin, run: cmdRaft, summary: "Cluster administration: MEMBERS, MEMBER, ADD, PROMOTE, REMOVE, TRANSFER, SNAPSHOT, STATS, DIGEST, BACKUP"},
	} {
		cmd.flagList = strings.Fields(cmd.flags)
		cmd.write = slices.Contains(cmd.flagList, "write")
		cmd.leader = cmd.write || slices.Contains(cmd.flagList, "readonly")
		cmd.movable = slices.Contains(cmd.flagList, "movablekeys")
		cmd.denyOOM = slices.Contains(cmd.flagList, "denyoom")
		cmd.blocking = slices.Contains(cmd.flagList, "blocking")
		cmd.noAuth = slices.Contains(cmd.flagList, "no_auth")
		cmd.pipelined = cmd.leader && cmd.keys.first > 0 && !cmd.blocking
		commands[cmd.name] = cmd
	}
	buildACLCatalog()
}

// commandNames returns the table's names in order, for COMMAND and tests.
func commandNames() []string {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// maxCommandName is the longest name worth looking up; longer ones are unknown.
const maxCommandName = 32

// unknownCommand is Redis's exact text (processCommand): the name cut at 128 bytes, then the
// arguments, each quoted and followed by a space, while the list is under 128 bytes.
func unknownCommand(args [][]byte) string {
	var list []byte
	for _, a := range args[1:] {
		if len(list) >= 128 {
			break
		}
		list = append(list, '\'')
		list = appendSanitized(list, a, 128-(len(list)-1))
		list = append(list, "' "...)
	}
	b := []byte("ERR unknown command '")
	b = appendSanitized(b, args[0], 128)
	b = append(b, "', with args beginning with: "...)
	return string(append(b, list...))
}

// appendSanitized appends up to n bytes of s with CR and LF replaced by spaces, as Redis does
// for error replies (they cannot contain newlines).
func appendSanitized(b, s []byte, n int) []byte {
	if len(s) > n {
		s = s[:n]
	}
	for _, ch := range s {
		if ch == '\r' || ch == '\n' {
			ch = ' '
		}
		b = append(b, ch)
	}
	return b
}
