package script

import (
	"cmp"
	"context"
	"errors"
	"runtime"
	"runtime/metrics"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// A script cannot hold the node hostage inside one library call.

// backtrackScript backtracks exponentially in a Lua pattern matcher (about twice as long per
// extra character): the time limit and SCRIPT KILL must see it inside one call of string.find.
const backtrackScript = `return string.find(string.rep('a', 28), string.rep('a?', 28) .. string.rep('a', 28))`

func TestPatternBacktrackingTimeLimit(t *testing.T) {
	e := testEngine(t, Config{Timeout: 200 * time.Millisecond})
	start := time.Now()
	_, err := e.Run(t.Context(), []byte(backtrackScript), nil, nil, nil)
	elapsed := time.Since(start)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("Run = %v after %v, want the time limit", err, elapsed)
	}
	if !strings.HasPrefix(err.Error(), "ERR Script killed: it ran longer than the script time limit (200ms) script: ") {
		t.Errorf("error text %q", err)
	}
	// Generous: the run stops at its first check past 200ms; before, it ran for 22 s.
	if elapsed > 3*time.Second {
		t.Errorf("stopped after %v, want about 200ms", elapsed)
	}
	// The same matcher, bounded, still answers what Lua 5.1 answers once the work is small.
	if got := run(t, e, `return {string.find(string.rep('a', 10), string.rep('a?', 10) .. string.rep('a', 10))}`, nil, nil); got != "*2\r\n:1\r\n:10\r\n" {
		t.Errorf("a small backtracking find = %q", got)
	}
}

// TestNativeCallKill: SCRIPT KILL stops a script inside one long library call (the pattern
// matcher; gsub calling back into Lua; table.sort with a slow comparator).
func TestNativeCallKill(t *testing.T) {
	for _, tc := range []struct{ name, src string }{
		{"find", backtrackScript},
		{"gsub", `return string.gsub(string.rep('a', 30), string.rep('a?', 30) .. string.rep('a', 30), 'x')`},
		{"gmatch", `for w in string.gmatch(string.rep('a', 30), string.rep('a?', 30) .. string.rep('a', 30)) do end`},
		{"sort", `local t = {} for i = 1, 100 do t[i] = i end table.sort(t, function(a, b) while true do end end)`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := testEngine(t, Config{Timeout: time.Minute})
			done := make(chan error, 1)
			go func() {
				_, err := e.Run(context.Background(), []byte(tc.src), nil, nil, nil)
				done <- err
			}()
			deadline := time.Now().Add(5 * time.Second)
			for e.Running() == 0 && time.Now().Before(deadline) {
				time.Sleep(time.Millisecond) // the run starts on another goroutine
			}
			// The script runs well under 1024 instructions before its long call, so the
			// first look at the kill flag is the call's own.
			if n := e.Kill(); n != 1 {
				t.Fatalf("Kill = %d, want 1", n)
			}
			select {
			case err := <-done:
				if !errors.Is(err, ErrKilled) || !strings.HasPrefix(err.Error(), "ERR Script killed by user with SCRIPT KILL...") {
					t.Errorf("killed run = %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Fatal("SCRIPT KILL did not stop the script within 10s")
			}
		})
	}
}

// heapAllocs is the bytes the process has allocated on the heap so far (garbage included).
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// TestMemoryChargedBeforeAllocation: each of these would build far more than the limit between
// two periodic checks (every 8,192 instructions); the string is charged before it is made, so the run stops with the memory-limit error and the process never allocates it.
func TestMemoryChargedBeforeAllocation(t *testing.T) {
	const limit = 64 << 20
	// What a run may allocate (garbage included) before it stops: twice the limit, and three
	// times for the encoders, whose output buffer doubles as it grows and is copied into the
	// string at the end, so each call leaves about twice its output as garbage (-race adds its
	// own). Without the charging each case runs to the end, far past these.
	for _, tc := range []struct {
		name, src string
		times     uint64 // the limits the run may allocate; 0: 2
	}{
		// The issue's, scaled to the limit: 20 × string.rep('x', 64 MiB) under 256 MiB.
		{"rep", `local t = {} for i = 1, 20 do t[i] = string.rep('x', 16 * 2^20) end return #t`, 0},
		{"concat doubling", `local s = string.rep('x', 2^20) for i = 1, 8 do s = s .. s end return #s`, 0},
		{"concat chain", `local s = string.rep('x', 32 * 2^20) local r = s .. s .. s .. s return #r`, 0},
		{"concat in loadstring", `return loadstring("local s = string.rep('x', 2^20) for i = 1, 8 do s = s .. s end return #s")()`, 0},
		{"table.concat", `local s = string.rep('x', 2^20) local t = {} for i = 1, 128 do t[i] = s end return #table.concat(t)`, 0},
		{"gsub", `return #string.gsub(string.rep('x', 2^20), 'x', string.rep('y', 100))`, 0},
		{"upper", `local s = string.rep('x', 40 * 2^20) local t = {} for i = 1, 4 do t[i] = s:upper() end return #t`, 0},
		{"cjson.encode", `local s = string.rep('x', 8 * 2^20) local t = {} for i = 1, 20 do t[i] = cjson.encode({s}) end return #t`, 3},
		{"cmsgpack.pack", `local s = string.rep('x', 8 * 2^20) local t = {} for i = 1, 20 do t[i] = cmsgpack.pack(s) end return #t`, 3},
		{"struct.pack", `local s = string.rep('x', 8 * 2^20) local t = {} for i = 1, 20 do t[i] = struct.pack('c0', s) end return #t`, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := testEngine(t, Config{Timeout: 20 * time.Second, MaxMemory: limit})
			runtime.GC()
			before := heapAllocs()
			_, err := e.Run(t.Context(), []byte(tc.src), nil, nil, nil)
			allocated := heapAllocs() - before
			if !errors.Is(err, ErrMemory) || !strings.HasPrefix(err.Error(), "ERR Script killed: it used more than the script memory limit (64 MiB)") {
				t.Errorf("Run = %v, want the memory limit", err)
			}
			times := cmp.Or(tc.times, 2)
			if allocated > times*limit {
				t.Errorf("the run allocated %d MiB, want at most %d times its %d MiB limit", allocated>>20, times, limit>>20)
			}
		})
	}
}

