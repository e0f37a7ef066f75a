package server

import (
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
)

const testLibrary = "#!lua name=locks\n" +
	"redis.register_function('acquire', function(keys, args) return redis.call('set', keys[1], args[1], 'NX', 'PX', args[2]) end)\n" +
	"redis.register_function{function_name='owner', callback=function(keys) return redis.call('get', keys[1]) end, flags={'no-writes'}, description='who holds it'}\n" +
	"redis.register_function('sneaky', function(keys) return redis.call('del', keys[1]) end)\n"

// FUNCTION LOAD, FCALL, FCALL_RO, LIST, DELETE and FLUSH on a node, replies byte for byte.
func TestFunctionLoadCallListDelete(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	for _, s := range []struct {
		args []string
		want string
	}{
		{[]string{"FUNCTION", "LOAD", testLibrary}, "$5\r\nlocks\r\n"},
		{[]string{"FUNCTION", "LOAD", testLibrary}, "-ERR Library 'locks' already exists\r\n"},
		{[]string{"FUNCTION", "LOAD", "REPLACE", testLibrary}, "$5\r\nlocks\r\n"},
		{[]string{"FUNCTION", "LOAD", "#!lua name=other\nredis.register_function('OWNER', function() end)"}, "-ERR Function OWNER already exists\r\n"},
		{[]string{"FCALL", "acquire", "1", "res", "me", "10000"}, "+OK\r\n"},
		{[]string{"FCALL", "acquire", "1", "res", "you", "10000"}, "$-1\r\n"},
		{[]string{"FCALL_RO", "owner", "1", "res"}, "$2\r\nme\r\n"},
		{[]string{"FCALL", "OWNER", "1", "res"}, "$2\r\nme\r\n"},
		{[]string{"FCALL_RO", "acquire", "1", "res", "me", "1"}, "-ERR Can not execute a script with write flag using *_ro command.\r\n"},
		{[]string{"FCALL", "nope", "0"}, "-ERR Function not found\r\n"},
		{[]string{"FUNCTION", "LOAD", "#!lua name=mixed\nredis.register_function('MixedCase', function() return 7 end)"}, "$5\r\nmixed\r\n"},
		{[]string{"FCALL", "MixedCase", "0"}, ":7\r\n"},
		{[]string{"FCALL", "mixedcase", "0"}, ":7\r\n"},
		{[]string{"FUNCTION", "DELETE", "mixed"}, "+OK\r\n"},
		{[]string{"FCALL", "acquire", "x"}, "-ERR Bad number of keys provided\r\n"},
		{[]string{"FCALL", "nope", "x"}, "-ERR Function not found\r\n"},
		{[]string{"FUNCTION", "LIST", "LIBRARYNAME", "LOC*"}, "*1\r\n*6\r\n$12\r\nlibrary_name\r\n$5\r\nlocks\r\n$6\r\nengine\r\n$3\r\nLUA\r\n$9\r\nfunctions\r\n*3\r\n" +
			"*6\r\n$4\r\nname\r\n$7\r\nacquire\r\n$11\r\ndescription\r\n$-1\r\n$5\r\nflags\r\n*0\r\n" +
			"*6\r\n$4\r\nname\r\n$5\r\nowner\r\n$11\r\ndescription\r\n$12\r\nwho holds it\r\n$5\r\nflags\r\n*1\r\n+no-writes\r\n" +
			"*6\r\n$4\r\nname\r\n$6\r\nsneaky\r\n$11\r\ndescription\r\n$-1\r\n$5\r\nflags\r\n*0\r\n"},
		{[]string{"FUNCTION", "LIST", "LIBRARYNAME", "x*"}, "*0\r\n"},
		{[]string{"FUNCTION", "STATS"}, "*4\r\n$14\r\nrunning_script\r\n$-1\r\n$7\r\nengines\r\n*2\r\n$3\r\nLUA\r\n*4\r\n$15\r\nlibraries_count\r\n:1\r\n$15\r\nfunctions_count\r\n:3\r\n"},
		{[]string{"FUNCTION", "DELETE", "locks"}, "+OK\r\n"},
		{[]string{"FUNCTION", "DELETE", "locks"}, "-ERR Library not found\r\n"},
		{[]string{"FCALL", "owner", "1", "res"}, "-ERR Function not found\r\n"},
		{[]string{"FUNCTION", "LOAD", testLibrary}, "$5\r\nlocks\r\n"},
		{[]string{"FUNCTION", "FLUSH", "ASYNC"}, "+OK\r\n"},
		{[]string{"FUNCTION", "LIST"}, "*0\r\n"},
		{[]string{"GET", "res"}, "$2\r\nme\r\n"},
	} {
		if got := r.do(s.args...); got != s.want {
			t.Errorf("%q = %q, want %q", s.args, got, s.want)
		}
	}
}

