package server

import (
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func mustUser(t *testing.T, rules string) *aclUser {
	t.Helper()
	u, err := parseACLUser("u", strings.Fields(rules))
	if err != nil {
		t.Fatalf("parse %q: %v", rules, err)
	}
	return u
}

// The canonical forms redis-server 7.0.15 prints for the same rules (checked by hand with
// ACL SETUSER and ACL LIST).
func TestACLDescribeAsRedis(t *testing.T) {
	for _, tc := range []struct{ rules, want string }{
		{"", "off resetchannels -@all"},
		{"reset", "off sanitize-payload resetchannels -@all"},
		{"on >pw ~locks:* &chan* +@read +get -get +set %R~r*", "on #30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4 ~locks:* %R~r* resetchannels &chan* -@all +@read -get +set"},
		{"on nopass allkeys allchannels +@all -@admin", "on nopass ~* &* +@all -@admin"},
		{"+@read +@read -@read +get +@write -set +set allcommands -get", "off resetchannels +@all -get"},
		{"+@read -@all +get", "off resetchannels -@all +get"},
		{"+@all +get -@admin +@all", "off resetchannels +@all"},
		{"-get", "off resetchannels -@all"},
		{"+@read +@read", "off resetchannels -@all +@read"},
		{"+@all -get +get", "off resetchannels +@all"},
		{"+@read -@read", "off resetchannels -@all"},
		{"+get +get", "off resetchannels -@all +get"},
		{"+client -client|kill +config|get -client", "off resetchannels -@all +config|get"},
		{">a >b >a <b nopass", "off nopass resetchannels -@all"},
		{">a resetpass", "off resetchannels -@all"},
		{"%RW~y %W~x", "off ~y %W~x resetchannels -@all"},
	} {
		if got := mustUser(t, tc.rules).describe(); got != tc.want {
			t.Errorf("rules %q: got %q, want %q", tc.rules, got, tc.want)
		}
	}
}

func TestACLRuleErrors(t *testing.T) {
	for _, tc := range []struct{ rules, want string }{
		{"bogus", "Error in ACL SETUSER modifier 'bogus': Syntax error"},
		{"+bogus", "Error in ACL SETUSER modifier '+bogus': Unknown command or category name in ACL"},
		{"+@bogus", "Error in ACL SETUSER modifier '+@bogus': Unknown command or category name in ACL"},
		{"#abc", "Error in ACL SETUSER modifier '#abc': The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters"},
		{"<nope", "Error in ACL SETUSER modifier '<nope': The password you are trying to remove from the user does not exist"},
		{"allkeys ~c", "Error in ACL SETUSER modifier '~c': " + errACLKeyAfterAll.Error()},
		{"&a allchannels &b", "Error in ACL SETUSER modifier '&b': " + errACLChanAfterAll.Error()},
	} {
		_, err := parseACLUser("u", strings.Fields(tc.rules))
		if err == nil || err.Error() != tc.want {
			t.Errorf("rules %q: got %v, want %q", tc.rules, err, tc.want)
		}
	}
}

func TestACLCheck(t *testing.T) {
	u := mustUser(t, "on >pw ~locks:a:* %R~ro:* &news.* +@read +@write -@admin +publish +subscribe +psubscribe +client|id")
	args := func(s string) [][]byte {
		var out [][]byte
		for _, f := range strings.Fields(s) {
			out = append(out, []byte(f))
		}
		return out
	}
	for _, tc := range []struct {
		line   string
		reason string // "" allowed
	}{
		{"get locks:a:1", ""},
		{"set locks:a:1 v", ""},
		{"lock locks:a:1 1000", ""},
		{"get ro:x", ""},
		{"set ro:x v", "key"},
		{"get other", "key"},
		{"mget locks:a:1 other", "key"},
		{"eval x 1 other", "command"}, // not @read/@write: @scripting
		{"flushall", "command"},
		{"raft members", "command"},
		{"client id", ""},
		{"client kill id 1", "command"},
		{"publish news.x m", ""},
		{"publish sport m", "channel"},
		{"subscribe news.a sport", "channel"},
		{"psubscribe news.*", ""},
		{"psubscribe news.a*", "channel"},
	} {
		a := args(tc.line)
		d, ok := u.check(lookupCommand(a[0]), a)
		if ok != (tc.reason == "") || d.reason != tc.reason {
			t.Errorf("%q: got %v %+v, want reason %q", tc.line, ok, d, tc.reason)
		}
	}
	if !u.checkPassword([]byte("pw")) || u.checkPassword([]byte("px")) {
		t.Error("password check")
	}
	if slices.ContainsFunc(u.passwords, func(p string) bool { return p == "pw" }) {
		t.Error("a password kept in clear")
	}
}

// Every command or subcommand in @admin, RAFT's, DEBUG, FLUSHALL, FLUSHDB, SCRIPT FLUSH, CLIENT
// KILL, CONFIG SET and ACL SETUSER/DELUSER among them, is refused to a user without @admin over
// the wire: the list comes from the table, so a new admin command is covered by itself.
func TestEveryAdminCommandRefusedWithoutAdmin(t *testing.T) {
	addr, _ := startFake(t)
	c := dialRaw(t, addr)
	if got := c.do("ACL", "SETUSER", "ops", "on", ">pw", "allkeys", "allchannels", "+@all", "-@admin"); got != "+OK\r\n" {
		t.Fatalf("SETUSER: %q", got)
	}
	if got := c.do("AUTH", "ops", "pw"); got != "+OK\r\n" {
		t.Fatalf("AUTH: %q", got)
	}
	must := []string{"raft|add", "raft|remove", "raft|announce", "raft|transfer", "raft|snapshot", "debug", "flushall",
		"flushdb", "script|flush", "client|kill", "config|set", "acl|setuser", "acl|deluser"}
	admin := catalog.cats["admin"]
	for _, name := range must {
		if !slices.Contains(admin, catalog.index[name]) {
			t.Errorf("%s is not @admin", name)
		}
	}
	for _, id := range admin {
		name := catalog.names[id]
		args := strings.Split(name, "|")
		cmd := commands[args[0]]
		for len(args) < max(cmd.arity, -cmd.arity) {
			args = append(args, "x")
		}
		want := "-NOPERM this user has no permissions to run the '" + name + "' command\r\n"
		if got := c.do(args...); got != want {
			t.Errorf("%s: got %q, want %q", strings.Join(args, " "), got, want)
		}
	}
}

func TestAuthAndNoAuth(t *testing.T) {
	addr, _ := serveNode(t, newFakeNode(), func(c *Config) { c.RequirePass = "sec" })
	c := dialRaw(t, addr)
	for _, step := range [][2]string{
		{"PING", "-NOAUTH Authentication required.\r\n"},
		{"BOGUS", "-ERR unknown command 'BOGUS', with args beginning with: \r\n"},
		{"HELLO 3", "-NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time\r\n"},
		{"AUTH x", "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
		{"AUTH a b c", "-ERR syntax error\r\n"},
		{"AUTH sec", "+OK\r\n"},
		{"ACL WHOAMI", "$7\r\ndefault\r\n"},
		{"RESET", "+RESET\r\n"},
		{"GET k", "-NOAUTH Authentication required.\r\n"},
		{"AUTH default sec", "+OK\r\n"},
		{"GET k", "$-1\r\n"},
	} {
		if got := c.do(strings.Fields(step[0])...); got != step[1] {
			t.Errorf("%s: got %q, want %q", step[0], got, step[1])
		}
	}
}

func TestScriptAndMultiChecked(t *testing.T) {
	addr, _ := startFake(t)
	admin := dialRaw(t, addr)
	admin.do("ACL", "SETUSER", "u", "on", ">pw", "~k*", "+get", "+set", "+eval", "+multi", "+exec")
	c := dialRaw(t, addr)
	c.do("AUTH", "u", "pw")
	for _, step := range [][]string{
		{"EVAL", "return redis.call('get','x')", "0", "-ERR The user executing the script can't access at least one of the keys mentioned in the command arguments script: db94c2918043c41a85e5c7f5b637c7a9c9c7119c, on @user_script:1.\r\n"},
		{"EVAL", "return redis.call('del','k')", "0", "-ERR The user executing the script can't run this command or subcommand script: b0c3ee9a68227b63e0d7c57ba3a0514894783ea5, on @user_script:1.\r\n"},
		{"EVAL", "return redis.call('set',KEYS[1],'v')", "1", "k1", "+OK\r\n"},
		{"MULTI", "+OK\r\n"},
		{"DEL", "k", "-NOPERM this user has no permissions to run the 'del' command\r\n"},
		{"GET", "x", "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"},
		{"EXEC", "-EXECABORT Transaction discarded because of previous errors.\r\n"},
		{"MULTI", "+OK\r\n"},
		{"GET", "k1", "+QUEUED\r\n"},
		{"SET", "k2", "v", "+QUEUED\r\n"},
	} {
		if got := c.do(step[:len(step)-1]...); got != step[len(step)-1] {
			t.Errorf("%q: got %q, want %q", step[:len(step)-1], got, step[len(step)-1])
		}
	}
	// The rules change between the queueing and EXEC: EXEC checks again.
	admin.do("ACL", "SETUSER", "u", "-set")
	want := "*2\r\n$1\r\nv\r\n-NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. This command is no longer allowed for the following reason: no permission to execute the 'set' command\r\n"
	if got := c.do("EXEC"); got != want {
		t.Errorf("EXEC: got %q, want %q", got, want)
	}
	if got := admin.do("GET", "k2"); got != "$-1\r\n" {
		t.Errorf("GET k2 after the refused SET: %q", got)
	}
	if got := admin.do("ACL", "DELUSER", "u", "nosuch"); got != ":1\r\n" {
		t.Errorf("DELUSER: %q", got)
	}
}

func TestACLFileAndProtectedMode(t *testing.T) {
	file := filepath.Join(t.TempDir(), "users.acl")
	os.WriteFile(file, []byte("# users\nuser alice on >pw ~locks:* +@all\n"), 0o600)
	addr, s := serveNode(t, newFakeNode(), func(c *Config) { c.ACLFile = file; c.ProtectedMode = true })
	c := dialRaw(t, addr)
	if got := c.do("ACL", "LIST"); !strings.Contains(got, "user alice on #30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4 ~locks:* resetchannels +@all") {
		t.Errorf("ACL LIST: %q", got)
	}
	if !s.protectedRefuses(&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1)}) || s.protectedRefuses(&net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}) {
		t.Error("protected mode: wrong clients refused")
	}
	c.do("ACL", "SETUSER", "default", ">now")
	if s.protectedRefuses(&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1)}) {
		t.Error("protected mode refuses remote clients once the default user has a password")
	}
	os.WriteFile(file, []byte("user bob on +bogus\n"), 0o600)
	if _, err := New(Config{ACLFile: file, Logger: quiet}, Deps{Replica: newFakeNode()}); err == nil || !strings.Contains(err.Error(), ":1: Error in ACL SETUSER modifier '+bogus'") {
		t.Errorf("bad aclfile: %v", err)
	}
}