// TestMemoryGarbageStillRuns: charging before allocating does not count garbage: a script that
// builds and drops strings many times its limit runs to its end.
func TestMemoryGarbageStillRuns(t *testing.T) {
	e := testEngine(t, Config{Timeout: 20 * time.Second, MaxMemory: 64 << 20})
	for _, src := range []string{
		`local n = 0 for i = 1, 40 do local s = string.rep('x', 8 * 2^20) n = n + #s end return n`,
		`local n = 0 local s = string.rep('x', 2^20) for i = 1, 40 do n = n + #(s .. s .. s) end return n / 2^20`,
		`local n = 0 local t = {} for i = 1, 16 do t[i] = string.rep('x', 2^20) end for i = 1, 20 do n = n + #table.concat(t, ',') end return n > 0`,
	} {
		if got := run(t, e, src, nil, nil); strings.HasPrefix(got, "-") {
			t.Errorf("%s = %q", src, got)
		}
	}
}

// The .. operator, now a call (memory.go), keeps what it did: numbers, __concat on either
// side (as Lua, a chain is joined from the right: checked against Redis 7.0.15), long
// chains, errors with their position.
func TestConcatSemantics(t *testing.T) {
	e := testEngine(t, Config{})
	long := `return ` + strings.TrimSuffix(strings.Repeat(`"a" .. `, 150), " .. ")
	for _, tc := range []struct{ src, want string }{
		{`local t = setmetatable({}, {__concat = function(a, b) return 'meta' end}) return {t .. 'x', 'x' .. t, 1 .. 2, 'a' .. 1.5, 'a' .. 'b' .. t}`,
			"*5\r\n$4\r\nmeta\r\n$4\r\nmeta\r\n$2\r\n12\r\n$4\r\na1.5\r\n$5\r\nameta\r\n"},
		{`local t = setmetatable({}, {__concat = function(a, b) return type(a) .. '+' .. type(b) end}) return 'x' .. 'y' .. t`, "$13\r\nxstring+table\r\n"},
		{long, "$150\r\n" + strings.Repeat("a", 150) + "\r\n"},
		{`local function f() return 'x', 'y' end local function g(...) return 'a' .. ... end return {'a' .. f(), f() .. 'b', g('b', 'c'), 'a' .. (f())}`,
			"*4\r\n$2\r\nax\r\n$2\r\nxb\r\n$2\r\nab\r\n$2\r\nax\r\n"},
		{"local x\nreturn 'a' .. x", "-ERR user_script:2: cannot perform concat operation between string and nil script: " + SHA1Hex([]byte("local x\nreturn 'a' .. x")) + ", on @user_script:2.\r\n"},
		{`local n = 0 for k in pairs(_G) do if type(k) ~= 'string' or k:byte(1) == 0 then n = n + 1 end end return n`, ":0\r\n"},
		{`return string.format('%100d', 1)`, "-ERR user_script:1: invalid format (width or precision too long) script: " + SHA1Hex([]byte(`return string.format('%100d', 1)`)) + ", on @user_script:1.\r\n"},
	} {
		if got := run(t, e, tc.src, nil, nil); got != tc.want {
			t.Errorf("%s\ngot  %q\nwant %q", short(tc.src), got, tc.want)
		}
	}
}

