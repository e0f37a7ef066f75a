package server

import (
	"slices"
	"sort"
)

// command describes one command: its handler and what COMMAND reports about it.
type command struct {
	name    string
	arity   int // Redis's convention: n = exactly n args with the name, -n = at least n
	flags   []string
	first   int // key positions, for COMMAND and cluster-aware clients
	last    int
	step    int
	summary string
	run     func(r *request)

	// write and leader are derived from flags: a command that reads or writes locks must run on
	// the leader; a follower forwards it (or redirects, or serves a READONLY read itself).
	write  bool
	leader bool
	// movable: the keys are KEYS of a script (EVAL script numkeys key ...), not fixed positions.
	movable bool
	// pipelined: the command may run while earlier commands of its connection are in flight
	// (pipeline.go): it touches only the keys it names (a script: the keys it declares).
	pipelined bool
}

// keyArgs returns the keys a command names in args (a script's declared keys for EVAL and
// friends). It shares args' memory; our fixed positions are contiguous (step 1).
func (cmd *command) keyArgs(args [][]byte) [][]byte {
	if cmd.movable {
		if n, ok := parseInt(args[2]); ok && n >= 0 && int(n) <= len(args)-3 {
			return args[3 : 3+n]
		}
		return nil
	}
	if cmd.first <= 0 || cmd.first >= len(args) {
		return nil
	}
	last := cmd.last
	if last < 0 {
		last = len(args) + last
	}
	return args[cmd.first:min(last+1, len(args))]
}

