package server

// ACL: the users in force on this node, authentication (AUTH, HELLO AUTH), the checks every
// command passes, ACL LOG, and the ACL command.
//
// Where users come from: a node's own configuration seeds them (--requirepass sets the default
// user's password, --aclfile adds users), and the replicated record (ACL SETUSER and DELUSER,
// fsm.KindSetUser/KindDelUser) overrides the seed user by user, a deletion included. So every
// node enforces the same users once one was changed through ACL; until then a user is what the
// node's configuration says, which is why every node should be started with the same
// --requirepass and --aclfile. This needs no proposal at bootstrap and no ordering between a
// node's start and its cluster's log: the rule is the same on a fresh node and on one that
// replays years of log.

import (
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"fmt"
	"maps"
	"net"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// aclLogMax bounds ACL LOG, as Redis's acllog-max-len (default 128).
const aclLogMax = 128

// aclGroupWindow: a denial like one logged less than this ago adds to its count, as in Redis.
const aclGroupWindow = 60 * time.Second

// Bounds of the ACL users (Redis has none): every node keeps every user, parsed, and matches a
// user's key patterns on each of its commands. maxACLUsers bounds the users in force on a node
// (the default user included): ACL SETUSER of a new user past it is refused (a burst of
// concurrent ones may pass it by those in flight). maxACLUserBytes bounds one user's rules in
// canonical form (ACL LIST's line: its passwords' hashes, key and channel patterns and command
// rules), maxACLUserName its name. An --aclfile past them does not load.
const (
	maxACLUsers     = 1024
	maxACLUserBytes = 16 << 10
	maxACLUserName  = 256
)

// errTooManyUsers is ACL SETUSER's refusal of a new user past maxACLUsers.
var errTooManyUsers = fmt.Errorf("too many ACL users (at most %d): delete one with ACL DELUSER first", maxACLUsers)

// checkUserSize refuses a user whose name or canonical rules pass their bounds.
func checkUserSize(u *aclUser) error {
	if len(u.name) > maxACLUserName {
		return fmt.Errorf("ACL user names are at most %d bytes (got %d)", maxACLUserName, len(u.name))
	}
	if n := len(u.describe()); n > maxACLUserBytes {
		return fmt.Errorf("ACL user '%s' is too large: its rules take %d bytes in canonical form (at most %d)", u.name, n, maxACLUserBytes)
	}
	return nil
}

// protectedModeDenied is Redis's reply to a remote client of an instance in protected mode.
const protectedModeDenied = "-DENIED Redis is running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers to Redis you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Setup a an authentication password for the default user. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n"

// users is the ACL state of a Server.
type users struct {
	seed map[string]*aclUser
	cur  atomic.Pointer[map[string]*aclUser]
	// reload serializes reloads: each reads the node's latest users, so the last one wins.
	reload sync.Mutex
	log    struct {
		sync.Mutex
		entries []*aclLogEntry // newest first
	}
}

type aclLogEntry struct {
	count                             int
	reason, context, object, username string
	created, updated                  time.Time
	clientInfo                        string
}

// seedUsers builds the configured users: the default user (with --requirepass's password, or
// none), then the --aclfile's.
func seedUsers(cfg Config) (map[string]*aclUser, error) {
	def := "on nopass ~* &* +@all"
	if cfg.RequirePass != "" {
		def = "on #" + passwordHash([]byte(cfg.RequirePass)) + " ~* &* +@all"
	}
	u, err := parseACLUser("default", strings.Fields(def))
	if err != nil {
		return nil, err
	}
	seed := map[string]*aclUser{"default": u}
	if cfg.ACLFile == "" {
		return seed, nil
	}
	b, err := os.ReadFile(cfg.ACLFile)
	if err != nil {
		return nil, fmt.Errorf("aclfile: %w", err)
	}
	for n, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || strings.HasPrefix(fields[0], "#") {
			continue
		}
		if fields[0] != "user" || len(fields) < 2 {
			return nil, fmt.Errorf("aclfile %s:%d: a line must be: user <name> <rules...>", cfg.ACLFile, n+1)
		}
		u, err := parseACLUser(fields[1], fields[2:])
		if err == nil {
			err = checkUserSize(u)
		}
		if err != nil {
			return nil, fmt.Errorf("aclfile %s:%d: %v", cfg.ACLFile, n+1, err)
		}
		seed[fields[1]] = u
		if len(seed) > maxACLUsers {
			return nil, fmt.Errorf("aclfile %s:%d: too many ACL users (at most %d, the default user included)", cfg.ACLFile, n+1, maxACLUsers)
		}
	}
	return seed, nil
}

