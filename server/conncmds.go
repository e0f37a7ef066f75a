package server

import (
	"os"
	"path"
	"runtime"
	"strings"
	"time"
)

// redisVersion is the Redis version raftlock answers to: the feature level of the commands it
// implements (SET ... GET, PXAT, EXPIRE options, HELLO, CLIENT SETINFO).
const redisVersion = "7.2.0"

// Version is raftlock's own version, reported by INFO.
var Version = "0.1.0"

func cmdReadonly(c *conn, args [][]byte) {
	c.readonly = true
	c.w.SimpleString("OK")
}

func cmdReadwrite(c *conn, args [][]byte) {
	c.readonly = false
	c.w.SimpleString("OK")
}

func cmdPing(c *conn, args [][]byte) {
	switch len(args) {
	case 1:
		c.w.SimpleString("PONG")
	case 2:
		c.w.Bulk(args[1])
	default:
		c.w.Error("ERR wrong number of arguments for 'ping' command")
	}
}

func cmdEcho(c *conn, args [][]byte) { c.w.Bulk(args[1]) }

func cmdSelect(c *conn, args [][]byte) {
	db, ok := parseInt(args[1])
	switch {
	case !ok:
		c.w.Error(errNotInt)
	case db != 0:
		c.w.Error("ERR DB index is out of range")
	default:
		c.w.SimpleString("OK")
	}
}

// errWrongPass is Redis's reply to a user other than "default" when no users are configured.
const errWrongPass = "WRONGPASS invalid username-password pair or user is disabled."

// authUser reports whether AUTH/HELLO AUTH names a user that exists: with no users configured,
// Redis accepts any password for "default" (case-sensitive) and refuses everyone else.
func authUser(user []byte) bool { return string(user) == "default" }