// arityOK applies Redis's arity convention: n = exactly n args with the name, -n = at least n.
func (cmd *command) arityOK(nargs int) bool {
	return cmd.arity > 0 && nargs == cmd.arity || cmd.arity < 0 && nargs >= -cmd.arity
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

// commands is the command table, keyed by lowercase name.
var commands = map[string]*command{}

func init() {
	for _, cmd := range []*command{
		{name: "lock", arity: -3, flags: []string{"write"}, first: 1, last: 1, step: 1, summary: "Acquire a lock with a lease; returns its fencing token or nil", run: cmdLock},
		{name: "unlock", arity: -2, flags: []string{"write"}, first: 1, last: 1, step: 1, summary: "Release a lock held with the given token", run: cmdUnlock},
		{name: "renew", arity: -3, flags: []string{"write"}, first: 1, last: 1, step: 1, summary: "Extend the lease of a lock held with the given token", run: cmdRenew},
		{name: "lockinfo", arity: 2, flags: []string{"readonly"}, first: 1, last: 1, step: 1, summary: "Owner, fencing token and remaining lease of a lock", run: cmdLockInfo},
		{name: "validate", arity: 3, flags: []string{"readonly"}, first: 1, last: 1, step: 1, summary: "Whether a token is the current holder's", run: cmdValidate},
		{name: "set", arity: -3, flags: []string{"write"}, first: 1, last: 1, step: 1, summary: "Set a key (a lock) with NX/XX, an expiry and GET", run: cmdSet},
		{name: "get", arity: 2, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1, summary: "Get the value (owner) of a key", run: cmdGet},
		{name: "getrange", arity: 4, flags: []string{"readonly"}, first: 1, last: 1, step: 1, summary: "Get a substring of a key's value", run: cmdGetRange},
		{name: "del", arity: -2, flags: []string{"write"}, first: 1, last: -1, step: 1, summary: "Delete keys", run: cmdDel},
		{name: "exists", arity: -2, flags: []string{"readonly", "fast"}, first: 1, last: -1, step: 1, summary: "Count existing keys", run: cmdExists},
		{name: "pttl", arity: 2, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1, summary: "Remaining lease in milliseconds", run: cmdPTTL},
		{name: "ttl", arity: 2, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1, summary: "Remaining lease in seconds", run: cmdTTL},
		{name: "pexpire", arity: -3, flags: []string{"write", "fast"}, first: 1, last: 1, step: 1, summary: "Set a key's lease in milliseconds", run: cmdPExpire},
		{name: "expire", arity: -3, flags: []string{"write", "fast"}, first: 1, last: 1, step: 1, summary: "Set a key's lease in seconds", run: cmdExpire},
		{name: "pexpireat", arity: -3, flags: []string{"write", "fast"}, first: 1, last: 1, step: 1, summary: "Set a key's expiry as a Unix time in milliseconds", run: cmdPExpireAt},
		{name: "expireat", arity: -3, flags: []string{"write", "fast"}, first: 1, last: 1, step: 1, summary: "Set a key's expiry as a Unix time in seconds", run: cmdExpireAt},
		{name: "dbsize", arity: 1, flags: []string{"readonly", "fast"}, summary: "Number of held locks", run: cmdDBSize},
		{name: "ping", arity: -1, flags: []string{"fast"}, summary: "Ping the server", run: cmdPing},
		{name: "echo", arity: 2, flags: []string{"fast"}, summary: "Echo the argument", run: cmdEcho},
		{name: "select", arity: 2, flags: []string{"fast"}, summary: "Select database 0 (the only one)", run: cmdSelect},
		{name: "hello", arity: -1, flags: []string{"fast"}, summary: "Handshake: choose RESP2 or RESP3", run: cmdHello},
		{name: "auth", arity: -2, flags: []string{"fast"}, summary: "Authenticate (no users are configured)", run: cmdAuth},
		{name: "client", arity: -2, summary: "Connection management: SETNAME, GETNAME, ID, SETINFO, INFO", run: cmdClient},
		{name: "info", arity: -1, summary: "Server information and statistics", run: cmdInfo},
		{name: "command", arity: -1, summary: "Details about commands", run: cmdCommand},
		{name: "config", arity: -2, summary: "Read configuration parameters (GET only)", run: cmdConfig},
		{name: "quit", arity: -1, flags: []string{"fast"}, summary: "Close the connection", run: cmdQuit},
		{name: "reset", arity: 1, flags: []string{"fast"}, summary: "Reset the connection", run: cmdReset},
		{name: "readonly", arity: 1, flags: []string{"fast"}, summary: "Serve this connection's reads from a follower's own table (possibly stale)", run: cmdReadonly},
		{name: "readwrite", arity: 1, flags: []string{"fast"}, summary: "Back to linearizable reads through the leader", run: cmdReadwrite},
		{name: "eval", arity: -3, flags: []string{"write", "noscript", "movablekeys"}, first: 3, last: 3, step: 1, summary: "Run a Lua script on the leader; its effects are replicated", run: cmdEval},
		{name: "evalsha", arity: -3, flags: []string{"write", "noscript", "movablekeys"}, first: 3, last: 3, step: 1, summary: "Run a stored Lua script by its SHA1", run: cmdEvalSHA},
		{name: "eval_ro", arity: -3, flags: []string{"readonly", "noscript", "movablekeys"}, first: 3, last: 3, step: 1, summary: "Run a read-only Lua script", run: cmdEvalRO},
		{name: "evalsha_ro", arity: -3, flags: []string{"readonly", "noscript", "movablekeys"}, first: 3, last: 3, step: 1, summary: "Run a stored read-only Lua script by its SHA1", run: cmdEvalSHARO},
		{name: "script", arity: -2, flags: []string{"write", "noscript"}, summary: "SCRIPT LOAD, EXISTS, FLUSH, KILL", run: cmdScript},
		{name: "debug", arity: -2, flags: []string{"noscript"}, summary: "DEBUG CLOCK-SHIFT ms (only on a node started with --test-clock)", run: cmdDebug},
		{name: "cluster", arity: -2, summary: "Cluster topology for cluster-mode clients: SLOTS, SHARDS, NODES, INFO, MYID", run: cmdCluster},
		{name: "raft", arity: -2, summary: "Cluster administration: MEMBERS, ADD, PROMOTE, REMOVE, TRANSFER, SNAPSHOT, STATS, DIGEST", run: cmdRaft},
	} {
		cmd.write = slices.Contains(cmd.flags, "write")
		cmd.leader = cmd.write || slices.Contains(cmd.flags, "readonly")
		cmd.movable = slices.Contains(cmd.flags, "movablekeys")
		cmd.pipelined = cmd.leader && cmd.first > 0
		commands[cmd.name] = cmd
	}
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