// users returns the users in force now.
func (s *Server) users() map[string]*aclUser { return *s.acl.cur.Load() }

// reloadUsers rebuilds the users in force from the seed and the node's replicated users, and
// closes the connections of users that are gone (as Redis does on ACL DELUSER).
func (s *Server) reloadUsers() {
	s.acl.reload.Lock()
	defer s.acl.reload.Unlock()
	eff := maps.Clone(s.acl.seed)
	var users map[string]string
	s.node.ExecLocal(func(v node.View) { users = v.Users() })
	for name, rules := range users {
		if rules == "" {
			if name != "default" {
				delete(eff, name)
			}
			continue
		}
		u, err := parseACLUser(name, strings.Fields(rules))
		if err != nil {
			s.log.Error("replicated ACL user does not parse; keeping the configured one", "user", name, "err", err)
			continue
		}
		eff[name] = u
	}
	s.acl.cur.Store(&eff)
	for _, c := range s.connections() {
		if name := c.user.Load(); name != nil && eff[*name] == nil {
			c.kill()
		}
	}
}

// defaultAuthed reports whether a new connection is authenticated as the default user without
// AUTH: the default user is on and needs no password.
func (s *Server) defaultAuthed() bool {
	u := s.users()["default"]
	return u != nil && u.enabled && u.nopass
}

// AuthRequired reports whether clients must authenticate: the default user needs a password
// (or is off), or other ACL users exist. The operator's HTTP surface asks it on every request
// to /debug/pprof/ (ops.Users), so ACL SETUSER takes effect there at once.
func (s *Server) AuthRequired() bool {
	return !s.defaultAuthed() || len(s.users()) > 1
}

// AdminAuth reports whether user (the default user if empty) and pass open a user, checked as
// AUTH checks them, that may run every @admin command: who may read the node's profiles
// (ops.Users). A refusal is not written to ACL LOG, which records clients of the RESP port.
func (s *Server) AdminAuth(user, pass string) bool {
	if user == "" {
		user = "default"
	}
	u := s.users()[user]
	if u == nil || !u.checkPassword([]byte(pass)) {
		return false
	}
	for _, id := range catalog.cats["admin"] {
		if !u.allowed[id] {
			return false
		}
	}
	return true
}

// protectedRefuses reports whether protected mode turns the client at addr away: it is on, the
// default user needs no password, and the client is not on the loopback interface.
func (s *Server) protectedRefuses(addr net.Addr) bool {
	if !s.cfg.ProtectedMode {
		return false
	}
	if u := s.users()["default"]; u == nil || !u.nopass {
		return false
	}
	tcp, ok := addr.(*net.TCPAddr)
	return ok && !tcp.IP.IsLoopback()
}

// resetAuth makes the connection the default user's, authenticated when that one needs no
// password (a new connection, RESET).
func (c *conn) resetAuth() {
	name := "default"
	c.user.Store(&name)
	c.authed = c.s.defaultAuthed()
}

// After authFreeFailures failed AUTH (or HELLO AUTH) attempts on a connection, each further
// attempt waits before its password is checked: authDelayBase, doubling with each failure, at
// most authDelayMax. Only the connection itself waits (no lock of the server is held; its own
// commands wait behind the AUTH, as behind any command that runs alone); a success starts the
// count over. Redis does not slow AUTH down; a lock server whose passwords guard fencing tokens
// should.
const (
	authFreeFailures = 3
	authDelayMax     = 5 * time.Second
)

var authDelayBase = 100 * time.Millisecond

// authDelay is how long the next AUTH waits after failures failed ones.
func authDelay(failures int) time.Duration {
	if failures < authFreeFailures {
		return 0
	}
	n := failures - authFreeFailures
	if n >= 16 {
		return authDelayMax
	}
	return min(authDelayBase<<n, authDelayMax)
}

// authBackoff waits out the connection's AUTH delay; it reports false when the connection ended
// meanwhile.
func (c *conn) authBackoff() bool {
	d := authDelay(c.authFailures)
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-c.ctx.Done():
		return false
	}
}

// validTLSAuthClientsUser reports whether v is a Config.TLSAuthClientsUser: CN, off or "".
func validTLSAuthClientsUser(v string) bool {
	return v == "" || strings.EqualFold(v, "off") || strings.EqualFold(v, "cn")
}