// A function with no-writes runs read-only under FCALL too: its write is refused, with the
// function's name and line, and changes nothing.
func TestFunctionNoWrites(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	lib := "#!lua name=ro\nredis.register_function{function_name='nw', callback=function(keys) return redis.call('set', keys[1], 'x') end, flags={'no-writes'}}"
	if got := r.do("FUNCTION", "LOAD", lib); got != "$2\r\nro\r\n" {
		t.Fatalf("FUNCTION LOAD = %q", got)
	}
	for _, cmd := range []string{"FCALL", "FCALL_RO"} {
		if got := r.do(cmd, "nw", "1", "k"); got != "-ERR Write commands are not allowed from read-only scripts. script: nw, on @user_function:2.\r\n" {
			t.Errorf("%s nw = %q", cmd, got)
		}
	}
	if got := r.do("EXISTS", "k"); got != ":0\r\n" {
		t.Errorf("EXISTS k = %q", got)
	}
}

// FUNCTION DUMP's payload restores with each policy, and RESTORE refuses a damaged one and a
// collision as Redis does.
func TestFunctionDumpRestore(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	other := "#!lua name=other\nredis.register_function('other', function() return 2 end)"
	r.do("FUNCTION", "LOAD", testLibrary)
	r.do("FUNCTION", "LOAD", other)
	dump := r.do("FUNCTION", "DUMP")
	payload, ok := bulkOf(dump)
	if !ok || !strings.HasPrefix(payload, dumpMagic) {
		t.Fatalf("FUNCTION DUMP = %q", dump)
	}
	for _, s := range []struct {
		args []string
		want string
	}{
		{[]string{"FUNCTION", "RESTORE", payload}, "-ERR Library locks already exists\r\n"},
		{[]string{"FUNCTION", "RESTORE", payload, "APPEND"}, "-ERR Library locks already exists\r\n"},
		{[]string{"FUNCTION", "RESTORE", payload, "REPLACE"}, "+OK\r\n"},
		{[]string{"FUNCTION", "FLUSH"}, "+OK\r\n"},
		{[]string{"FUNCTION", "LOAD", "#!lua name=clash\nredis.register_function('other', function() return 3 end)"}, "$5\r\nclash\r\n"},
		{[]string{"FUNCTION", "RESTORE", payload}, "-ERR Function other already exists\r\n"},
		{[]string{"FUNCTION", "RESTORE", payload, "FLUSH"}, "+OK\r\n"},
		{[]string{"FCALL", "other", "0"}, ":2\r\n"},
		{[]string{"FUNCTION", "STATS"}, "*4\r\n$14\r\nrunning_script\r\n$-1\r\n$7\r\nengines\r\n*2\r\n$3\r\nLUA\r\n*4\r\n$15\r\nlibraries_count\r\n:2\r\n$15\r\nfunctions_count\r\n:4\r\n"},
		{[]string{"FUNCTION", "RESTORE", payload[:len(payload)-1] + "x"}, "-ERR DUMP payload version or checksum are wrong\r\n"},
		{[]string{"FUNCTION", "RESTORE", "RLFN"}, "-ERR DUMP payload version or checksum are wrong\r\n"},
		{[]string{"FUNCTION", "RESTORE", payload, "MERGE"}, "-ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.\r\n"},
	} {
		if got := r.do(s.args...); got != s.want {
			t.Errorf("%q = %q, want %q", s.args[:2], got, s.want)
		}
	}
	if got := r.do("FUNCTION", "DUMP"); got != dump {
		t.Errorf("the restored libraries dump as %q, want %q", got, dump)
	}
}

// bulkOf returns the string of a bulk reply.
func bulkOf(reply string) (string, bool) {
	head, rest, ok := strings.Cut(reply, "\r\n")
	if !ok || !strings.HasPrefix(head, "$") || !strings.HasSuffix(rest, "\r\n") {
		return "", false
	}
	return strings.TrimSuffix(rest, "\r\n"), true
}

