package script

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var _ Caller = (*keyspace)(nil)

// The Config is compared with == by its users (a zero Config means "use the defaults").
var _ = Config{} == Config{}

func TestConfig(t *testing.T) {
	d := DefaultConfig()
	if d.Timeout != 5*time.Second || d.Pool != runtime.GOMAXPROCS(0) || d.Cache != 1000 || d.Logger == nil {
		t.Errorf("DefaultConfig() = %+v", d)
	}
	if err := d.Validate(); err != nil {
		t.Errorf("DefaultConfig().Validate() = %v", err)
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("Config{}.Validate() = %v", err)
	}
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{Timeout: -1}, "Config.Timeout"},
		{Config{Pool: -1}, "Config.Pool"},
		{Config{Cache: -1}, "Config.Cache"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%+v.Validate() = %v, want an error naming %s", tc.cfg, err, tc.field)
		}
	}
	e := New(Config{})
	defer e.Close()
	if e.cfg.Timeout != d.Timeout || e.cfg.Pool != d.Pool || e.cfg.Cache != d.Cache || e.cfg.Logger == nil {
		t.Errorf("New(Config{}) config = %+v, want the defaults", e.cfg)
	}
}

func TestSHA1Hex(t *testing.T) {
	for src, want := range map[string]string{
		"return 1": "e0e1f9fabfc9d4800c877a703b823ac0578ff8db", // SCRIPT LOAD on Redis 7.0.15
		"":         "da39a3ee5e6b4b0d3255bfef95601890afd80709",
	} {
		if got := SHA1Hex([]byte(src)); got != want {
			t.Errorf("SHA1Hex(%q) = %s, want %s", src, got, want)
		}
	}
}

func TestKindString(t *testing.T) {
	for k, want := range map[Kind]string{KindNil: "nil", KindInt: "int", KindBulk: "bulk", KindStatus: "status",
		KindError: "error", KindArray: "array", 42: "Kind(42)"} {
		if got := k.String(); got != want {
			t.Errorf("Kind(%d).String() = %q, want %q", k, got, want)
		}
	}
}

// TestRoundTrip sends each kind of reply through a script (RESP -> Lua) and back out
// (Lua -> RESP): return redis.call(...) gives back what the command answered, except for a
// null in an array, which a script sees as false and returns as a null again.
func TestRoundTrip(t *testing.T) {
	e := testEngine(t, Config{})
	nested := Value{Kind: KindArray, Array: []Value{
		{Kind: KindInt, Int: -7},
		{Kind: KindBulk, Str: []byte("a\r\nb")},
		{Kind: KindNil},
		{Kind: KindStatus, Str: []byte("OK")},
		{Kind: KindArray, Array: []Value{{Kind: KindBulk, Str: []byte{}}}},
		{Kind: KindArray, Array: []Value{}},
	}}
	for _, tc := range []struct {
		name  string
		reply Value
		src   string
		want  Value
	}{
		{"int", Value{Kind: KindInt, Int: 42}, `return redis.call("x")`, Value{Kind: KindInt, Int: 42}},
		{"int precision", Value{Kind: KindInt, Int: 1<<53 + 1}, `return redis.call("x")`, Value{Kind: KindInt, Int: 1 << 53}},
		{"bulk", Value{Kind: KindBulk, Str: []byte("v\x00w")}, `return redis.call("x")`, Value{Kind: KindBulk, Str: []byte("v\x00w")}},
		{"empty bulk", Value{Kind: KindBulk, Str: []byte{}}, `return redis.call("x")`, Value{Kind: KindBulk, Str: []byte{}}},
		{"status", Value{Kind: KindStatus, Str: []byte("OK")}, `return redis.call("x")`, Value{Kind: KindStatus, Str: []byte("OK")}},
		{"nil", Value{Kind: KindNil}, `return redis.call("x")`, Value{Kind: KindNil}},
		{"error via pcall", Value{Kind: KindError, Str: []byte("WRONGTYPE Operation against a key")}, `return redis.pcall("x")`,
			Value{Kind: KindError, Str: []byte("WRONGTYPE Operation against a key")}},
		{"error without code", Value{Kind: KindError, Str: []byte("OOPS")}, `return redis.pcall("x")`,
			Value{Kind: KindError, Str: []byte("ERR OOPS")}},
		{"array", nested, `return redis.call("x")`, nested},
		{"types", nested, `local r = redis.call("x") local t = {} for i = 1, #r do t[i] = type(r[i]) end return t`,
			Value{Kind: KindArray, Array: []Value{
				{Kind: KindBulk, Str: []byte("number")}, {Kind: KindBulk, Str: []byte("string")}, {Kind: KindBulk, Str: []byte("boolean")},
				{Kind: KindBulk, Str: []byte("table")}, {Kind: KindBulk, Str: []byte("table")}, {Kind: KindBulk, Str: []byte("table")},
			}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			call := callerFunc(func([][]byte) (Value, error) { return tc.reply, nil })
			got, err := e.Run(t.Context(), []byte(tc.src), nil, nil, call)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("-want +got:\n%s", diff)
			}
		})
	}
}

