package server

// Connection commands: PING, ECHO, SELECT, HELLO, AUTH, CLIENT, QUIT, RESET, READONLY,
// READWRITE.

import (
	"strings"

	"github.com/raftlock/raftlock/fsm"
)

// redisVersion is the Redis version raftlock answers to: the feature level of the commands it
// implements (SET ... GET, PXAT, EXPIRE options, HELLO, CLIENT SETINFO).
const redisVersion = "7.2.0"

// Version is raftlock's release version, without the leading "v" of its git tag (v0.3.0):
// INFO server's raftlock_version and `raftlock version` print it, and docs/upgrades.md's
// table says which log and snapshot formats each version reads. The commits after a release
// carry the number of the release they lead to; the release commit is tagged "v" + Version.
const Version = "0.3.0"

func cmdReadonly(r *request) {
	r.c.sess.readonly = true
	r.w.SimpleString("OK")
}

func cmdReadwrite(r *request) {
	r.c.sess.readonly = false
	r.w.SimpleString("OK")
}

func cmdPing(r *request) {
	if r.c.sess.subs.active() && r.w.Protocol() == 2 {
		// Subscribed mode replies with an array, as Redis does.
		r.w.Array(2)
		r.w.BulkString("pong")
		if len(r.args) == 2 {
			r.w.Bulk(r.args[1])
		} else {
			r.w.BulkString("")
		}
		return
	}
	switch len(r.args) {
	case 1:
		r.w.SimpleString("PONG")
	case 2:
		r.w.Bulk(r.args[1])
	default:
		r.w.Error("ERR wrong number of arguments for 'ping' command")
	}
}

func cmdEcho(r *request) { r.w.Bulk(r.args[1]) }

func cmdSelect(r *request) {
	db, ok := parseInt(r.args[1])
	switch {
	case !ok:
		r.w.Error(errNotInt)
	case db < 0 || db >= fsm.Databases:
		r.w.Error("ERR DB index is out of range")
	default:
		r.c.sess.db = int(db)
		r.c.publishInfo()
		r.w.SimpleString("OK")
	}
}

// errWrongPass is Redis's reply to credentials that open no user.
const errWrongPass = "WRONGPASS invalid username-password pair or user is disabled."

// AUTH [username] password
func cmdAuth(r *request) {
	var user, pass []byte
	switch len(r.args) {
	case 2:
		if u := r.s.users()["default"]; u != nil && u.nopass {
			r.w.Error("ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?")
			return
		}
		user, pass = []byte("default"), r.args[1]
	case 3:
		user, pass = r.args[1], r.args[2]
	default:
		r.w.Error(errSyntax)
		return
	}
	if !r.c.login(user, pass, "auth") {
		r.w.Error(errWrongPass)
		return
	}
	r.w.SimpleString("OK")
}