func cmdAuth(c *conn, args [][]byte) {
	switch {
	case len(args) > 3:
		c.w.Error(errSyntax)
	case len(args) == 2:
		c.w.Error("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
	case authUser(args[1]):
		c.w.SimpleString("OK")
	default:
		c.w.Error(errWrongPass)
	}
}

// HELLO [protover [AUTH username password] [SETNAME clientname]]
func cmdHello(c *conn, args [][]byte) {
	proto := c.w.Protocol()
	if len(args) >= 2 {
		v, ok := parseInt(args[1])
		if !ok {
			c.w.Error("ERR Protocol version is not an integer or out of range")
			return
		}
		if v < 2 || v > 3 {
			c.w.Error("NOPROTO unsupported protocol version")
			return
		}
		proto = int(v)
	}
	var name, user []byte
	setName, auth := false, false
	for j := 2; j < len(args); j++ {
		more := len(args) - j - 1
		switch {
		case is(args[j], "auth") && more >= 2:
			user, auth = args[j+1], true
			j += 2
		case is(args[j], "setname") && more >= 1:
			if !validClientName(args[j+1]) {
				// Redis checks the name as it parses, before later options.
				c.w.Error("ERR Client names cannot contain spaces, newlines or special characters.")
				return
			}
			name, setName = args[j+1], true
			j++
		default:
			c.w.Error("ERR Syntax error in HELLO option '" + string(args[j]) + "'")
			return
		}
	}
	if auth && !authUser(user) {
		c.w.Error(errWrongPass)
		return
	}
	if setName {
		c.name = string(name)
	}
	if proto != c.w.Protocol() {
		c.closeUpstream() // its replies would come in the old protocol
	}
	c.w.SetProtocol(proto)
	c.w.Map(7)
	c.w.BulkString("server")
	c.w.BulkString("redis")
	c.w.BulkString("version")
	c.w.BulkString(redisVersion)
	c.w.BulkString("proto")
	c.w.Int(int64(proto))
	c.w.BulkString("id")
	c.w.Int(c.id)
	c.w.BulkString("mode")
	c.w.BulkString("standalone")
	c.w.BulkString("role")
	c.w.BulkString("master")
	c.w.BulkString("modules")
	c.w.Array(0)
}

// validClientName is Redis's rule: printable ASCII without spaces.
func validClientName(b []byte) bool {
	for _, ch := range b {
		if ch < '!' || ch > '~' {
			return false
		}
	}
	return true
}

// CLIENT SETNAME|GETNAME|ID|SETINFO|INFO|LIST|TRACKING|CACHING|GETREDIR|TRACKINGINFO
func cmdClient(c *conn, args [][]byte) {
	sub := args[1]
	switch {
	case is(sub, "setname") && len(args) == 3:
		if !validClientName(args[2]) {
			c.w.Error("ERR Client names cannot contain spaces, newlines or special characters.")
			return
		}
		c.name = string(args[2])
		c.w.SimpleString("OK")
	case is(sub, "getname") && len(args) == 2:
		if c.name == "" {
			c.w.Null()
			return
		}
		c.w.BulkString(c.name)
	case is(sub, "id") && len(args) == 2:
		c.w.Int(c.id)
	case is(sub, "setinfo") && len(args) == 4:
		attr, val := args[2], args[3]
		if !validClientName(val) {
			c.w.Error("ERR " + lower(attr) + " cannot contain spaces, newlines or special characters.")
			return
		}
		switch {
		case is(attr, "lib-name"):
			c.libName = string(val)
		case is(attr, "lib-ver"):
			c.libVer = string(val)
		default:
			c.w.Error("ERR Unrecognized option '" + string(attr) + "'")
			return
		}
		c.w.SimpleString("OK")
	case is(sub, "tracking"):
		c.clientTracking(args)
	case is(sub, "caching"):
		c.clientCaching(args)
	case is(sub, "getredir") && len(args) == 2:
		c.w.Int(map[bool]int64{true: 0, false: -1}[c.tracking != trackOff])
	case is(sub, "trackinginfo") && len(args) == 2:
		c.trackingInfo()
	case (is(sub, "info") || is(sub, "list")) && len(args) == 2:
		c.w.Verbatim("txt", c.infoLine()+"\n")
	case is(sub, "setname"), is(sub, "getname"), is(sub, "id"), is(sub, "setinfo"), is(sub, "info"), is(sub, "list"):
		c.w.Error("ERR wrong number of arguments for 'client|" + lower(sub) + "' command")
	default:
		c.w.Error("ERR unknown subcommand '" + string(appendSanitized(nil, sub, 128)) + "'. Try CLIENT HELP.")
	}
}

func (c *conn) infoLine() string {
	return "id=" + itoa(c.id) + " addr=" + c.nc.RemoteAddr().String() + " laddr=" + c.nc.LocalAddr().String() +
		" name=" + c.name + " db=0 resp=" + itoa(int64(c.w.Protocol())) + " lib-name=" + c.libName + " lib-ver=" + c.libVer +
		" locks=" + itoa(int64(len(c.tokens)))
}

func cmdQuit(c *conn, args [][]byte) {
	c.w.SimpleString("OK")
	c.quit = true
}

// RESET returns the connection to its state after connect: RESP2, no name. The locks it holds
// stay held (they are replicated state), but it forgets their tokens.
func cmdReset(c *conn, args [][]byte) {
	c.closeUpstream()
	c.s.tracker.forget(c)
	c.tracking, c.caching = trackOff, 0
	c.readonly = false
	c.w.SetProtocol(2)
	c.name, c.libName, c.libVer = "", "", ""
	clear(c.tokens)
	c.w.SimpleString("RESET")
}

// configParams answers CONFIG GET with what clients and redis-benchmark ask about.
var configParams = [][2]string{
	{"appendonly", "yes"},
	{"appendfsync", "always"},
	{"databases", "1"},
	{"maxclients", ""},
	{"save", ""},
	{"timeout", "0"},
	{"cluster-enabled", "no"},
}

// CONFIG GET pattern [pattern ...]
func cmdConfig(c *conn, args [][]byte) {
	if !is(args[1], "get") {
		c.w.Error("ERR raftlock supports only CONFIG GET; its configuration is set by flags at start")
		return
	}
	if len(args) < 3 {
		c.w.Error("ERR wrong number of arguments for 'config|get' command")
		return
	}
	var out [][2]string
	for _, p := range configParams {
		if p[0] == "maxclients" {
			p[1] = itoa(int64(c.s.cfg.MaxClients))
		}
		for _, pat := range args[2:] {
			if ok, _ := path.Match(lower(pat), p[0]); ok {
				out = append(out, p)
				break
			}
		}
	}
	c.w.Map(len(out))
	for _, p := range out {
		c.w.BulkString(p[0])
		c.w.BulkString(p[1])
	}
}

// COMMAND, COMMAND COUNT, COMMAND INFO name..., COMMAND DOCS [name...], COMMAND LIST
func cmdCommand(c *conn, args [][]byte) {
	if len(args) == 1 {
		names := commandNames()
		c.w.Array(len(names))
		for _, n := range names {
			c.writeCommandInfo(commands[n])
		}
		return
	}
	sub := args[1]
	switch {
	case is(sub, "count") && len(args) == 2:
		c.w.Int(int64(len(commands)))
	case is(sub, "list") && len(args) == 2:
		names := commandNames()
		c.w.Array(len(names))
		for _, n := range names {
			c.w.BulkString(n)
		}
	case is(sub, "info"):
		c.w.Array(len(args) - 2)
		for _, a := range args[2:] {
			if cmd := lookupCommand(a); cmd != nil {
				c.writeCommandInfo(cmd)
			} else {
				c.w.NullArray()
			}
		}
	case is(sub, "docs"):
		var list []*command
		if len(args) == 2 {
			for _, n := range commandNames() {
				list = append(list, commands[n])
			}
		}
		for _, a := range args[2:] {
			if cmd := lookupCommand(a); cmd != nil {
				list = append(list, cmd)
			}
		}
		c.w.Map(len(list))
		for _, cmd := range list {
			c.w.BulkString(cmd.name)
			c.w.Map(4)
			c.w.BulkString("summary")
			c.w.BulkString(cmd.summary)
			c.w.BulkString("since")
			c.w.BulkString("1.0.0")
			c.w.BulkString("group")
			c.w.BulkString("generic")
			c.w.BulkString("complexity")
			c.w.BulkString("O(1)")
		}
	default:
		c.w.Error("ERR unknown subcommand '" + string(appendSanitized(nil, sub, 128)) + "'. Try COMMAND HELP.")
	}
}

// writeCommandInfo writes one COMMAND entry in Redis 7's shape.
func (c *conn) writeCommandInfo(cmd *command) {
	c.w.Array(10)
	c.w.BulkString(cmd.name)
	c.w.Int(int64(cmd.arity))
	c.w.Set(len(cmd.flags))
	for _, f := range cmd.flags {
		c.w.SimpleString(f)
	}
	c.w.Int(int64(cmd.first))
	c.w.Int(int64(cmd.last))
	c.w.Int(int64(cmd.step))
	c.w.Set(0) // ACL categories
	c.w.Set(0) // tips
	c.w.Array(0)
	c.w.Array(0)
}

// INFO [section ...]
func cmdInfo(c *conn, args [][]byte) {
	sections := []string{"server", "clients", "persistence", "stats", "replication", "raft", "locks", "keyspace"}
	if len(args) > 1 {
		want := map[string]bool{}
		for _, a := range args[1:] {
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
	var b strings.Builder
	for i, s := range sections {
		if i > 0 {
			b.WriteString("\r\n")
		}
		b.WriteString("# " + strings.ToUpper(s[:1]) + s[1:] + "\r\n")
		for _, f := range c.infoSection(s) {
			b.WriteString(f.Name + ":" + f.Value + "\r\n")
		}
	}
	c.w.Verbatim("txt", b.String())
}

func (c *conn) infoSection(name string) []InfoField {
	s := c.s
	st := &s.stats
	u := func(v uint64) string { return itoa(int64(v)) }
	switch name {
	case "server":
		up := time.Since(s.start)
		return []InfoField{
			{"redis_version", redisVersion},
			{"raftlock_version", Version},
			{"redis_mode", "standalone"},
			{"os", runtime.GOOS + " " + runtime.GOARCH},
			{"go_version", runtime.Version()},
			{"process_id", itoa(int64(os.Getpid()))},
			{"node_id", s.cfg.NodeID},
			{"tcp_port", portOf(s.cfg.Addr)},
			{"uptime_in_seconds", itoa(int64(up.Seconds()))},
			{"uptime_in_days", itoa(int64(up.Hours() / 24))},
		}
	case "clients":
		return []InfoField{
			{"connected_clients", itoa(int64(s.Clients()))},
			{"maxclients", itoa(int64(s.cfg.MaxClients))},
		}
	case "persistence":
		// ioredis's ready check waits for loading:0.
		return []InfoField{{"loading", "0"}, {"aof_enabled", "1"}}
	case "stats":
		return []InfoField{
			{"total_connections_received", u(st.connsTotal.Load())},
			{"rejected_connections", u(st.connsRejected.Load())},
			{"total_commands_processed", u(st.commands.Load())},
			{"total_error_replies", u(st.errors.Load())},
			{"lock_grants", u(st.grants.Load())},
			{"lock_refusals", u(st.refusals.Load())},
			{"lock_releases", u(st.releases.Load())},
		}
	case "replication":
		return []InfoField{{"role", "master"}, {"connected_slaves", "0"}}
	}
	if s.cfg.Info != nil {
		return s.cfg.Info(name)
	}
	return nil
}

func portOf(addr string) string {
	if i := strings.LastIndexByte(addr, ':'); i >= 0 {
		return addr[i+1:]
	}
	return addr
}

// DEBUG CLOCK-SHIFT ms: move this node's lease clock by ms (negative: back), for fault tests.
// Only a node started with --test-clock accepts it.
func cmdDebug(c *conn, args [][]byte) {
	if c.s.cfg.ShiftClock == nil {
		c.w.Error("ERR DEBUG is disabled: start the node with --test-clock to use DEBUG CLOCK-SHIFT (tests only)")
		return
	}
	if !is(args[1], "clock-shift") || len(args) != 3 {
		c.w.Error("ERR the only DEBUG subcommand is CLOCK-SHIFT ms")
		return
	}
	ms, ok := parseInt(args[2])
	if !ok || ms > 365*24*3600*1000 || ms < -365*24*3600*1000 {
		c.w.Error(errNotInt)
		return
	}
	total := c.s.cfg.ShiftClock(time.Duration(ms) * time.Millisecond)
	c.w.Int(total.Milliseconds())
}