// TestCallArgs checks what a Caller receives: strings as they are, numbers as %.17g.
func TestCallArgs(t *testing.T) {
	e := testEngine(t, Config{})
	var got [][]byte
	call := callerFunc(func(args [][]byte) (Value, error) {
		got = args
		return Value{Kind: KindNil}, nil
	})
	src := `redis.call("set", KEYS[1], ARGV[1], "px", 1500, 0.5, -0.0)`
	if _, err := e.Run(t.Context(), []byte(src), bytesOf("k\x00"), bytesOf("v\r\n"), call); err != nil {
		t.Fatal(err)
	}
	want := bytesOf("set", "k\x00", "v\r\n", "px", "1500", "0.5", "-0")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("-want +got:\n%s", diff)
	}
	// Each argument is the callee's: appending to one does not touch the next.
	got[0] = append(got[0], "xx"...)
	if string(got[1]) != "k\x00" {
		t.Errorf("appending to args[0] changed args[1] to %q", got[1])
	}
}

func TestKeysArgv(t *testing.T) {
	e := testEngine(t, Config{})
	got := run(t, e, `return {KEYS[1], KEYS[2], ARGV[1], #KEYS, #ARGV}`, []string{"a", "b"}, []string{"c"})
	if want := "*5\r\n$1\r\na\r\n$1\r\nb\r\n$1\r\nc\r\n:2\r\n:1\r\n"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestNilCaller(t *testing.T) {
	e := testEngine(t, Config{})
	_, err := e.Run(t.Context(), []byte(`return redis.call("get", "k")`), nil, nil, nil)
	if err == nil || !strings.HasPrefix(err.Error(), "ERR Unknown Redis command called from script script: ") {
		t.Errorf("Run with a nil Caller: %v", err)
	}
}

// TestSandbox checks the globals a script sees: Lua's base, table, string and math libraries,
// redis and Redis's bit, cjson, cmsgpack and struct, nothing that reaches the process (os,
// io, require, ...).
func TestSandbox(t *testing.T) {
	e := testEngine(t, Config{})
	got := run(t, e, `local r = {} for k in pairs(_G) do r[#r+1] = k end table.sort(r) return table.concat(r, " ")`, nil, nil)
	// Redis 7.0.15 also has __redis__err__handler, coroutine, gcinfo.
	want := "ARGV KEYS _G _VERSION assert bit cjson cmsgpack collectgarbage error getmetatable ipairs load loadstring math " +
		"next pairs pcall rawequal rawget rawset redis select setmetatable string struct table tonumber tostring type unpack xpcall"
	if got != fmt.Sprintf("$%d\r\n%s\r\n", len(want), want) {
		t.Errorf("globals:\ngot  %q\nwant %q", got, want)
	}
	for _, name := range []string{"os", "io", "require", "loadfile", "dofile", "print", "getfenv", "setfenv", "module",
		"package", "debug", "coroutine", "newproxy", "channel", "_printregs", "_GOPHER_LUA_VERSION"} {
		src := "return " + name
		want := "-ERR user_script:1: Script attempted to access nonexistent global variable '" + name + "' script: " + SHA1Hex([]byte(src)) + ", on @user_script:1.\r\n"
		if got := run(t, e, src, nil, nil); got != want {
			t.Errorf("%s: got %q, want %q", src, got, want)
		}
	}
	for _, tc := range []struct{ src, want string }{
		{`local r = {} for k in pairs(redis) do r[#r+1] = k end table.sort(r) return table.concat(r, " ")`,
			"LOG_DEBUG LOG_NOTICE LOG_VERBOSE LOG_WARNING call error_reply log pcall replicate_commands setresp sha1hex status_reply"},
		{`local r = {} for k in pairs(table) do r[#r+1] = k end table.sort(r) return table.concat(r, " ")`,
			"concat getn insert maxn remove sort"},
		{`local r = {} for k in pairs(string) do r[#r+1] = k end table.sort(r) return table.concat(r, " ")`,
			"byte char dump find format gfind gmatch gsub len lower match rep reverse sub upper"},
		{`return _VERSION`, "Lua 5.1"},
		{`return type(load(function() return nil end))`, "function"},
	} {
		if got := run(t, e, tc.src, nil, nil); got != fmt.Sprintf("$%d\r\n%s\r\n", len(tc.want), tc.want) {
			t.Errorf("%s:\ngot  %q\nwant %q", tc.src, got, tc.want)
		}
	}
}

// TestIsolation runs scripts that try every way we know to leave state behind, then checks
// on the same VM that none survived.
func TestIsolation(t *testing.T) {
	e := testEngine(t, Config{Pool: 1})
	attempts := []string{
		`rawset(_G, "leak", 1)`,
		`leak = 1`,
		`_G.leak = 1`,
		`string.leak = 1`,
		`rawset(string, "leak", 1)`,
		`table.insert(string, "leak")`,
		`table.insert(_G, "leak")`,
		`setmetatable(string, {__index = function() return "leak" end})`,
		`getmetatable("").__index = {leak = 1}`,
		`getmetatable("").__index.leak = 1`,
		`rawset(getmetatable(""), "__index", {leak = 1})`,
		`rawset(getmetatable("").__index, "leak", 1)`,
		`rawset(getmetatable(_G), "__index", {leak = 1})`,
		`setmetatable(getmetatable(_G), nil)`,
		`redis.call = function() return "leak" end`,
		`rawset(redis, "call", function() return "leak" end)`,
		`math.randomseed(7)`,
		`loadstring("leak = 1")()`,
		`KEYS[2] = "leak"; ARGV[1] = "leak"`,
		`local mt = {} setmetatable(KEYS, mt) mt.__index = function() return "leak" end`,
	}
	for _, src := range attempts {
		run(t, e, src, []string{"k"}, nil)
	}
	check := `return {tostring(rawget(_G, "leak")), tostring(rawget(string, "leak")), tostring(string.leak),
		tostring(("x").leak), tostring(redis.call("ping").ok), tostring(#KEYS), tostring(KEYS[2]), tostring(ARGV[1]),
		tostring(math.random(1000)), tostring(table.getn(string)), tostring(getmetatable(string)),
		tostring(pcall(function() return leak end))}`
	got := run(t, e, check, []string{"k"}, nil)
	want := "*12\r\n$3\r\nnil\r\n$3\r\nnil\r\n$3\r\nnil\r\n$3\r\nnil\r\n$4\r\nPONG\r\n$1\r\n1\r\n$3\r\nnil\r\n$3\r\nnil\r\n" +
		"$3\r\n397\r\n$1\r\n0\r\n$3\r\nnil\r\n$5\r\nfalse\r\n"
	if got != want {
		t.Errorf("after the attempts:\ngot  %q\nwant %q", got, want)
	}
	if s := e.Stats(); s.VMs != 1 {
		t.Errorf("the runs used %d VMs, want 1 (the test must reuse one VM)", s.VMs)
	}
}

// TestRandom checks math.random against the sequence a freshly started Redis 7.0.15 gives
// (397, 841, 354, 446584, 0.31869277233197, 7), the same on every run (Redis carries on).
func TestRandom(t *testing.T) {
	e := testEngine(t, Config{})
	src := `return {math.random(1000), math.random(1000), math.random(1000), math.random(1000000), tostring(math.random()), math.random(5, 7)}`
	want := "*6\r\n:397\r\n:841\r\n:354\r\n:446584\r\n$16\r\n0.31869277233197\r\n:7\r\n"
	for range 2 {
		if got := run(t, e, src, nil, nil); got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	}
}

func TestTimeLimit(t *testing.T) {
	for _, tc := range []struct{ name, src string }{
		{"loop", "local i = 0\nwhile true do i = i + 1 end"},
		{"empty loop", "while true do end"},
		{"pcall", "while true do pcall(function() while true do end end) end"},
		{"xpcall", "while true do xpcall(function() while true do end end, function(e) while true do end end) end"},
		{"calls", "while true do redis.call('ping') end"},
		{"recursion", "local function f() return pcall(f) end while true do f() end"},
		{"library", "while true do string.rep('x', 10000) end"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := testEngine(t, Config{Timeout: 100 * time.Millisecond})
			start := time.Now()
			_, err := e.Run(t.Context(), []byte(tc.src), nil, nil, newKeyspace())
			elapsed := time.Since(start)
			if !errors.Is(err, ErrTimeout) {
				t.Fatalf("Run = %v, want ErrTimeout", err)
			}
			want := "ERR Script killed: it ran longer than the script time limit (100ms) script: " + SHA1Hex([]byte(tc.src)) + ", on @user_script:"
			if !strings.HasPrefix(err.Error(), want) {
				t.Errorf("error %q, want it to start with %q", err, want)
			}
			if elapsed > time.Second {
				t.Errorf("stopped after %v, want about 100ms", elapsed)
			}
			// The engine is healthy after it.
			if got := run(t, e, `return redis.call("ping")`, nil, nil); got != "+PONG\r\n" {
				t.Errorf("the next run got %q", got)
			}
			if s := e.Stats(); s.Timeouts != 1 || s.VMs != 2 {
				t.Errorf("stats %+v, want 1 timeout and 2 VMs (the stopped one is dropped)", s)
			}
		})
	}
}