// RunBudget stops a run at its budget, before its time limit, with no run counted; a run
// that ends within it is an ordinary run. Right after a stop, runs on a budget do not start.
func TestRunBudget(t *testing.T) {
	e := testEngine(t, Config{Timeout: time.Minute})
	var clock atomic.Int64 // past base; every reading advances it by a millisecond
	base := time.Now()
	e.now = func() time.Time { return base.Add(time.Duration(clock.Add(int64(time.Millisecond)))) }
	later := func() { clock.Add(int64(time.Hour)) } // past any cooldown
	if _, _, err := e.RunBudget(t.Context(), 5*time.Millisecond, []byte(`while true do end`), nil, nil, nil); !errors.Is(err, ErrBudget) {
		t.Fatalf("RunBudget of a loop = %v, want ErrBudget", err)
	}
	// Within budgetCooldown of it, even a short script is sent away at once.
	if _, _, err := e.RunBudget(t.Context(), 5*time.Millisecond, []byte(`return 7`), nil, nil, nil); !errors.Is(err, ErrBudget) {
		t.Errorf("RunBudget just after a stop = %v, want ErrBudget", err)
	}
	if v, err := e.Run(t.Context(), []byte(`return 7`), nil, nil, nil); err != nil || v.Int != 7 {
		t.Errorf("Run just after a stop = %+v, %v", v, err)
	}
	later()
	v, _, err := e.RunBudget(t.Context(), time.Second, []byte(`return 7`), nil, nil, nil)
	if err != nil || v.Int != 7 {
		t.Errorf("RunBudget of a short script = %+v, %v", v, err)
	}
	if s := e.Stats(); s.OverBudget != 2 || s.Runs != 2 || s.Failed != 0 {
		t.Errorf("stats %+v, want 2 over budget and 2 runs, none failed", s)
	}
	// Work too long to do in one go holding the server's view stops a run on a budget at
	// once, however much of its budget is left; without a budget it is done.
	for _, src := range []string{
		`return #string.rep('x', 2^21)`,
		`local s = string.rep('x', 2^19) return #(s .. s .. s)`,
		`return loadstring(string.rep('do end ', 1000) .. 'return 1')()`,
		`local i = 0 return load(function() i = i + 1 if i < 1000 then return 'a = 1 ' end end) ~= nil`,
	} {
		later()
		if _, _, err := e.RunBudget(t.Context(), 50*time.Second, []byte(src), nil, nil, nil); !errors.Is(err, ErrBudget) || strings.Contains(err.Error(), "another script") {
			t.Errorf("RunBudget of %s = %v, want ErrBudget", src, err)
		}
		if got := run(t, e, src, nil, nil); strings.HasPrefix(got, "-") {
			t.Errorf("Run of %s = %q", src, got)
		}
	}
}

