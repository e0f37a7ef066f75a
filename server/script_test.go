package server

import (
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/script"
)

// The scripts lock libraries send, verbatim.
const (
	// redsync v4 and redislock: delete only if we still own it.
	releaseScript = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`
	// redsync v4: extend only if we still own it.
	extendScript = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`
	// redis-py Lock.extend (additive).
	pyExtendScript = `local token = redis.call('get', KEYS[1])
if not token or token ~= ARGV[1] then return 0 end
local expiration = redis.call('pttl', KEYS[1])
if not expiration then expiration = 0 end
if expiration < 0 then return 0 end
local newttl = ARGV[2]
if ARGV[3] == "0" then newttl = ARGV[2] + expiration end
redis.call('pexpire', KEYS[1], newttl)
return 1`
)

func TestEvalLockScripts(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	steps := []struct {
		args []string
		want string
	}{
		{[]string{"SET", "res", "me", "NX", "PX", "10000"}, "+OK\r\n"},
		{[]string{"EVAL", extendScript, "1", "res", "someone-else", "30000"}, ":0\r\n"},
		{[]string{"EVAL", extendScript, "1", "res", "me", "30000"}, ":1\r\n"},
		{[]string{"EVAL", pyExtendScript, "1", "res", "me", "5000", "0"}, ":1\r\n"},
		{[]string{"EVAL", releaseScript, "1", "res", "someone-else"}, ":0\r\n"},
		{[]string{"GET", "res"}, "$2\r\nme\r\n"},
		{[]string{"EVAL", releaseScript, "1", "res", "me"}, ":1\r\n"},
		{[]string{"EXISTS", "res"}, ":0\r\n"},
		// A script sees its own writes, and they replicate together.
		{[]string{"EVAL", `redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', 5000)
			redis.call('set', KEYS[1], 'second', 'XX', 'KEEPTTL')
			return {redis.call('get', KEYS[1]), redis.call('exists', KEYS[1]), redis.call('dbsize')}`, "1", "s", "first"},
			"*3\r\n$6\r\nsecond\r\n:1\r\n:1\r\n"},
		{[]string{"GET", "s"}, "$6\r\nsecond\r\n"},
		{[]string{"EVAL", `redis.call('del', KEYS[1]); return redis.call('get', KEYS[1])`, "1", "s"}, "$-1\r\n"},
		{[]string{"EXISTS", "s"}, ":0\r\n"},
		// Conversions.
		{[]string{"EVAL", `return {1, 'two', false, {ok='fine'}}`, "0"}, "*4\r\n:1\r\n$3\r\ntwo\r\n$-1\r\n+fine\r\n"},
		{[]string{"EVAL", `return redis.status_reply('FINE')`, "0"}, "+FINE\r\n"},
		{[]string{"EVAL", `return redis.error_reply('MYERR custom')`, "0"}, "-MYERR custom\r\n"},
	}
	for _, s := range steps {
		if got := r.do(s.args...); got != s.want {
			t.Errorf("%.60q: got %q, want %q", s.args, got, s.want)
		}
	}
	// PTTL after the additive extend: 30000 + ~5000.
	r.do("SET", "p", "me", "PX", "10000")
	r.do("EVAL", pyExtendScript, "1", "p", "me", "5000", "0")
	if got := r.do("PTTL", "p"); got < ":14000" || got > ":15000" {
		t.Errorf("PTTL after additive extend = %q, want about 15000", got)
	}
}

func TestEvalSHAAndScriptCommands(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	sha := "e0e1f9fabfc9d4800c877a703b823ac0578ff8db" // sha1("return 1"), as redis-cli SCRIPT LOAD prints
	if got := r.do("EVALSHA", sha, "0"); got != "-NOSCRIPT No matching script. Please use EVAL.\r\n" {
		t.Errorf("EVALSHA unknown = %q", got)
	}
	if got := r.do("SCRIPT", "LOAD", "return 1"); got != "$40\r\n"+sha+"\r\n" {
		t.Fatalf("SCRIPT LOAD = %q", got)
	}
	if got := r.do("EVALSHA", strings.ToUpper(sha), "0"); got != ":1\r\n" {
		t.Errorf("EVALSHA = %q", got)
	}
	if got := r.do("SCRIPT", "EXISTS", sha, "0000000000000000000000000000000000000000"); got != "*2\r\n:1\r\n:0\r\n" {
		t.Errorf("SCRIPT EXISTS = %q", got)
	}
	// EVAL caches what it ran, so EVALSHA of it works afterwards (what redsync relies on).
	r.do("EVAL", "return 2", "0")
	if got := r.do("EVALSHA", "7f923f79fe76194c868d7e1d0820de36700eb649", "0"); got != ":2\r\n" {
		t.Errorf("EVALSHA of a script run by EVAL = %q", got)
	}
	if got := r.do("SCRIPT", "FLUSH"); got != "+OK\r\n" {
		t.Errorf("SCRIPT FLUSH = %q", got)
	}
	if got := r.do("EVALSHA", sha, "0"); !strings.HasPrefix(got, "-NOSCRIPT") {
		t.Errorf("EVALSHA after FLUSH = %q", got)
	}
	if got := r.do("SCRIPT", "KILL"); got != "-NOTBUSY No scripts in execution right now.\r\n" {
		t.Errorf("SCRIPT KILL = %q", got)
	}
	if got := r.do("SCRIPT", "LOAD", "return +"); !strings.HasPrefix(got, "-ERR Error compiling script") {
		t.Errorf("SCRIPT LOAD of bad Lua = %q", got)
	}
}