// TestTimeLimitClock checks the time limit with a clock that jumps: the first check after
// start sees the deadline passed.
func TestTimeLimitClock(t *testing.T) {
	e := testEngine(t, Config{Timeout: time.Minute})
	base := time.Now()
	calls := 0
	e.now = func() time.Time {
		calls++
		if calls == 1 {
			return base
		}
		return base.Add(time.Hour)
	}
	src := "local n = 0\nwhile true do n = n + 1 end"
	_, err := e.Run(t.Context(), []byte(src), nil, nil, nil)
	want := "ERR Script killed: it ran longer than the script time limit (1m0s) script: " + SHA1Hex([]byte(src)) + ", on @user_script:2."
	if err == nil || err.Error() != want || !errors.Is(err, ErrTimeout) {
		t.Errorf("Run = %v, want %q", err, want)
	}
	// A short script is not checked at all before it ends.
	calls = 0
	if got := run(t, e, `return 1`, nil, nil); got != ":1\r\n" {
		t.Errorf("got %q", got)
	}
}

func TestContext(t *testing.T) {
	e := testEngine(t, Config{})
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, cancel)
	src := "while true do end"
	_, err := e.Run(ctx, []byte(src), nil, nil, nil)
	want := "ERR Script killed: context canceled script: " + SHA1Hex([]byte(src)) + ", on @user_script:1."
	if err == nil || err.Error() != want || !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want %q", err, want)
	}
	ctx, cancel = context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if _, err := e.Run(ctx, []byte(src), nil, nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run = %v, want context.DeadlineExceeded", err)
	}
	// A ctx already done stops the script before it starts.
	if _, err := e.Run(ctx, []byte(`return 1`), nil, nil, nil); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Run = %v, want context.DeadlineExceeded", err)
	}
	if s := e.Stats(); s.Aborts != 3 || s.Timeouts != 0 {
		t.Errorf("stats %+v, want 3 aborts", s)
	}
}

