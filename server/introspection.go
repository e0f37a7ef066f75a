package server

// Introspection: INFO (rendered from the node's typed Stats), COMMAND, TIME, ROLE. CONFIG is
// in config.go.

import (
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/node"
)

// commandHelp is COMMAND HELP's text, Redis 7.0's.
var commandHelp = []string{
	"(no subcommand)",
	"    Return details about all Redis commands.",
	"COUNT",
	"    Return the total number of commands in this Redis server.",
	"LIST",
	"    Return a list of all commands in this Redis server.",
	"INFO [<command-name> ...]",
	"    Return details about multiple Redis commands.",
	"    If no command names are given, documentation details for all",
	"    commands are returned.",
	"DOCS [<command-name> ...]",
	"    Return documentation details about multiple Redis commands.",
	"    If no command names are given, documentation details for all",
	"    commands are returned.",
	"GETKEYS <full-command>",
	"    Return the keys from a full Redis command.",
	"GETKEYSANDFLAGS <full-command>",
	"    Return the keys and the access flags from a full Redis command.",
}

// COMMAND, COMMAND COUNT, COMMAND INFO [name...], COMMAND DOCS [name...], COMMAND LIST,
// COMMAND GETKEYS command [arg...], COMMAND HELP
func cmdCommand(r *request) {
	if len(r.args) == 1 {
		r.writeAllCommandInfo()
		return
	}
	sub := r.args[1]
	switch {
	case (is(sub, "count") || is(sub, "help")) && len(r.args) != 2:
		r.wrongArgs("command|" + lower(sub))
	case is(sub, "count"):
		r.w.Int(int64(len(commands)))
	case is(sub, "help"):
		r.writeHelp("COMMAND", commandHelp)
	case is(sub, "list") && len(r.args) == 5 && is(r.args[2], "filterby"):
		r.w.Error("ERR raftlock does not support COMMAND LIST FILTERBY: use COMMAND LIST")
	case is(sub, "list") && len(r.args) > 2:
		r.w.Error(errSyntax)
	case is(sub, "list"):
		names := commandNames()
		r.w.Array(len(names))
		for _, n := range names {
			r.w.BulkString(n)
		}
	case is(sub, "info") && len(r.args) == 2:
		r.writeAllCommandInfo()
	case is(sub, "info"):
		r.w.Array(len(r.args) - 2)
		for _, a := range r.args[2:] {
			if cmd := lookupCommand(a); cmd != nil {
				r.writeCommandInfo(cmd)
			} else {
				r.w.Null() // Redis's null, "$-1" in RESP2, not a null array
			}
		}
	case is(sub, "getkeys") && len(r.args) < 4:
		r.wrongArgs("command|getkeys")
	case is(sub, "getkeys"):
		r.commandGetKeys(r.args[2:])
	case is(sub, "docs"):
		var list []*command
		if len(r.args) == 2 {
			for _, n := range commandNames() {
				list = append(list, commands[n])
			}
		}
		for _, a := range r.args[2:] {
			if cmd := lookupCommand(a); cmd != nil {
				list = append(list, cmd)
			}
		}
		r.w.Map(len(list))
		for _, cmd := range list {
			r.w.BulkString(cmd.name)
			r.w.Map(4)
			r.w.BulkString("summary")
			r.w.BulkString(cmd.summary)
			r.w.BulkString("since")
			r.w.BulkString("1.0.0")
			r.w.BulkString("group")
			r.w.BulkString("generic")
			r.w.BulkString("complexity")
			r.w.BulkString("O(1)")
		}
	default:
		r.w.Error("ERR unknown subcommand '" + string(appendSanitized(nil, sub, 128)) + "'. Try COMMAND HELP.")
	}
}

// writeAllCommandInfo writes COMMAND's (and COMMAND INFO's without names) list of every command.
func (r *request) writeAllCommandInfo() {
	names := commandNames()
	r.w.Array(len(names))
	for _, n := range names {
		r.writeCommandInfo(commands[n])
	}
}