// HELLO [protover [AUTH username password] [SETNAME clientname]]
func cmdHello(r *request) {
	proto := r.w.Protocol()
	if len(r.args) >= 2 {
		v, ok := parseInt(r.args[1])
		if !ok {
			r.w.Error("ERR Protocol version is not an integer or out of range")
			return
		}
		if v < 2 || v > 3 {
			r.w.Error("NOPROTO unsupported protocol version")
			return
		}
		proto = int(v)
	}
	var name, user, pass []byte
	setName, auth := false, false
	for j := 2; j < len(r.args); j++ {
		more := len(r.args) - j - 1
		switch {
		case is(r.args[j], "auth") && more >= 2:
			user, pass, auth = r.args[j+1], r.args[j+2], true
			j += 2
		case is(r.args[j], "setname") && more >= 1:
			if !validClientName(r.args[j+1]) {
				// Redis checks the name as it parses, before later options.
				r.w.Error("ERR Client names cannot contain spaces, newlines or special characters.")
				return
			}
			if msg := clientNameTooLong("Client name", r.args[j+1]); msg != "" {
				r.w.Error(msg)
				return
			}
			name, setName = r.args[j+1], true
			j++
		default:
			r.w.Error("ERR Syntax error in HELLO option '" + string(r.args[j]) + "'")
			return
		}
	}
	switch {
	case auth && !r.c.login(user, pass, "hello"):
		r.w.Error(errWrongPass)
		return
	case !r.c.authed:
		r.w.Error("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time")
		return
	}
	if setName {
		r.c.sess.name = string(name)
	}
	defer r.c.publishInfo()
	if proto != r.c.out.Protocol() {
		r.c.closeUpstream() // its replies would come in the old protocol
	}
	// HELLO runs alone (it is never pipelined), so r.w is the connection's writer.
	r.c.out.SetProtocol(proto)
	r.w.Map(7)
	r.w.BulkString("server")
	r.w.BulkString("redis")
	r.w.BulkString("version")
	r.w.BulkString(redisVersion)
	r.w.BulkString("proto")
	r.w.Int(int64(proto))
	r.w.BulkString("id")
	r.w.Int(r.c.id)
	r.w.BulkString("mode")
	r.w.BulkString("standalone")
	r.w.BulkString("role")
	r.w.BulkString("master")
	r.w.BulkString("modules")
	r.w.Array(0)
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
func cmdClient(r *request) {
	sub := r.args[1]
	switch {
	case is(sub, "setname") && len(r.args) == 3:
		if !validClientName(r.args[2]) {
			r.w.Error("ERR Client names cannot contain spaces, newlines or special characters.")
			return
		}
		if msg := clientNameTooLong("Client name", r.args[2]); msg != "" {
			r.w.Error(msg)
			return
		}
		r.c.sess.name = string(r.args[2])
		r.c.publishInfo()
		r.w.SimpleString("OK")
	case is(sub, "getname") && len(r.args) == 2:
		if r.c.sess.name == "" {
			r.w.Null()
			return
		}
		r.w.BulkString(r.c.sess.name)
	case is(sub, "id") && len(r.args) == 2:
		r.w.Int(r.c.id)
	case is(sub, "setinfo") && len(r.args) == 4:
		attr, val := r.args[2], r.args[3]
		if !validClientName(val) {
			r.w.Error("ERR " + lower(attr) + " cannot contain spaces, newlines or special characters.")
			return
		}
		if msg := clientNameTooLong(lower(attr), val); msg != "" {
			r.w.Error(msg)
			return
		}
		switch {
		case is(attr, "lib-name"):
			r.c.sess.libName = string(val)
		case is(attr, "lib-ver"):
			r.c.sess.libVer = string(val)
		default:
			r.w.Error("ERR Unrecognized option '" + string(attr) + "'")
			return
		}
		r.c.publishInfo()
		r.w.SimpleString("OK")
	case is(sub, "tracking"):
		clientTracking(r)
	case is(sub, "caching"):
		clientCaching(r)
	case is(sub, "getredir") && len(r.args) == 2:
		r.w.Int(trackingRedirect(r.c.sess.track.mode))
	case is(sub, "trackinginfo") && len(r.args) == 2:
		trackingInfo(r)
	case is(sub, "info") && len(r.args) == 2:
		r.w.Verbatim("txt", r.infoLine()+"\n")
	case is(sub, "list"):
		clientList(r)
	case is(sub, "kill"):
		clientKill(r)
	case (is(sub, "no-evict") || is(sub, "no-touch")) && len(r.args) == 3:
		if !is(r.args[2], "on") && !is(r.args[2], "off") {
			r.w.Error(errSyntax)
			return
		}
		r.w.SimpleString("OK") // raftlock evicts nothing, and keeps no access times
	case is(sub, "setname"), is(sub, "getname"), is(sub, "id"), is(sub, "setinfo"), is(sub, "info"),
		is(sub, "no-evict"), is(sub, "no-touch"):
		r.w.Error("ERR wrong number of arguments for 'client|" + lower(sub) + "' command")
	default:
		r.w.Error("ERR unknown subcommand '" + string(appendSanitized(nil, sub, 128)) + "'. Try CLIENT HELP.")
	}
}

func (r *request) infoLine() string {
	return r.c.describe(r.c.sess.name, r.c.sess.libName, r.c.sess.libVer, r.c.sess.db, r.c.out.Protocol()) +
		" locks=" + itoa(int64(r.c.sess.tokens.len()))
}

// describe is a connection's CLIENT LIST/INFO line (without raftlock's own fields), its
// fields in Redis 7's order: user= (the ACL user, authenticated or not yet) comes after db=
// and the fields raftlock does not keep (cmd=), before resp=.
func (c *conn) describe(name, libName, libVer string, db, proto int) string {
	user := "default"
	if u := c.user.Load(); u != nil {
		user = *u
	}
	return "id=" + itoa(c.id) + " addr=" + c.nc.RemoteAddr().String() + " laddr=" + c.nc.LocalAddr().String() +
		" name=" + name + " db=" + itoa(int64(db)) + " user=" + user + " resp=" + itoa(int64(proto)) +
		" lib-name=" + libName + " lib-ver=" + libVer
}

// publishInfo makes what CLIENT LIST shows of this connection readable by other connections
// (its session is its own, under its baton). Called after each change it shows.
func (c *conn) publishInfo() {
	c.listed.Store(&listedInfo{name: c.sess.name, libName: c.sess.libName, libVer: c.sess.libVer, db: c.sess.db, proto: c.out.Protocol()})
}

// listedInfo is the part of a connection's session other connections may read.
type listedInfo struct {
	name, libName, libVer string
	db, proto             int
}

// CLIENT LIST [ID id ...]: a line per connection of this node.
func clientList(r *request) {
	var ids map[int64]bool
	switch {
	case len(r.args) == 2:
	case len(r.args) >= 4 && is(r.args[2], "id"):
		ids = map[int64]bool{}
		for _, a := range r.args[3:] {
			id, ok := parseInt(a)
			if !ok || id <= 0 {
				r.w.Error("ERR Invalid client ID")
				return
			}
			ids[id] = true
		}
	default:
		r.w.Error(errSyntax)
		return
	}
	var b strings.Builder
	for _, c := range r.s.connections() {
		if ids != nil && !ids[c.id] {
			continue
		}
		if c == r.c {
			b.WriteString(r.infoLine() + "\n")
			continue
		}
		in := c.listed.Load()
		b.WriteString(c.describe(in.name, in.libName, in.libVer, in.db, in.proto) + "\n")
	}
	r.w.Verbatim("txt", b.String())
}

// CLIENT KILL addr:port | CLIENT KILL [ID id] [ADDR addr] [LADDR addr] [SKIPME yes|no]: closes
// the matching connections of this node.
func clientKill(r *request) {
	args := r.args[2:]
	if len(args) == 0 {
		r.wrongArgs("client|kill")
		return
	}
	if len(args) == 1 { // the old form: one address, +OK or an error
		for _, c := range r.s.connections() {
			if c.nc.RemoteAddr().String() == string(args[0]) {
				if c == r.c {
					r.c.quit = true // reply first, then close, as Redis does
				} else {
					c.kill()
				}
				r.w.SimpleString("OK")
				return
			}
		}
		r.w.Error("ERR No such client")
		return
	}
	if len(args) == 0 || len(args)%2 != 0 {
		r.w.Error(errSyntax)
		return
	}
	var (
		id          int64
		addr, laddr string
		skipMe      = true
	)
	for j := 0; j < len(args); j += 2 {
		switch k, v := args[j], args[j+1]; {
		case is(k, "id"):
			n, ok := parseInt(v)
			if !ok || n <= 0 {
				r.w.Error("ERR client-id should be greater than 0")
				return
			}
			id = n
		case is(k, "addr"):
			addr = string(v)
		case is(k, "laddr"):
			laddr = string(v)
		case is(k, "skipme") && (is(v, "yes") || is(v, "no")):
			skipMe = is(v, "yes")
		default:
			r.w.Error(errSyntax)
			return
		}
	}
	n := 0
	for _, c := range r.s.connections() {
		switch {
		case id != 0 && c.id != id, addr != "" && c.nc.RemoteAddr().String() != addr,
			laddr != "" && c.nc.LocalAddr().String() != laddr, skipMe && c == r.c:
			continue
		}
		if c == r.c {
			r.c.quit = true // replies first, then closes, as Redis does with its own connection
		} else {
			c.kill()
		}
		n++
	}
	r.w.Int(int64(n))
}

func cmdQuit(r *request) {
	r.w.SimpleString("OK")
	r.c.quit = true
}

// RESET returns the connection to its state after connect: RESP2, no name, no tracking, no
// subscriptions, no transaction or watches, READWRITE. The locks it holds stay held (they are replicated state), but it forgets their
// tokens.
func cmdReset(r *request) {
	c := r.c
	c.closeUpstream()
	c.s.tracker.forget(c)
	c.s.hub.forget(c, &c.sess.subs)
	c.s.lockWatch.forget(c)
	c.s.watches.forget(c.sess.watches)
	c.writeQueuedPushes() // what was queued before RESET comes before its reply
	c.sess = newSession()
	c.resetAuth()           // as Redis: back to the default user, authenticated if it needs no password
	c.hop.watchLost = false // RESET unwatches: no EXEC is left to fail
	c.out.SetProtocol(2)    // RESET runs alone: r.w is c.out
	r.w.SimpleString("RESET")
}