var errLeadership = errors.New("leadership lost")

// TestCallerError checks that a Caller's Go error ends the script, even under pcall, with
// the error's text, and wraps it.
func TestCallerError(t *testing.T) {
	e := testEngine(t, Config{})
	calls := 0
	call := callerFunc(func(args [][]byte) (Value, error) {
		calls++
		return Value{}, fmt.Errorf("UNCERTAIN the write may or may not have happened: %w", errLeadership)
	})
	for _, src := range []string{
		`return redis.call("set", "k", "v")`,
		`local ok, err = pcall(redis.call, "set", "k", "v") return "survived: " .. tostring(err)`,
		`redis.pcall("set", "k", "v") return "survived"`,
		`local ok = pcall(function() redis.call("set", "k", "v") end) while true do end`,
	} {
		calls = 0
		v, err := e.Run(t.Context(), []byte(src), nil, nil, call)
		if !errors.Is(err, errLeadership) || err.Error() != "UNCERTAIN the write may or may not have happened: leadership lost" {
			t.Errorf("%s: Run = %v, %v; want the Caller's error", src, v, err)
		}
		if calls != 1 {
			t.Errorf("%s: %d calls, want 1", src, calls)
		}
	}
}

func TestCallerPanic(t *testing.T) {
	var logs bytes.Buffer
	e := testEngine(t, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	call := callerFunc(func(args [][]byte) (Value, error) { panic("boom") })
	_, err := e.Run(t.Context(), []byte(`local ok = pcall(redis.call, "get", "k") return "survived"`), nil, nil, call)
	if err == nil || err.Error() != "ERR internal error in redis.call: boom" {
		t.Errorf("Run = %v, want the internal error", err)
	}
	if !strings.Contains(logs.String(), "panic in redis.call") {
		t.Errorf("the panic was not logged: %q", logs.String())
	}
	if got := run(t, e, `return 1`, nil, nil); got != ":1\r\n" {
		t.Errorf("the next run got %q", got)
	}
}

func TestLog(t *testing.T) {
	var logs bytes.Buffer
	lg := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug,
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		}}))
	e := testEngine(t, Config{Logger: lg})
	src := `redis.log(redis.LOG_WARNING, "hello", 12, {}, "world")
redis.log(redis.LOG_NOTICE, "notice")
redis.log(redis.LOG_VERBOSE, "verbose")
redis.log(redis.LOG_DEBUG, {}, "debug", 1.5)`
	if got := run(t, e, src, nil, nil); got != "$-1\r\n" {
		t.Fatalf("got %q", got)
	}
	sha := SHA1Hex([]byte(src))
	want := fmt.Sprintf(`level=WARN msg=redis.log text="hello 12 world" sha=%[1]s
level=INFO msg=redis.log text=notice sha=%[1]s
level=DEBUG msg=redis.log text=verbose sha=%[1]s
level=DEBUG msg=redis.log text=" debug 1.5" sha=%[1]s
`, sha)
	if diff := cmp.Diff(want, logs.String()); diff != "" {
		t.Errorf("-want +got:\n%s", diff)
	}
}