// FuzzACLRules: no rule list panics the parser, and a user it accepts describes itself in a form
// that parses back to the same user (what the log replicates and ACL LIST prints).
func FuzzACLRules(f *testing.F) {
	for _, seed := range []string{
		"on >pw ~locks:* &chan* +@read +get -get +set %R~r*",
		"on nopass allkeys allchannels +@all -@admin",
		"reset +client -client|kill +config|get -client",
		"#30c952fab122c3f9759f02a6d95c3758b246b4fee239957b2d4fee46e26170c4 <pw !abc resetpass",
		"+@string -get +@read -@string %W~x %RW~x",
		"allkeys ~c", "&a allchannels &b", "(~x +get)", "skip-sanitize-payload nocommands +raft|members",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, rules string) {
		u, err := parseACLUser("u", strings.Split(rules, " "))
		if err != nil {
			return
		}
		desc := u.describe()
		v, err := parseACLUser("u", strings.Fields(desc))
		if err != nil {
			t.Fatalf("%q describes as %q, which does not parse: %v", rules, desc, err)
		}
		if got := v.describe(); got != desc {
			t.Fatalf("%q describes as %q, which parses to %q", rules, desc, got)
		}
		if !slices.Equal(u.allowed, v.allowed) || u.enabled != v.enabled || u.nopass != v.nopass {
			t.Fatalf("%q: the parsed description has other permissions", rules)
		}
	})
}