// certLogin logs a new TLS connection in as the ACL user its client certificate names, with
// Config.TLSAuthClientsUser "CN" (Redis 7.2's tls-auth-clients-user): the Subject CN of the
// certificate the handshake verified, when that user exists and is on. Otherwise the
// connection stays as it was (the default user's, unauthenticated if that one needs a
// password), as in Redis. An unverified certificate (tls-auth-clients no) names no one.
func (c *conn) certLogin(st tls.ConnectionState) {
	if !strings.EqualFold(c.s.cfg.TLSAuthClientsUser, "cn") || len(st.VerifiedChains) == 0 || len(st.VerifiedChains[0]) == 0 {
		return
	}
	name := st.VerifiedChains[0][0].Subject.CommonName
	if u := c.s.users()[name]; name == "" || u == nil || !u.enabled {
		c.s.log.Debug("client certificate names no enabled user", "client", c.id, "cn", name)
		return
	}
	c.user.Store(&name)
	c.authed = true
}

// login authenticates the connection as user with pass, reporting whether it may.
func (c *conn) login(user, pass []byte, object string) bool {
	if !c.authBackoff() {
		return false
	}
	u := c.s.users()[string(user)]
	if u == nil || !u.checkPassword(pass) {
		c.authFailures++
		c.s.metrics.authFailures.Add(1)
		c.logACL("auth", object, string(user), "")
		return false
	}
	c.authFailures = 0
	if name := c.user.Load(); *name != string(user) || !c.authed {
		c.closeUpstream() // it is authenticated as the previous user
	}
	name := string(user)
	c.user.Store(&name)
	c.authed = true
	return true
}

// permit reports whether the connection's user may run cmd with args (client keys); a denial
// is logged in context ("lua", "multi"; "" says toplevel or multi from the connection).
func (c *conn) permit(cmd *command, args [][]byte, context string) (denial, bool) {
	name := c.user.Load()
	u := c.s.users()[*name]
	if u == nil {
		return denial{"command", catalog.names[cmd.aclIDOf(args)]}, false
	}
	d, ok := u.check(cmd, args)
	if !ok {
		c.logACL(d.reason, d.object, *name, context)
	}
	return d, ok
}

// permitted is permit without a log entry for a refusal: whether the connection's user may run
// cmd with args.
func (c *conn) permitted(cmd *command, args [][]byte) bool {
	u := c.s.users()[*c.user.Load()]
	if u == nil {
		return false
	}
	_, ok := u.check(cmd, args)
	return ok
}

// logACL records a refusal in ACL LOG, adding to a like entry of the last minute.
func (c *conn) logACL(reason, object, username, context string) {
	switch {
	case context != "":
	case c.sess.multi != nil:
		context = "multi"
	default:
		context = "toplevel"
	}
	info := c.describe(c.sess.name, c.sess.libName, c.sess.libVer, c.sess.db, c.out.Protocol())
	now := time.Now()
	l := &c.s.acl.log
	l.Lock()
	defer l.Unlock()
	for i, e := range l.entries {
		if e.reason == reason && e.context == context && e.object == object && e.username == username &&
			now.Sub(e.updated) < aclGroupWindow {
			e.count++
			e.updated, e.clientInfo = now, info
			copy(l.entries[1:i+1], l.entries[:i])
			l.entries[0] = e
			return
		}
	}
	e := &aclLogEntry{count: 1, reason: reason, context: context, object: object, username: username,
		created: now, updated: now, clientInfo: info}
	l.entries = append([]*aclLogEntry{e}, l.entries[:min(len(l.entries), aclLogMax-1)]...)
}

// aclCommandCategories are the categories of catalog ID id, in ACL CAT's order.
func aclCommandCategories(id int) []string {
	var out []string
	for _, cat := range aclCategoryNames {
		if slices.Contains(catalog.cats[cat], id) {
			out = append(out, cat)
		}
	}
	return out
}