// table.sort, now ours so that the time limit reaches a long sort, sorts as before.
func TestTableSort(t *testing.T) {
	e := testEngine(t, Config{})
	for _, tc := range []struct{ src, want string }{
		{`local t = {3, 1, 2} table.sort(t) return t`, "*3\r\n:1\r\n:2\r\n:3\r\n"},
		{`local t = {'b', 'a', 'c'} table.sort(t, function(a, b) return a > b end) return t`, "*3\r\n$1\r\nc\r\n$1\r\nb\r\n$1\r\na\r\n"},
		{`local t = {} for i = 1, 5000 do t[i] = (i * 7919) % 5000 end table.sort(t) for i = 2, #t do if t[i-1] > t[i] then return 0 end end return #t`, ":5000\r\n"},
		{`return pcall(table.sort, {1, 'a', 2})`, "$-1\r\n"},
	} {
		if got := run(t, e, tc.src, nil, nil); got != tc.want {
			t.Errorf("%s\ngot  %q\nwant %q", short(tc.src), got, tc.want)
		}
	}
	if got := run(t, e, `table.sort(_G)`, nil, nil); !strings.Contains(got, "Attempt to modify a readonly table") {
		t.Errorf("table.sort(_G) = %q", got)
	}
}

// A script stopped by its budget waits to run again, Suspended: SCRIPT KILL counts it and
// stops its next run, so no moment between its runs escapes a kill.
func TestSuspendedKill(t *testing.T) {
	e := testEngine(t, Config{Timeout: time.Minute})
	loop := []byte(`while true do end`)
	_, s, err := e.RunBudget(t.Context(), time.Millisecond, loop, nil, nil, nil)
	if !errors.Is(err, ErrBudget) || s == nil {
		t.Fatalf("RunBudget = %v, %v; want ErrBudget and a Suspended", s, err)
	}
	if n := e.Kill(); n != 1 {
		t.Errorf("Kill with one script waiting = %d, want 1", n)
	}
	if _, err := s.Run(t.Context(), loop, nil, nil, nil); !errors.Is(err, ErrKilled) || !strings.HasPrefix(err.Error(), "ERR Script killed by user with SCRIPT KILL...") {
		t.Errorf("the run after the kill = %v, want ErrKilled at once", err)
	}
	if n := e.Kill(); n != 0 {
		t.Errorf("Kill once the suspended script ran = %d, want 0", n)
	}
	// A suspended script closed without running is no longer counted; one paused again is.
	e.overBudgetAt.Store(0)
	_, s, _ = e.RunBudget(t.Context(), time.Millisecond, loop, nil, nil, nil)
	s.Close()
	s.Close()
	if n := e.Kill(); n != 0 {
		t.Errorf("Kill after Close = %d, want 0", n)
	}
	e.overBudgetAt.Store(0)
	_, s, _ = e.RunBudget(t.Context(), time.Millisecond, []byte(`local i = 0 while i < 1e7 do i = i + 1 end return i`), nil, nil, nil)
	v, err := s.Run(t.Context(), []byte(`local i = 0 while i < 1e7 do i = i + 1 end return i`), nil, nil, nil)
	if err != nil || v.Int != 1e7 {
		t.Fatalf("the suspended script's run = %+v, %v", v, err)
	}
	s.Pause()
	if n := e.Kill(); n != 1 {
		t.Errorf("Kill with a paused script = %d, want 1", n)
	}
	if _, err := s.Run(t.Context(), loop, nil, nil, nil); !errors.Is(err, ErrKilled) {
		t.Errorf("the run after a kill while paused = %v", err)
	}
}