func TestEvalRefusals(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	for _, s := range []struct {
		args   []string
		prefix string
	}{
		{[]string{"EVAL", "return 1", "x"}, "-ERR value is not an integer or out of range"},
		{[]string{"EVAL", "return 1", "-1"}, "-ERR Number of keys can't be negative"},
		{[]string{"EVAL", "return 1", "2", "a"}, "-ERR Number of keys can't be greater than number of args"},
		{[]string{"EVAL", "return redis.call('lock', KEYS[1], 1000)", "1", "k"}, "-ERR LOCK is not allowed from scripts"},
		{[]string{"EVAL", "return redis.call('client', 'id')", "0"}, "-ERR This Redis command is not allowed from script"},
		{[]string{"EVAL", "return redis.call('nosuch')", "0"}, "-ERR Unknown Redis command called from script"},
		{[]string{"EVAL_RO", "return redis.call('set', KEYS[1], 'v')", "1", "k"}, "-ERR Write commands are not allowed from read-only scripts."},
		{[]string{"EVAL", "return redis.pcall('get')", "0"}, "-ERR Wrong number of args calling Redis command from script"},
	} {
		if got := r.do(s.args...); !strings.HasPrefix(got, s.prefix) {
			t.Errorf("%q: got %q, want prefix %q", s.args, got, s.prefix)
		}
	}
	if got := r.do("EXISTS", "k"); got != ":0\r\n" {
		t.Errorf("refused scripts changed the table: EXISTS k = %q", got)
	}
	// A script that never ends is stopped, and the node keeps serving.
	start := time.Now()
	if got := r.do("EVAL", "while true do end", "0"); !strings.HasPrefix(got, "-") {
		t.Errorf("endless script = %q, want an error", got)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("endless script took %v to stop", d)
	}
	if got := r.do("SET", "after", "v", "NX"); got != "+OK\r\n" {
		t.Errorf("SET after an endless script = %q", got)
	}
}

// The string commands past SET and GET run inside scripts too, on the script's overlay: a
// counter, SETNX, GETDEL and TYPE as lock recipes use them, and TIME (Symfony's semaphore asks
// it inside its script).
func TestEvalStringCommands(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	for _, s := range []struct {
		args []string
		want string
	}{
		{[]string{"EVAL", "redis.call('set', KEYS[1], '5'); redis.call('incrby', KEYS[1], 10); return redis.call('decr', KEYS[1])", "1", "ctr"}, ":14\r\n"},
		{[]string{"GET", "ctr"}, "$2\r\n14\r\n"},
		{[]string{"EVAL", "return {redis.call('setnx', KEYS[1], 'a'), redis.call('setnx', KEYS[1], 'b'), redis.call('type', KEYS[1])['ok']}", "1", "nx"}, "*3\r\n:1\r\n:0\r\n$6\r\nstring\r\n"},
		{[]string{"EVAL", "return {redis.call('getdel', KEYS[1]), redis.call('exists', KEYS[1])}", "1", "nx"}, "*2\r\n$1\r\na\r\n:0\r\n"},
		{[]string{"EVAL", "return #redis.call('time')", "0"}, ":2\r\n"},
		{[]string{"EVAL", "return redis.pcall('incr', KEYS[1])", "1", "nx"}, ":1\r\n"},
		{[]string{"SET", "word", "abc"}, "+OK\r\n"},
		{[]string{"EVAL", "return redis.pcall('incr', KEYS[1])", "1", "word"}, "-ERR value is not an integer or out of range\r\n"},
	} {
		if got := r.do(s.args...); got != s.want {
			t.Errorf("%q = %q, want %q", s.args, got, s.want)
		}
	}
}