// ACL WHOAMI|USERS|LIST|GETUSER|SETUSER|DELUSER|CAT|LOG|GENPASS|DRYRUN
func cmdACL(r *request) {
	sub := lower(r.args[1])
	n := len(r.args)
	arity := map[string]func(int) bool{
		"whoami": func(n int) bool { return n == 2 }, "users": func(n int) bool { return n == 2 },
		"list": func(n int) bool { return n == 2 }, "getuser": func(n int) bool { return n == 3 },
		"setuser": func(n int) bool { return n >= 3 }, "deluser": func(n int) bool { return n >= 3 },
		"cat": func(n int) bool { return n <= 3 }, "log": func(n int) bool { return n <= 3 },
		"genpass": func(n int) bool { return n <= 3 }, "dryrun": func(n int) bool { return n >= 4 },
		"load": func(n int) bool { return n == 2 }, "save": func(n int) bool { return n == 2 },
	}
	ok, known := arity[sub]
	switch {
	case !known:
		r.w.Error("ERR unknown subcommand '" + string(appendSanitized(nil, r.args[1], 128)) + "'. Try ACL HELP.")
		return
	case !ok(n):
		r.wrongArgs("acl|" + sub)
		return
	}
	us := r.s.users()
	switch sub {
	case "whoami":
		r.w.BulkString(*r.c.user.Load())
	case "users":
		names := slices.Sorted(maps.Keys(us))
		r.w.Array(len(names))
		for _, name := range names {
			r.w.BulkString(name)
		}
	case "list":
		names := slices.Sorted(maps.Keys(us))
		r.w.Array(len(names))
		for _, name := range names {
			r.w.BulkString("user " + name + " " + us[name].describe())
		}
	case "getuser":
		u := us[string(r.args[2])]
		if u == nil {
			r.w.Null()
			return
		}
		r.w.Map(6)
		r.w.BulkString("flags")
		flags := u.flags()
		r.w.Set(len(flags))
		for _, f := range flags {
			r.w.BulkString(f)
		}
		r.w.BulkString("passwords")
		r.w.Array(len(u.passwords))
		for _, p := range u.passwords {
			r.w.BulkString(p)
		}
		r.w.BulkString("commands")
		r.w.BulkString(u.commandsText())
		r.w.BulkString("keys")
		r.w.BulkString(u.keysText())
		r.w.BulkString("channels")
		r.w.BulkString(u.channelsText())
		r.w.BulkString("selectors")
		r.w.Array(0)
	case "setuser":
		aclSetUser(r)
	case "deluser":
		aclDelUser(r)
	case "cat":
		if n == 2 {
			r.w.Array(len(aclCategoryNames))
			for _, c := range aclCategoryNames {
				r.w.BulkString(c)
			}
			return
		}
		ids, ok := catalog.cats[lower(r.args[2])]
		if !ok {
			r.w.Error("ERR Unknown category '" + string(appendSanitized(nil, r.args[2], 128)) + "'")
			return
		}
		r.w.Array(len(ids))
		for _, id := range ids {
			r.w.BulkString(catalog.names[id])
		}
	case "log":
		aclLog(r)
	case "genpass":
		bits := int64(256)
		if n == 3 {
			v, ok := parseInt(r.args[2])
			if !ok || v <= 0 || v > 4096 {
				r.w.Error("ERR ACL GENPASS argument must be the number of bits for the output password, a positive number up to 4096")
				return
			}
			bits = v
		}
		chars := int((bits + 3) / 4)
		b := make([]byte, (chars+1)/2)
		rand.Read(b)
		r.w.BulkString(hex.EncodeToString(b)[:chars])
	case "dryrun":
		u := us[string(r.args[2])]
		if u == nil {
			r.w.Error("ERR User '" + string(appendSanitized(nil, r.args[2], 128)) + "' not found")
			return
		}
		cmd := lookupCommand(r.args[3])
		if cmd == nil {
			r.w.Error("ERR Command '" + string(appendSanitized(nil, r.args[3], 128)) + "' not found")
			return
		}
		args := r.args[3:]
		if !cmd.arityOK(len(args)) {
			r.w.Error(wrongArity(cmd.name))
			return
		}
		if d, ok := u.check(cmd, args); !ok {
			r.w.BulkString(d.dryRun())
			return
		}
		r.w.SimpleString("OK")
	case "load", "save":
		r.w.Error("ERR ACL " + strings.ToUpper(sub) + " is not supported: users are replicated through the cluster's log; change them with ACL SETUSER and ACL DELUSER")
	}
}

// ACL LOG [count | RESET]
func aclLog(r *request) {
	l := &r.s.acl.log
	count := int64(10)
	if len(r.args) == 3 {
		if is(r.args[2], "reset") {
			l.Lock()
			l.entries = nil
			l.Unlock()
			r.w.SimpleString("OK")
			return
		}
		v, ok := parseInt(r.args[2])
		if !ok || v < 0 {
			r.w.Error("ERR value is out of range, must be positive")
			return
		}
		count = v
	}
	l.Lock()
	entries := make([]aclLogEntry, 0, min(int64(len(l.entries)), count))
	for _, e := range l.entries[:min(int64(len(l.entries)), count)] {
		entries = append(entries, *e)
	}
	l.Unlock()
	now := time.Now()
	r.w.Array(len(entries))
	for _, e := range entries {
		r.w.Map(7)
		r.w.BulkString("count")
		r.w.Int(int64(e.count))
		for _, kv := range [][2]string{{"reason", e.reason}, {"context", e.context}, {"object", e.object}, {"username", e.username}} {
			r.w.BulkString(kv[0])
			r.w.BulkString(kv[1])
		}
		r.w.BulkString("age-seconds")
		r.w.Double(float64(now.Sub(e.created).Milliseconds()) / 1000)
		r.w.BulkString("client-info")
		r.w.BulkString(e.clientInfo)
	}
}