func TestCompile(t *testing.T) {
	e := testEngine(t, Config{})
	err := e.Compile([]byte("return 1+"))
	var se *Error
	if !errors.As(err, &se) || !errors.Is(err, ErrCompile) ||
		se.Msg != "ERR Error compiling script (new function): user_script:1: unexpected symbol near '<eof>'" {
		t.Errorf("Compile = %v", err)
	}
	if err := e.Compile([]byte("#!lua flags=nope\nreturn 1")); !errors.Is(err, ErrCompile) {
		t.Errorf("Compile = %v, want ErrCompile", err)
	}
	if err := e.Compile([]byte("return 1")); err != nil {
		t.Fatal(err)
	}
	run(t, e, "return 1", nil, nil)
	if s := e.Stats(); s.Compiles != 1 || s.Hits != 1 || s.Cached != 1 || s.Failed != 0 {
		t.Errorf("stats %+v, want 1 compile and 1 hit", s)
	}
}

func TestCacheBound(t *testing.T) {
	e := testEngine(t, Config{Cache: 2})
	for _, src := range []string{"return 1", "return 2", "return 1", "return 3", "return 1", "return 2"} {
		run(t, e, src, nil, nil)
	}
	// return 2 was least recently used when return 3 came in.
	if s := e.Stats(); s.Cached != 2 || s.Compiles != 4 || s.Hits != 2 {
		t.Errorf("stats %+v, want 2 cached, 4 compiles, 2 hits", s)
	}
}