// KEYS inside a script sees the script's own changes: a key it created, not one it deleted.
func TestEvalKeysSeesItsOwnChanges(t *testing.T) {
	addr, _ := startFake(t)
	r := dialRaw(t, addr)
	r.do("SET", "a1", "x")
	r.do("SET", "a3", "x")
	r.do("SET", "b1", "x")
	got := r.do("EVAL", "redis.call('set', KEYS[1], 'y'); redis.call('del', KEYS[2]); return redis.call('keys', 'a*')", "2", "a2", "a1")
	if want := "*2\r\n$2\r\na2\r\n$2\r\na3\r\n"; got != want {
		t.Errorf("KEYS a* in the script = %q, want %q", got, want)
	}
}

// The release script runs without the VM (script/native.go) where that gives what the VM gives:
// each case runs it, and the same script with a comment that keeps it on the VM, from the same
// state, and compares the replies (the script's SHA aside), the keys left and the ACL log.
func TestReleaseScriptWithoutVM(t *testing.T) {
	addr, s := startServer(t, nil)
	admin := dialRaw(t, addr)
	admin.do("ACL", "SETUSER", "elsewhere", "on", ">pw", "+@all", "~other:*")
	admin.do("ACL", "SETUSER", "reader", "on", ">pw", "+@all", "%R~k*", "~other:*")
	admin.do("ACL", "SETUSER", "noget", "on", ">pw", "+@all", "-get", "~*")
	admin.do("ACL", "SETUSER", "nodel", "on", ">pw", "+@all", "-del", "~*")
	onVM := releaseScript + " -- on the VM"
	tests := []struct {
		name   string
		setup  []string // run as admin before each of the two
		user   string   // AUTH as this user ("" stays default)
		eval   string   // EVAL or EVAL_RO
		args   []string // numkeys keys... argv...
		native bool     // the Go form answers it
	}{
		{name: "holder", setup: []string{"SET", "k1", "me"}, eval: "EVAL", args: []string{"1", "k1", "me"}, native: true},
		{name: "other holder", setup: []string{"SET", "k2", "you"}, eval: "EVAL", args: []string{"1", "k2", "me"}, native: true},
		{name: "free", eval: "EVAL", args: []string{"1", "k3", "me"}, native: true},
		{name: "a hash", setup: []string{"HSET", "k4", "f", "v"}, eval: "EVAL", args: []string{"1", "k4", "me"}},
		{name: "key not allowed", setup: []string{"SET", "k5", "me"}, user: "elsewhere", eval: "EVAL", args: []string{"1", "k5", "me"}},
		{name: "delete not allowed", setup: []string{"SET", "k6", "me"}, user: "reader", eval: "EVAL", args: []string{"1", "k6", "me"}},
		{name: "get not allowed", setup: []string{"SET", "k9", "me"}, user: "noget", eval: "EVAL", args: []string{"1", "k9", "me"}},
		{name: "del not allowed", setup: []string{"SET", "k10", "me"}, user: "nodel", eval: "EVAL", args: []string{"1", "k10", "me"}},
		{name: "del not allowed, other holder", setup: []string{"SET", "k11", "you"}, user: "nodel", eval: "EVAL", args: []string{"1", "k11", "me"}},
		{name: "read-only script", setup: []string{"SET", "k7", "me"}, eval: "EVAL_RO", args: []string{"1", "k7", "me"}},
		{name: "no value", setup: []string{"SET", "k8", "me"}, eval: "EVAL", args: []string{"1", "k8"}},
		{name: "no key", eval: "EVAL", args: []string{"0", "me"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			run := func(src string) (reply, left, log string) {
				admin.do("FLUSHALL")
				admin.do("ACL", "LOG", "RESET")
				if tt.setup != nil {
					admin.do(tt.setup...)
				}
				c := dialRaw(t, addr)
				if tt.user != "" {
					c.do("AUTH", tt.user, "pw")
				}
				reply = c.do(append([]string{tt.eval, src}, tt.args...)...)
				return reply, admin.do("KEYS", "*"), admin.do("ACL", "LOG")
			}
			vmReply, vmLeft, vmLog := run(onVM)
			before := s.scripts.Stats().Native
			reply, left, log := run(releaseScript)
			if native := s.scripts.Stats().Native - before; native != uint64(b2i(tt.native)) {
				t.Errorf("%d runs without the VM, want %d", native, b2i(tt.native))
			}
			vmSHA, sha := script.SHA1Hex([]byte(onVM)), script.SHA1Hex([]byte(releaseScript))
			if strings.ReplaceAll(vmReply, vmSHA, sha) != reply {
				t.Errorf("reply %q, on the VM %q", reply, vmReply)
			}
			if left != vmLeft {
				t.Errorf("keys left %q, on the VM %q", left, vmLeft)
			}
			if got, want := aclLogGist(log), aclLogGist(vmLog); !slices.Equal(got, want) {
				t.Errorf("ACL LOG %q, on the VM %q", got, want)
			}
			if testing.Verbose() {
				t.Logf("reply %q; ACL LOG %q", reply, aclLogGist(log))
			}
		})
	}
}