// CLIENT INFO and CLIENT LIST name each connection's ACL user, where Redis 7 does: after db=
// (and cmd=, which raftlock does not keep), before resp=.
func TestClientInfoUser(t *testing.T) {
	addr, _ := startFake(t)
	admin := dialRaw(t, addr)
	admin.do("ACL", "SETUSER", "alice", "on", ">pw", "+@all", "allkeys")
	c := dialRaw(t, addr)
	if got := c.do("CLIENT", "INFO"); !strings.Contains(got, " db=0 user=default resp=2 ") {
		t.Errorf("CLIENT INFO before AUTH = %q, want db=0 user=default resp=2", got)
	}
	c.do("AUTH", "alice", "pw")
	if got := c.do("CLIENT", "INFO"); !strings.Contains(got, " db=0 user=alice resp=2 ") {
		t.Errorf("CLIENT INFO as alice = %q, want db=0 user=alice resp=2", got)
	}
	list := admin.do("CLIENT", "LIST")
	if strings.Count(list, " user=alice ") != 1 || strings.Count(list, " user=default ") != 1 {
		t.Errorf("CLIENT LIST = %q, want one line of user=alice and one of user=default", list)
	}
}

// TestAdminAuth: the operator's HTTP surface asks for credentials once a password or an ACL
// user exists, and takes them only from an enabled user, with AUTH's password check, who may run
// every @admin command.
func TestAdminAuth(t *testing.T) {
	_, open := serveNode(t, newFakeNode(), nil)
	if open.AuthRequired() {
		t.Error("AuthRequired with a nopass default user and no other users: true, want false")
	}
	file := filepath.Join(t.TempDir(), "users.acl")
	os.WriteFile(file, []byte("user ops on >opspw +@all\nuser app on >apppw ~* +@all -@admin\nuser gone off >gonepw +@all\n"), 0o600)
	addr, s := serveNode(t, newFakeNode(), func(c *Config) { c.RequirePass = "sec"; c.ACLFile = file })
	if !s.AuthRequired() {
		t.Error("AuthRequired with requirepass: false, want true")
	}
	for _, tc := range []struct {
		user, pass string
		want       bool
	}{
		{"", "sec", true},
		{"default", "sec", true},
		{"default", "wrong", false},
		{"ops", "opspw", true},
		{"ops", "sec", false},
		{"app", "apppw", false}, // -@admin
		{"gone", "gonepw", false},
		{"nosuch", "sec", false},
	} {
		if got := s.AdminAuth(tc.user, tc.pass); got != tc.want {
			t.Errorf("AdminAuth(%q, %q) = %v, want %v", tc.user, tc.pass, got, tc.want)
		}
	}
	// A replicated ACL SETUSER counts at once.
	c := dialRaw(t, addr)
	c.do("AUTH", "sec")
	c.do("ACL", "SETUSER", "ops", "-config")
	if s.AdminAuth("ops", "opspw") {
		t.Error("AdminAuth(ops) after -config: true, want false")
	}
}