// The libraries are bounded: their number, the bytes of their sources and their functions, a
// library's source as a script's; past a bound, FUNCTION LOAD and RESTORE are refused and
// nothing is stored.
func TestFunctionBounds(t *testing.T) {
	addr, _ := startServer(t, func(c *Config) {
		c.Scripts = DefaultScriptLimits()
		c.Scripts.Libraries, c.Scripts.Functions, c.Scripts.LibraryBytes = 2, 3, 4000
	})
	r := dialRaw(t, addr)
	lib := func(name string, funcs ...string) string {
		src := "#!lua name=" + name + "\n"
		for _, f := range funcs {
			src += "redis.register_function('" + f + "', function() return 1 end)\n"
		}
		return src
	}
	const full = "-ERR the function libraries are full (at most 2 libraries, 4000 bytes of source and 3 functions): delete libraries with FUNCTION DELETE or FUNCTION FLUSH\r\n"
	for _, s := range []struct {
		args []string
		want string
	}{
		{[]string{"FUNCTION", "LOAD", lib("a", "a1", "a2")}, "$1\r\na\r\n"},
		{[]string{"FUNCTION", "LOAD", lib("b", "b1", "b2")}, full}, // 4 functions
		{[]string{"FUNCTION", "LOAD", lib("b", "b1")}, "$1\r\nb\r\n"},
		{[]string{"FUNCTION", "LOAD", lib("c", "c1")}, full}, // 3 libraries
		{[]string{"FUNCTION", "LOAD", "REPLACE", lib("b", "b1") + "--" + strings.Repeat("x", 4000)}, full},
		{[]string{"FUNCTION", "LOAD", "REPLACE", lib("b", "b2")}, "$1\r\nb\r\n"}, // replacing frees b1
		{[]string{"FUNCTION", "LOAD", lib("c", "c1") + "--" + strings.Repeat("x", maxScriptBytes)}, "-ERR library too large: raftlock libraries are at most 262144 bytes\r\n"},
		{[]string{"FUNCTION", "DELETE", "a"}, "+OK\r\n"},
		{[]string{"FUNCTION", "LOAD", lib("c", "c1", "c2")}, "$1\r\nc\r\n"},
	} {
		if got := r.do(s.args...); got != s.want {
			t.Errorf("%q = %q, want %q", s.args[:2], got, s.want)
		}
	}
	if got := r.do("FUNCTION", "STATS"); !strings.HasSuffix(got, ":2\r\n$15\r\nfunctions_count\r\n:3\r\n") {
		t.Errorf("FUNCTION STATS = %q", got)
	}
	// A payload past the bounds on its own is refused before any of its code runs (each of these
	// libraries would spend its whole load time limit).
	var spin [][]byte
	for _, name := range []string{"x", "y", "z"} {
		spin = append(spin, []byte("#!lua name="+name+"\nwhile true do end\n"))
	}
	if got := r.do("FUNCTION", "RESTORE", string(appendDump(nil, spin)), "FLUSH"); got != full {
		t.Errorf("FUNCTION RESTORE of 3 libraries with room for 2 = %q, want %q", got, full)
	}
}

// A function that never ends is stopped by the script time limit; meanwhile the node serves
// other clients (the function runs without holding the view, as a script does). FUNCTION STATS
// shows it running, and FUNCTION KILL stops one.
func TestFunctionTimeLimitAndKill(t *testing.T) {
	addr, s := startServer(t, func(c *Config) { c.ScriptTimeout = 300 * time.Millisecond })
	a, b := dialRaw(t, addr), dialRaw(t, addr)
	lib := "#!lua name=loop\nredis.register_function('spin', function(keys) redis.call('set', keys[1], 'x') while true do end end)"
	if got := b.do("FUNCTION", "LOAD", lib); got != "$4\r\nloop\r\n" {
		t.Fatalf("FUNCTION LOAD = %q", got)
	}
	a.sendOnly("FCALL", "spin", "1", "k")
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("the function running", func() bool { return s.scripts.Running() == 1 }))
	if got := b.do("SET", "other", "v"); got != "+OK\r\n" {
		t.Errorf("SET while a function loops = %q", got)
	}
	if got := a.reply(); !strings.HasPrefix(got, "-ERR Script killed: it ran longer than the script time limit") {
		t.Errorf("the endless function replied %q", got)
	}
	// As a script's: what it wrote before the error stays (scripts are not rolled back).
	if got := b.do("EXISTS", "k"); got != ":1\r\n" {
		t.Errorf("the stopped function's write: EXISTS k = %q", got)
	}

	addr, s = startServer(t, func(c *Config) { c.ScriptTimeout = time.Minute })
	a, b = dialRaw(t, addr), dialRaw(t, addr)
	b.do("FUNCTION", "LOAD", lib)
	a.sendOnly("FCALL", "spin", "1", "k")
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("the function running", func() bool { return s.scripts.Running() == 1 }))
	if got := b.do("FUNCTION", "STATS"); !strings.HasPrefix(got, "*4\r\n$14\r\nrunning_script\r\n*6\r\n$4\r\nname\r\n$4\r\nspin\r\n$7\r\ncommand\r\n*4\r\n$5\r\nFCALL\r\n$4\r\nspin\r\n") {
		t.Errorf("FUNCTION STATS while it runs = %q", got)
	}
	if got := b.do("FUNCTION", "KILL"); got != "+OK\r\n" {
		t.Errorf("FUNCTION KILL = %q", got)
	}
	if got := a.reply(); !strings.HasPrefix(got, "-ERR Script killed by user with SCRIPT KILL...") {
		t.Errorf("the killed function replied %q", got)
	}
	if got := b.do("FUNCTION", "KILL"); got != "-NOTBUSY No scripts in execution right now.\r\n" {
		t.Errorf("FUNCTION KILL with nothing running = %q", got)
	}
	// A killed one has no effects: they replicate only once it ends.
	if got := b.do("EXISTS", "k"); got != ":0\r\n" {
		t.Errorf("the killed function's write applied: EXISTS k = %q", got)
	}
}