// commandGetKeys is COMMAND GETKEYS: the keys full (a command and its arguments) names, with
// Redis's errors in Redis's order.
func (r *request) commandGetKeys(full [][]byte) {
	cmd := lookupCommand(full[0])
	switch {
	case cmd == nil:
		r.w.Error("ERR Invalid command specified")
		return
	case cmd.keys.first <= 0 && !cmd.movable:
		r.w.Error("ERR The command has no key arguments")
		return
	case !cmd.arityOK(len(full)):
		r.w.Error("ERR Invalid number of arguments specified for command")
		return
	}
	keys := cmd.keyArgs(full) // a script's bad numkeys: none, as Redis says (no mandatory keys)
	r.w.Array(len(keys))
	for _, k := range keys {
		r.w.Bulk(k)
	}
}

// writeHelp writes a HELP subcommand's reply as Redis's addReplyHelp does: a title line, the
// lines given, and HELP's own, each a status reply.
func (r *request) writeHelp(name string, lines []string) {
	r.w.Array(len(lines) + 3)
	r.w.SimpleString(name + " <subcommand> [<arg> [value] [opt] ...]. Subcommands are:")
	for _, l := range lines {
		r.w.SimpleString(l)
	}
	r.w.SimpleString("HELP")
	r.w.SimpleString("    Prints this help.")
}

// writeCommandInfo writes one COMMAND entry in Redis 7's shape.
func (r *request) writeCommandInfo(cmd *command) {
	r.w.Array(10)
	r.w.BulkString(cmd.name)
	r.w.Int(int64(cmd.arity))
	r.w.Set(len(cmd.flagList))
	for _, f := range cmd.flagList {
		r.w.SimpleString(f)
	}
	r.w.Int(int64(cmd.keys.first))
	r.w.Int(int64(cmd.keys.last))
	r.w.Int(int64(cmd.keys.step))
	cats := aclCommandCategories(cmd.aclID)
	r.w.Set(len(cats))
	for _, c := range cats {
		r.w.SimpleString("@" + c)
	}
	r.w.Set(0) // tips
	r.w.Array(0)
	r.w.Array(0)
}

// INFO [section ...]
//
// Inside a script it leaves out what it would have to ask the node for: the raft, locks and
// keyspace sections and the clients section's lock_waiters. The node answers those under its
// view lock, which the running script holds (Replica.Exec's eval), so asking would deadlock.
func cmdInfo(r *request) {
	sections := []string{"server", "clients", "persistence", "stats", "replication", "cluster", "raft", "locks", "keyspace"}
	inScript := r.path == onScript
	if len(r.args) > 1 {
		want := map[string]bool{}
		for _, a := range r.args[1:] {
			want[lower(a)] = true
		}
		if !want["all"] && !want["everything"] && !want["default"] {
			var picked []string
			for _, s := range sections {
				if want[s] {
					picked = append(picked, s)
				}
			}
			sections = picked
		}
	}
	if inScript {
		sections = slices.DeleteFunc(sections, func(s string) bool { return s == "raft" || s == "locks" || s == "keyspace" })
	}
	var b strings.Builder
	for i, s := range sections {
		if i > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + strings.ToUpper(s[:1]) + s[1:] + "\r\n")
		for _, f := range r.s.infoSection(s, !inScript) {
			b.WriteString(f.name + ":" + f.value + "\r\n")
		}
	}
	r.w.Verbatim("txt", b.String())
}

// infoField is one "name:value" line of INFO.
type infoField struct{ name, value string }