// aclOnLeader sends an ACL change to the leader when this node is not it, as a write is. It
// reports whether the request was routed (and answered).
func aclOnLeader(r *request) bool {
	if r.home.IsLeader() || r.c.awaitLeaderOf(r.home) {
		return false
	}
	r.route(true)
	return true
}

// userRecord is the user name is under v: its replicated record, else its configured one (nil:
// no such user).
func (s *Server) userRecord(v node.View, name string) (*aclUser, error) {
	rules, ok := v.User(name)
	switch {
	case !ok:
		return s.acl.seed[name], nil
	case rules == "":
		return nil, nil
	}
	return parseACLUser(name, strings.Fields(rules))
}

// ACL SETUSER name rule...: the rules apply to the user as the leader's view has it, all or
// none, and the result is replicated in its canonical form.
func aclSetUser(r *request) {
	name := string(r.args[2])
	switch {
	case !validUserName(name):
		r.w.Error("ERR Usernames can't contain spaces or null characters")
		return
	case len(name) > maxACLUserName:
		r.w.Error("ERR " + checkUserSize(&aclUser{name: name}).Error())
		return
	}
	rules := make([]string, len(r.args)-3)
	for i, a := range r.args[3:] {
		rules[i] = string(a)
	}
	if aclOnLeader(r) {
		return
	}
	var refused error
	_, err := r.exec([][]byte{[]byte(name)}, func(v node.View) []fsm.Command {
		refused = nil
		u, err := r.s.userRecord(v, name)
		if err != nil {
			refused = err
			return nil
		}
		if u == nil {
			if len(r.s.users()) >= maxACLUsers {
				refused = errTooManyUsers
				return nil
			}
			u = newACLUser(name)
		}
		u = u.clone()
		if err := u.apply(rules); err != nil {
			refused = err
			return nil
		}
		if err := checkUserSize(u); err != nil {
			refused = err
			return nil
		}
		return []fsm.Command{{Kind: fsm.KindSetUser, Key: []byte(name), Owner: []byte(u.describe())}}
	})
	switch {
	case err != nil:
		r.replyError(err)
	case refused != nil:
		r.w.Error("ERR " + refused.Error())
	default:
		r.w.SimpleString("OK")
	}
}

// ACL DELUSER name...: deletes the users that exist (their connections are closed), replying
// how many.
func aclDelUser(r *request) {
	var names []string
	for _, a := range r.args[2:] {
		if string(a) == "default" {
			r.w.Error("ERR The 'default' user cannot be removed")
			return
		}
		if !slices.Contains(names, string(a)) {
			names = append(names, string(a))
		}
	}
	if aclOnLeader(r) {
		return
	}
	keys := make([][]byte, len(names))
	for i, n := range names {
		keys[i] = []byte(n)
	}
	deleted := 0
	_, err := r.exec(keys, func(v node.View) []fsm.Command {
		deleted = 0
		var cmds []fsm.Command
		for _, name := range names {
			if u, _ := r.s.userRecord(v, name); u != nil {
				deleted++
				cmds = append(cmds, fsm.Command{Kind: delUserKind(r.s, v, name), Key: []byte(name)})
			}
		}
		return cmds
	})
	if err != nil {
		r.replyError(err)
		return
	}
	r.w.Int(int64(deleted))
}

// delUserKind is how DELUSER deletes name: a tombstone (fsm.KindDelUser) when this node's
// configuration defines the user, so that it stays deleted on every node whose --aclfile or
// --requirepass defines it; otherwise the record is forgotten (fsm.KindForgetUser) and its memory
// given back, once every member can decode that.
func delUserKind(s *Server, v node.View, name string) fsm.Kind {
	if _, seeded := s.acl.seed[name]; seeded || v.Format() < fsm.FormatBatch {
		return fsm.KindDelUser
	}
	return fsm.KindForgetUser
}

// spaceFree reports whether s has no character the canonical form would split on.
func spaceFree(s string) bool { return strings.IndexFunc(s, unicode.IsSpace) < 0 }