// A library's code that loops is stopped at load, within Redis's 500 ms, and not stored.
func TestFunctionLoadTimeout(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	if got := r.do("FUNCTION", "LOAD", "#!lua name=slow\nwhile true do end"); got != "-ERR Error registering functions: ERR FUNCTION LOAD timeout\r\n" {
		t.Errorf("FUNCTION LOAD of a loop = %q", got)
	}
	if got := r.do("FUNCTION", "LIST"); got != "*0\r\n" {
		t.Errorf("FUNCTION LIST = %q", got)
	}
}

// FCALL inside MULTI/EXEC runs with the transaction, and FCALL from a script is refused.
func TestFunctionInTransactionAndScript(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	r.do("FUNCTION", "LOAD", testLibrary)
	r.do("MULTI")
	r.do("FCALL", "acquire", "1", "tx", "me", "10000")
	r.do("FCALL_RO", "owner", "1", "tx")
	if got := r.do("EXEC"); got != "*2\r\n+OK\r\n$2\r\nme\r\n" {
		t.Errorf("EXEC = %q", got)
	}
	if got := r.do("EVAL", "return redis.call('fcall', 'owner', 1, KEYS[1])", "1", "tx"); !strings.HasPrefix(got, "-ERR This Redis command is not allowed from script") {
		t.Errorf("FCALL from a script = %q", got)
	}
	// A transaction sees its own FUNCTION LOAD and DELETE, as Redis's does.
	r.do("MULTI")
	r.do("FUNCTION", "LOAD", "#!lua name=mt\nredis.register_function('m', function() return 1 end)")
	r.do("FCALL", "m", "0")
	r.do("FUNCTION", "DELETE", "locks")
	r.do("FCALL", "owner", "1", "tx")
	if got := r.do("EXEC"); got != "*4\r\n$2\r\nmt\r\n:1\r\n+OK\r\n-ERR Function not found\r\n" {
		t.Errorf("EXEC of FUNCTION LOAD, FCALL, DELETE, FCALL = %q", got)
	}
	if got := r.do("FCALL", "m", "0"); got != ":1\r\n" {
		t.Errorf("FCALL after the transaction = %q", got)
	}
	if got := r.do("FCALL", "owner", "1", "tx"); got != "-ERR Function not found\r\n" {
		t.Errorf("FCALL of a function deleted in the transaction = %q", got)
	}
}

// The script memory limit stops a function too.
func TestFunctionMemoryLimit(t *testing.T) {
	addr, _ := startServer(t, func(c *Config) {
		c.Scripts = DefaultScriptLimits()
		c.Scripts.Memory = 16 << 20
	})
	r := dialRaw(t, addr)
	lib := "#!lua name=mem\nredis.register_function('grow', function() local t = {} for i = 1, 1e7 do t[i] = string.rep('x', 1024) .. i end return #t end)"
	if got := r.do("FUNCTION", "LOAD", lib); got != "$3\r\nmem\r\n" {
		t.Fatalf("FUNCTION LOAD = %q", got)
	}
	if got := r.do("FCALL", "grow", "0"); !strings.HasPrefix(got, "-ERR Script killed: it used more than the script memory limit (16 MiB)") {
		t.Errorf("FCALL grow = %q", got)
	}
}
