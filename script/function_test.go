package script

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"
)

const testLib = "#!lua name=mylib\n" +
	"local function pair(keys, args) return {keys[1], args[1]} end\n" +
	"redis.register_function('pair', pair)\n" +
	"redis.register_function{function_name='get', callback=function(keys) return redis.call('get', keys[1]) end, flags={'no-writes'}, description='reads'}\n" +
	"redis.register_function('bad', function() local x = nil; return x.y end)\n" +
	"redis.register_function('keys', function() return KEYS end)\n" +
	"redis.register_function('spin', function() while true do end end)\n"

// A library's code registers its functions, with their flags and descriptions, in order.
func TestLoadLibrary(t *testing.T) {
	e := New(DefaultConfig())
	defer e.Close()
	lib, err := e.LoadLibrary(t.Context(), []byte(testLib))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range lib.Functions {
		names = append(names, f.Name)
	}
	if lib.Name != "mylib" || !slices.Equal(names, []string{"pair", "get", "bad", "keys", "spin"}) {
		t.Fatalf("library %q registered %v", lib.Name, names)
	}
	if f := lib.Functions[1]; f.Flags != FlagNoWrites || f.Description != "reads" || !slices.Equal(FlagNames(f.Flags), []string{"no-writes"}) {
		t.Fatalf("get = %+v", f)
	}
}

// FUNCTION LOAD's errors, as redis-server 7.0.15 words them.
func TestLoadLibraryErrors(t *testing.T) {
	e := New(DefaultConfig())
	defer e.Close()
	for _, c := range []struct{ src, want string }{
		{"redis.register_function('f', function() end)", "ERR Missing library metadata"},
		{"#!lua", "ERR Invalid library metadata"},
		{"#!lua\nx", "ERR Library name was not given"},
		{"#!foo name=x\nx", "ERR Engine 'foo' not found"},
		{"#!lua name=x foo=bar\nx", "ERR Invalid metadata value given: foo=bar"},
		{"#!lua name=x name=y\nx", "ERR Invalid metadata value, name argument was given multiple times"},
		{"#!lua name=x-y\nx", "ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long"},
		{"#!lua name=x\nreturn 1", "ERR No functions registered"},
		{"#!lua name=x\nredis.call('set','a','b')", "ERR Error registering functions: ERR user_function:2: Script attempted to access nonexistent global variable 'call'"},
		{"#!lua name=x\nlocal a = string.len('x')", "ERR Error registering functions: ERR user_function:2: Script attempted to access nonexistent global variable 'string'"},
		{"#!lua name=x\nx = 1", "ERR Error registering functions: ERR user_function:2: Attempt to modify a readonly table"},
		{"#!lua name=x\nredis.register_function('f-1', function() end)", "ERR Error registering functions: ERR Library names can only contain letters, numbers, or underscores(_) and must be at least one character long"},
		{"#!lua name=x\nredis.register_function('g', function() end)\nredis.register_function('g', function() end)", "ERR Error registering functions: ERR Function already exists in the library"},
		{"#!lua name=x\nredis.register_function{function_name='g', callback=function() end, flags={'bogus'}}", "ERR Error registering functions: ERR unknown flag given"},
		{"#!lua name=x\nredis.register_function{function_name='g', callback=function() end, foo=1}", "ERR Error registering functions: ERR unknown argument given to redis.register_function"},
		{"#!lua name=x\nredis.register_function{function_name='g'}", "ERR Error registering functions: ERR redis.register_function must get a callback argument"},
		{"#!lua name=x\nredis.register_function{callback=function() end}", "ERR Error registering functions: ERR redis.register_function must get a function name argument"},
		{"#!lua name=x\nredis.register_function('g')", "ERR Error registering functions: ERR calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments)."},
		{"#!lua name=x\nredis.register_function('g', 'h')", "ERR Error registering functions: ERR second argument to redis.register_function must be a function"},
		{"#!lua name=x\nredis.register_function('a', function() end, 3)", "ERR Error registering functions: ERR wrong number of arguments to redis.register_function"},
		{"#!lua name=x\nredis.register_function({function_name='q', callback=1})", "ERR Error registering functions: ERR callback argument given to redis.register_function must be a function"},
		{"#!lua name=x\nredis.register_function({function_name='q', callback=function() end, flags=1})", "ERR Error registering functions: ERR flags argument to redis.register_function must be a table representing function flags"},
		{"#!lua name=x\nredis.register_function({[1]='q', callback=function() end})", "ERR Error registering functions: ERR unknown argument given to redis.register_function"},
		{"#!lua name=x\nredis.register_function()", "ERR Error registering functions: ERR wrong number of arguments to redis.register_function"},
	} {
		_, err := e.LoadLibrary(t.Context(), []byte(c.src))
		if err == nil || err.Error() != c.want {
			t.Errorf("LoadLibrary(%q) = %v\nwant %s", c.src, err, c.want)
		}
	}
}

// A library whose code does not end is stopped at Redis's 500 ms.
func TestLoadLibraryTimeout(t *testing.T) {
	e := New(DefaultConfig())
	defer e.Close()
	_, err := e.LoadLibrary(t.Context(), []byte("#!lua name=loop\nwhile true do end"))
	if err == nil || err.Error() != "ERR Error registering functions: ERR FUNCTION LOAD timeout" || !errors.Is(err, ErrTimeout) {
		t.Fatalf("LoadLibrary(loop) = %v", err)
	}
}

// A function gets KEYS and ARGV as its arguments, calls commands with the whole API, and its
// errors name it and its line, as Redis's do; the engine's time limit stops it.
func TestRunFunction(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Timeout = 200 * time.Millisecond
	e := New(cfg)
	defer e.Close()
	ks := newKeyspace()
	ks.data["k"] = []byte("v")
	run := func(name string, keys, argv [][]byte) (Value, error) {
		v, s, err := e.RunFunctionBudget(context.Background(), 0, []byte(testLib), name, keys, argv, ks)
		if s != nil {
			t.Fatalf("%s: suspended without a budget", name)
		}
		return v, err
	}
	v, err := run("pair", [][]byte{[]byte("a")}, [][]byte{[]byte("b")})
	if err != nil || v.Kind != KindArray || len(v.Array) != 2 || string(v.Array[0].Str) != "a" || string(v.Array[1].Str) != "b" {
		t.Fatalf("pair = %+v, %v", v, err)
	}
	if v, err := run("get", [][]byte{[]byte("k")}, nil); err != nil || string(v.Str) != "v" {
		t.Fatalf("get = %+v, %v", v, err)
	}
	for name, want := range map[string]string{
		"bad":  "ERR user_function:5: attempt to index a non-table object(nil) with key 'y' script: bad, on @user_function:5.",
		"keys": "ERR user_function:6: Script attempted to access nonexistent global variable 'KEYS' script: keys, on @user_function:6.",
	} {
		if _, err := run(name, nil, nil); err == nil || err.Error() != want {
			t.Errorf("%s: %v\nwant %s", name, err, want)
		}
	}
	if _, err := run("spin", nil, nil); !errors.Is(err, ErrTimeout) {
		t.Fatalf("spin: %v, want the time limit", err)
	}
	// A script run after a function still has its KEYS, and a function's globals are gone.
	if v, err := e.Run(t.Context(), []byte("return KEYS[1]"), [][]byte{[]byte("x")}, nil, ks); err != nil || string(v.Str) != "x" {
		t.Fatalf("script after a function = %+v, %v", v, err)
	}
}