// infoSection returns one section's fields; askNode false leaves out those that ask the node
// (a script's INFO: see cmdInfo).
func (s *Server) infoSection(name string, askNode bool) []infoField {
	st := &s.stats
	u := func(v uint64) string { return itoa(int64(v)) }
	switch name {
	case "server":
		up := time.Since(s.start)
		return []infoField{
			{"redis_version", redisVersion},
			{"raftlock_version", Version},
			{"redis_mode", "standalone"},
			{"os", runtime.GOOS + " " + runtime.GOARCH},
			{"go_version", runtime.Version()},
			{"process_id", itoa(int64(os.Getpid()))},
			{"node_id", s.cfg.NodeID},
			{"tcp_port", portOf(s.cfg.Addr)},
			{"http_insecure", itoa(b2i(s.cfg.InsecureHTTP))},
			{"uptime_in_seconds", itoa(int64(up.Seconds()))},
			{"uptime_in_days", itoa(int64(up.Hours() / 24))},
		}
	case "clients":
		fields := []infoField{
			{"connected_clients", itoa(int64(s.Clients()))},
			{"maxclients", itoa(s.maxClients.Load())},
			{"blocked_clients", itoa(s.waiters.blocked.Load())},
		}
		if askNode {
			fields = append(fields, infoField{"lock_waiters", itoa(int64(s.lockWaiters()))})
		}
		return fields
	case "persistence":
		// ioredis's ready check waits for loading:0.
		return append([]infoField{{"loading", "0"}, {"aof_enabled", "1"}}, s.diskFields()...)
	case "stats":
		c := st.sinceReset()
		return []infoField{
			{"total_connections_received", u(c.conns)},
			{"rejected_connections", u(c.rejected)},
			{"total_commands_processed", u(c.commands)},
			{"total_error_replies", u(c.errors)},
			{"lock_grants", u(c.grants)},
			{"lock_refusals", u(c.refusals)},
			{"lock_releases", u(c.releases)},
		}
	case "cluster":
		// raftlock answers CLUSTER SLOTS, SHARDS, NODES and INFO as a cluster does (cluster.go),
		// so INFO says so too: redis-py's RedisCluster, for one, checks cluster_enabled first.
		return []infoField{{"cluster_enabled", "1"}}
	case "replication":
		return []infoField{{"role", "master"}, {"connected_slaves", "0"}}
	case "raft":
		return append(raftInfo(s.node.Stats()), s.groupsInfo()...)
	case "locks":
		ns := s.tableStats()
		return []infoField{
			{"locks_held", strconv.Itoa(ns.Locks)},
			{"leases_armed", strconv.Itoa(ns.Leases)},
			{"pending_keys", strconv.Itoa(ns.PendingKeys)},
			{"leases_expired", u(ns.Expired)},
			{"ghost_locks_released", u(ns.GhostReleases)},
		}
	case "keyspace":
		ns := s.tableStats()
		var out []infoField
		for db, n := range ns.DBKeys {
			if n > 0 {
				out = append(out, infoField{"db" + strconv.Itoa(db), "keys=" + strconv.Itoa(n) + ",expires=" + strconv.Itoa(ns.DBLeases[db]) + ",avg_ttl=0"})
			}
		}
		return out
	}
	return nil
}

// counts reads the counters INFO stats shows.
func (st *serverStats) counts() statCounts {
	return statCounts{
		conns:    st.connsTotal.Load(),
		rejected: st.connsRejected.Load(),
		commands: st.commands.Load(),
		errors:   st.errors.Load(),
		grants:   st.grants.Load(),
		refusals: st.refusals.Load(),
		releases: st.releases.Load(),
	}
}

// sinceReset is what the counters counted since the last CONFIG RESETSTAT.
func (st *serverStats) sinceReset() statCounts {
	st.base.Lock()
	defer st.base.Unlock()
	c, b := st.counts(), st.base.counts
	return statCounts{
		conns:    c.conns - b.conns,
		rejected: c.rejected - b.rejected,
		commands: c.commands - b.commands,
		errors:   c.errors - b.errors,
		grants:   c.grants - b.grants,
		refusals: c.refusals - b.refusals,
		releases: c.releases - b.releases,
	}
}

// resetStats is CONFIG RESETSTAT: INFO's counters start again from zero.
func (s *Server) resetStats() {
	s.stats.base.Lock()
	defer s.stats.base.Unlock()
	s.stats.base.counts = s.stats.counts()
}