// aclLogGist is what ACL LOG's entries say, without their times and client details: each
// entry's count, reason, context and object.
func aclLogGist(log string) []string {
	var gist []string
	for _, m := range aclLogField.FindAllStringSubmatch(log, -1) {
		gist = append(gist, m[1]+"="+m[2]+m[3])
	}
	return gist
}

var aclLogField = regexp.MustCompile(`\$\d+\r\n(count|reason|context|object)\r\n(?::(\d+)|\$\d+\r\n([^\r]*))\r\n`)

// TestEvalRemembersOnlyItsOwnScript: a connection remembers the SHA1 of the last script it ran
// (scriptSHA), which must never answer for another one: scripts alternating on one connection
// each run their own code, and EVALSHA of each finds its own.
func TestEvalRemembersOnlyItsOwnScript(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	scripts := []string{"return 'a'", "return 'b'", "return 'a' ", strings.Repeat("-- long\n", 600) + "return 'long'"}
	for round := range 3 {
		for _, src := range scripts {
			want := r.do("EVAL", src, "0")
			if got := r.do("EVALSHA", script.SHA1Hex([]byte(src)), "0"); got != want || !strings.HasPrefix(got, "$") {
				t.Fatalf("round %d: EVAL %.20q = %q, EVALSHA of its SHA1 = %q", round, src, want, got)
			}
		}
	}
	if got := r.do("EVAL", "return 'a' ", "0"); got != "$1\r\na\r\n" {
		t.Fatalf("EVAL after others = %q", got)
	}
}

// TestScriptCallRepliesPastOneBuffer: a script's redis.call replies go into one buffer until
// maxKeptCalls, then a new one; what the script got from the calls before is intact.
func TestScriptCallRepliesPastOneBuffer(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	big := strings.Repeat("x", 4000) // values are at most 4096 bytes: 40 of them pass maxKeptCalls twice
	if got := r.do("SET", "big", big); got != "+OK\r\n" {
		t.Fatalf("SET = %.40q", got)
	}
	r.do("SET", "small", "s")
	got := r.do("EVAL", `local t = {}
		for i = 1, 40 do t[#t+1] = redis.call('get', 'big'); t[#t+1] = redis.call('get', 'small') end
		local ok = 0
		for i = 1, #t, 2 do if t[i] == ARGV[1] and t[i+1] == 's' then ok = ok + 1 end end
		return ok`, "0", big)
	if got != ":40\r\n" {
		t.Fatalf("replies intact across buffers = %.40q, want :40", got)
	}
}

// TestScriptDBSizeAcrossDatabases: DBSIZE inside a script counts the keys the script itself
// created and deleted, in each database apart, past the two the overlay counts inline.
func TestScriptDBSizeAcrossDatabases(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	r.do("SELECT", "2")
	r.do("SET", "x", "1")
	r.do("SELECT", "0")
	got := r.do("EVAL", `
		for db = 0, 3 do
			redis.call('select', db)
			redis.call('set', 'a', '1'); redis.call('set', 'b', '2')
			if db % 2 == 1 then redis.call('del', 'a') end
		end
		local out = {}
		for db = 0, 3 do redis.call('select', db); out[#out+1] = redis.call('dbsize') end
		return out`, "0")
	if want := "*4\r\n:2\r\n:1\r\n:3\r\n:1\r\n"; got != want {
		t.Fatalf("DBSIZE of databases 0-3 inside the script = %q, want %q", got, want)
	}
	for db, want := range []string{":2\r\n", ":1\r\n", ":3\r\n", ":1\r\n"} {
		r.do("SELECT", itoa(int64(db)))
		if got := r.do("DBSIZE"); got != want {
			t.Errorf("DBSIZE of database %d after the script = %q, want %q", db, got, want)
		}
	}
}
