package server

import (
	"bufio"
	"os"
	"strings"
	"testing"
)

// Every command that names keys has key-spec flags, and those of the commands Redis has are
// redis-server 7.0.15's (testdata/redis-7.0-keyspecs.txt, from its COMMAND INFO): what a key
// pattern must allow is derived from them, so a command added to the table without its flags,
// or with others than Redis's, fails here.
func TestACLKeySpecsAsRedis(t *testing.T) {
	f, err := os.Open("testdata/redis-7.0-keyspecs.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	redisFlags := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") || line == "" {
			continue
		}
		name, flags, _ := strings.Cut(line, ": ")
		if strings.Contains(flags, "not_key") { // shard channels: raftlock checks them as channels
			continue
		}
		redisFlags[name] = flags
	}
	for _, name := range commandNames() {
		cmd := commands[name]
		got, ok := aclKeyFlags[name]
		if hasKeys := cmd.keys.first > 0 || cmd.movable; hasKeys != ok {
			t.Errorf("%s: names keys %v, has key-spec flags %v (%q)", name, hasKeys, ok, got)
		}
		if want, ok := redisFlags[name]; ok && !strings.EqualFold(got, want) {
			t.Errorf("%s: key-spec flags %q, redis-server 7.0.15 has %q", name, got, want)
		}
	}
	for name := range redisFlags {
		if commands[name] == nil {
			t.Errorf("%s: in the Redis list but not in the command table", name)
		}
	}
}

// What each kind of key pattern lets a user do, key argument by key argument, as redis-server
// 7.0.15 decides it (tests/respdiff/acl_keys.txt compares every command's ACL DRYRUN with it).
func TestACLKeyPermissionsPerKeySpec(t *testing.T) {
	writer := mustUser(t, "on nopass %W~secret:* +@all")
	reader := mustUser(t, "on nopass %R~secret:* +@all")
	split := mustUser(t, "on nopass %R~secret:* %W~* +@all") // no one pattern allows both
	both := mustUser(t, "on nopass %R~secret:* %W~secret:* +@all")
	for _, tc := range []struct {
		line                        string
		writer, reader, split, both bool // allowed
	}{
		// The four: a write-only user must not read values through them.
		{"getset secret:1 v", false, false, false, true},
		{"getdel secret:1", false, false, false, true},
		{"set secret:1 v get", false, false, false, true},
		{"set secret:1 v px 100 GET", false, false, false, true},
		{"getex secret:1", false, false, false, true},
		// Read and write: both needed, from one pattern.
		{"incr secret:1", false, false, false, true},
		{"hincrby secret:1 f 1", false, false, false, true},
		{"lpop secret:1", false, false, false, true},
		{"zpopmin secret:1", false, false, false, true},
		{"blpop secret:1 0", false, false, false, true},
		{"eval x 1 secret:1", false, false, false, true},
		// Write only.
		{"set secret:1 v", true, false, true, true},
		{"del secret:1", true, false, true, true},
		{"mset secret:1 v secret:2 v", true, false, true, true},
		{"lock secret:1 1000", true, false, true, true},
		{"unlock secret:1 7", true, false, true, true},
		{"hset secret:1 f v", true, false, true, true},
		// Read only.
		{"get secret:1", false, true, true, true},
		{"lockinfo secret:1", false, true, true, true},
		{"eval_ro x 1 secret:1", false, true, true, true},
		// Neither read nor write: a pattern that matches is enough.
		{"exists secret:1", true, true, true, true},
		{"type secret:1", true, true, true, true},
		{"watch secret:1", true, true, true, true},
		{"exists other", false, false, true, false},
	} {
		args := argsOf(tc.line)
		cmd := lookupCommand(args[0])
		for _, u := range []struct {
			name string
			u    *aclUser
			want bool
		}{{"writer", writer, tc.writer}, {"reader", reader, tc.reader}, {"split", split, tc.split}, {"both", both, tc.both}} {
			d, ok := u.u.check(cmd, args)
			if ok != u.want || !ok && d.reason != "key" {
				t.Errorf("%s: %q: got %v %+v, want allowed %v", u.name, tc.line, ok, d, u.want)
			}
		}
	}
}

// The finding over the wire, on a node without a password (the default user creates
// the user) and on one with --requirepass: a write-only user gets NOPERM for each command that
// would show it a value, and its writes still go through.
func TestWriteOnlyUserCannotReadValues(t *testing.T) {
	for _, secured := range []bool{false, true} {
		name := "default-config"
		if secured {
			name = "requirepass"
		}
		t.Run(name, func(t *testing.T) {
			addr, _ := serveNode(t, newFakeNode(), func(c *Config) {
				if secured {
					c.RequirePass = "adminpw"
				}
			})
			admin := dialRaw(t, addr)
			if secured {
				admin.do("AUTH", "adminpw")
			}
			for _, cmd := range [][]string{
				{"SET", "secret:1", "the-value"},
				{"ACL", "SETUSER", "w", "on", ">wpw", "%W~secret*", "+@all"},
			} {
				if got := admin.do(cmd...); got != "+OK\r\n" {
					t.Fatalf("%q: %q", cmd, got)
				}
			}
			w := dialRaw(t, addr)
			if got := w.do("AUTH", "w", "wpw"); got != "+OK\r\n" {
				t.Fatalf("AUTH w: %q", got)
			}
			const noperm = "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"
			for _, cmd := range [][]string{
				{"GET", "secret:1"},
				{"GETSET", "secret:1", "x"},
				{"GETDEL", "secret:1"},
				{"SET", "secret:1", "x", "GET"},
				{"GETEX", "secret:1", "PERSIST"},
				{"INCR", "secret:1"},
			} {
				if got := w.do(cmd...); got != noperm {
					t.Errorf("%q: got %q, want NOPERM", cmd, got)
				}
			}
			if got := admin.do("GET", "secret:1"); got != "$9\r\nthe-value\r\n" {
				t.Errorf("the value after the refused commands: %q", got)
			}
			if got := w.do("SET", "secret:1", "new"); got != "+OK\r\n" {
				t.Errorf("a write-only user's SET: %q", got)
			}
			if got := w.do("EXISTS", "secret:1"); got != ":1\r\n" {
				t.Errorf("a write-only user's EXISTS: %q", got)
			}
		})
	}
}

func argsOf(line string) [][]byte {
	var out [][]byte
	for _, f := range strings.Fields(line) {
		out = append(out, []byte(f))
	}
	return out
}