// raftInfo is INFO raft and RAFT STATS: what the node tells its peers (node.PeerState, which
// names and encodes those fields) among its and its store's figures for operators, in the
// order they have always had.
func raftInfo(ns node.Stats) []infoField {
	peer := map[string]string{}
	for _, f := range ns.PeerState().Fields() {
		peer[f.Name] = f.Text()
	}
	p := func(name string) infoField { return infoField{name, peer[name]} }
	u := func(v uint64) string { return strconv.FormatUint(v, 10) }
	return []infoField{
		p(node.FieldRaftID),
		p(node.FieldClusterID),
		p(node.FieldRaftState),
		p(node.FieldRaftReady),
		p(node.FieldRaftLeaderID),
		p(node.FieldRaftLeaderAddr),
		p(node.FieldRaftTerm),
		{"raft_voters", strconv.Itoa(ns.Voters)},
		{"raft_reachable_voters", strconv.Itoa(ns.ReachableVoters)},
		p(node.FieldRaftLastIndex),
		p(node.FieldRaftCommitIndex),
		p(node.FieldRaftAppliedIndex),
		{"raft_last_snapshot_index", u(ns.LastSnapshot)},
		{"raft_proposals", u(ns.Proposals)},
		{"raft_failed_proposals", u(ns.FailedProps)},
		{"raft_aborted_entries", u(ns.Aborted)},
		{"raft_stale_snapshots_refused", u(ns.StaleInstalls)},
		{"raft_verified_reads", u(ns.Reads)},
		{"raft_verify_rounds", u(ns.VerifyRounds)},
		{"raft_member_hints", strconv.Itoa(ns.MemberHints)},
		p(node.FieldRaftLogFormat),
		p(node.FieldRaftLogFormatMax),
		{"raft_insecure", strconv.FormatInt(b2i(ns.RaftInsecure), 10)},
		{"store_first_index", u(ns.Store.FirstIndex)},
		{"store_last_index", u(ns.Store.LastIndex)},
		{"store_snapshots", strconv.Itoa(ns.Store.Snapshots)},
	}
}

// writeFields writes a peer answer's fields (node/peer.go) as a map: a flat array in RESP2.
func (r *request) writeFields(fields []node.Field) {
	r.w.Map(len(fields))
	for _, f := range fields {
		r.w.BulkString(f.Name)
		if f.Integer {
			r.w.Int(f.Int)
		} else {
			r.w.BulkString(f.Str)
		}
	}
}

func portOf(addr string) string {
	if i := strings.LastIndexByte(addr, ':'); i >= 0 {
		return addr[i+1:]
	}
	return addr
}

// TIME -> this node's clock: Unix seconds and the microseconds within them, as bulk strings.
func cmdTime(r *request) {
	now := r.s.cfg.Now()
	r.w.Array(2)
	r.w.BulkString(strconv.FormatInt(now.Unix(), 10))
	r.w.BulkString(strconv.FormatInt(int64(now.Nanosecond()/1000), 10))
}

// ROLE -> master on every node: each serves every request (a follower forwards), so to a
// client each is a master with no replicas of its own (as INFO replication says).
func cmdRole(r *request) {
	r.w.Array(3)
	r.w.BulkString("master")
	r.w.Int(0)
	r.w.Array(0)
}

// WAIT numreplicas timeout -> how many replicas have every write this connection was told
// about. raftlock answers a write only once a majority of the voters stored it, so that many
// besides the leader have it already: WAIT answers at once with that number (a quorum's other
// members), and never waits for more.
func cmdWait(r *request) {
	// Redis reads the timeout first.
	switch t, ok := parseInt(r.args[2]); {
	case !ok:
		r.w.Error("ERR timeout is not an integer or out of range")
		return
	case t < 0:
		r.w.Error("ERR timeout is negative")
		return
	}
	if _, ok := parseInt(r.args[1]); !ok {
		r.w.Error(errNotInt)
		return
	}
	voters := r.s.node.Stats().Voters
	r.w.Int(int64(max(voters/2, 0)))
}