func TestParseFlags(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want Flags
		err  string
	}{
		{"return 1", 0, ""},
		{"#!lua\nreturn 1", FlagShebang, ""},
		{"#!lua flags=no-writes,allow-oom\nreturn 1", FlagShebang | FlagNoWrites | FlagAllowOOM, ""},
		{"#!lua flags=allow-stale,no-cluster,allow-cross-slot-keys\n", FlagShebang | FlagAllowStale | FlagNoCluster | FlagAllowCrossSlotKeys, ""},
		{"#!lua flags=no-writes flags=allow-oom\n", FlagShebang | FlagNoWrites | FlagAllowOOM, ""},
		{"#!lua", 0, "ERR Invalid script shebang"},
		{"#!lua flags=no-writes,bad\n", 0, "ERR Unexpected flag in script shebang: bad"},
		{"#!python\n", 0, "ERR Unexpected engine in script shebang: #!python"},
		{"#!lua nope\n", 0, "ERR Unknown lua shebang option: nope"},
	} {
		got, err := ParseFlags([]byte(tc.src))
		if got != tc.want || (err == nil) != (tc.err == "") || err != nil && err.Error() != tc.err {
			t.Errorf("ParseFlags(%q) = %b, %v; want %b, %q", tc.src, got, err, tc.want, tc.err)
		}
	}
}

// TestMemoryBounds checks the stack limits and string.rep's cap, and that the engine works
// after a script hit them.
func TestMemoryBounds(t *testing.T) {
	e := testEngine(t, Config{})
	for _, tc := range []struct{ src, want string }{
		{`return string.rep("x", 1e9)`, "-ERR user_script:1: resulting string too large script: <sha>, on @user_script:1.\r\n"},
		{`return ("xy"):rep(40 * 1024 * 1024)`, "-ERR user_script:1: resulting string too large script: <sha>, on @user_script:1.\r\n"},
		{`return #string.rep("x", 1e6)`, ":1000000\r\n"},
		// Redis: "too many results to unpack"; gopher-lua's value stack overflows.
		{`return #unpack({}, 1, 1e7)`, "-ERR user_script:1: registry overflow script: <sha>, on @user_script:1.\r\n"},
		{`local function f() return 1 + f() end return f()`, "-ERR user_script:1: stack overflow script: <sha>, on @user_script:1.\r\n"},
		{`return redis.call("ping")`, "+PONG\r\n"},
	} {
		want := strings.ReplaceAll(tc.want, "<sha>", SHA1Hex([]byte(tc.src)))
		if got := run(t, e, tc.src, nil, nil); got != want {
			t.Errorf("%s: got %q, want %q", tc.src, got, want)
		}
	}
}

func TestClose(t *testing.T) {
	e := New(Config{})
	run(t, e, "return 1", nil, nil)
	if s := e.Stats(); s.IdleVMs != 1 {
		t.Errorf("%d idle VMs, want 1", s.IdleVMs)
	}
	e.Close()
	e.Close()
	if _, err := e.Run(t.Context(), []byte("return 1"), nil, nil, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("Run after Close = %v, want ErrClosed", err)
	}
	if err := e.Compile([]byte("return 1")); !errors.Is(err, ErrClosed) {
		t.Errorf("Compile after Close = %v, want ErrClosed", err)
	}
	if s := e.Stats(); s.IdleVMs != 0 {
		t.Errorf("%d idle VMs after Close, want 0", s.IdleVMs)
	}
}

// TestConcurrent runs scripts from many goroutines on one engine (run it with -race): each
// goroutine has its own keyspace and must see only its own effects.
func TestConcurrent(t *testing.T) {
	e := testEngine(t, Config{Pool: 4, Timeout: time.Second})
	const workers, runs = 16, 200
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			ks := newKeyspace()
			owner := fmt.Sprintf("owner-%d", w)
			for i := range runs {
				ctx := context.Background()
				key := fmt.Sprintf("lock-%d", i%3)
				ks.data[key] = []byte(owner)
				v, err := e.Run(ctx, []byte(releaseScript), bytesOf(key), bytesOf(owner), ks)
				if err != nil || v.Kind != KindInt || v.Int != 1 {
					errs <- fmt.Errorf("worker %d run %d: release = %v, %v", w, i, v, err)
					return
				}
				if _, ok := ks.data[key]; ok {
					errs <- fmt.Errorf("worker %d run %d: key not deleted", w, i)
					return
				}
				src := fmt.Sprintf("return redis.call('incr', KEYS[1]) + %d", i%5)
				if v, err := e.Run(ctx, []byte(src), bytesOf("n"), nil, ks); err != nil || v.Int != int64(i+1+i%5) {
					errs <- fmt.Errorf("worker %d run %d: incr = %v, %v", w, i, v, err)
					return
				}
				if _, err := e.Run(ctx, []byte(`x = 1`), nil, nil, ks); err == nil {
					errs <- fmt.Errorf("worker %d run %d: global assignment succeeded", w, i)
					return
				}
				if i%50 == 0 {
					e.Stats()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	s := e.Stats()
	if s.Runs != workers*runs*3 || s.IdleVMs > 4 {
		t.Errorf("stats %+v", s)
	}
}

func TestStats(t *testing.T) {
	e := testEngine(t, Config{})
	run(t, e, "return 1", nil, nil)
	run(t, e, "return 1", nil, nil)
	run(t, e, "error('x')", nil, nil)
	run(t, e, "return 1+", nil, nil)
	got := e.Stats()
	want := Stats{Runs: 4, Failed: 2, Compiles: 2, Hits: 1, Cached: 2, VMs: 1, IdleVMs: 1}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("-want +got:\n%s", diff)
	}
}

func TestValueAppendRESP2(t *testing.T) {
	v := Value{Kind: KindArray, Array: []Value{{Kind: KindNil}, {Kind: KindInt, Int: -1}, {Kind: KindBulk, Str: []byte("ab")},
		{Kind: KindStatus, Str: []byte("OK")}, {Kind: KindError, Str: []byte("ERR x")}, {Kind: KindArray}}}
	want := "*6\r\n$-1\r\n:-1\r\n$2\r\nab\r\n+OK\r\n-ERR x\r\n*0\r\n"
	if got := v.String(); got != want {
		t.Errorf("got %q, want %q", got, want)
	}
	if got := slices.Clip(v.AppendRESP2([]byte("x"))); string(got) != "x"+want {
		t.Errorf("AppendRESP2 = %q", got)
	}
}
