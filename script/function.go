package script

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// Functions (Redis 7's FUNCTION LOAD and FCALL). A library is a source whose first line is
// "#!lua name=<library>"; running its code registers functions with redis.register_function.
// Redis runs a library's code once, at load, and keeps the functions it registered in its one
// Lua state. Here a run takes any VM of the pool, so a library's code runs at the start of each
// FCALL, in the restricted environment Redis gives it at load (only redis.register_function,
// redis.log and the log levels), and the function it registered under the name called then
// runs with the whole API, as in Redis: the globals read through to the library environment
// while the code registers, and to the script globals while a function runs. So a library's
// upvalues do not outlive a call (in Redis they last until the library is loaded again), and
// every node computes the same replies from the same replicated source.

// functionChunk is the name libraries are compiled under ("@user_function" in Redis).
const functionChunk = "user_function"

// LoadTimeout bounds a library's code at FUNCTION LOAD, Redis's 500 ms.
const LoadTimeout = 500 * time.Millisecond

// Function is one function a library registers.
type Function struct {
	Name        string
	Description string // "" when none was given
	Flags       Flags  // FlagNoWrites and the other flags of redis.register_function's flags
}

// Library is what a library's code registered, in the order it registered it.
type Library struct {
	Name      string
	Functions []Function
}

// FlagNames returns the names of the flags in f, in Redis's order (FUNCTION LIST).
func FlagNames(f Flags) []string {
	var out []string
	for _, n := range flagNames {
		if f&n.flag != 0 {
			out = append(out, n.name)
		}
	}
	return out
}

// ValidName reports whether name may name a library or a function, as Redis's
// functionsVerifyName: letters, digits and underscores, at least one.
func ValidName(name string) bool {
	if name == "" {
		return false
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// errInvalidName is Redis's text for a library or a function name ValidName refuses (it says
// "Library" for both).
const errInvalidName = "Library names can only contain letters, numbers, or underscores(_) and must be at least one character long"

func libError(msg string) *Error { return &Error{Msg: "ERR " + msg, Err: ErrCompile} }

// LibraryName reads a library's shebang line, "#!<engine> name=<name>", with Redis 7.0's
// rules and error texts (functionExtractLibMetaData, then the engine and the name checks of
// functionsCreateWithLibraryCtx). The engine is Lua's, in any case.
func LibraryName(src []byte) (string, error) {
	name, _, err := libraryHeader(src)
	return name, err
}

// libraryHeader returns the library's name and the length of its shebang line (without its
// line feed).
func libraryHeader(src []byte) (string, int, error) {
	if !bytes.HasPrefix(src, []byte("#!")) {
		return "", 0, libError("Missing library metadata")
	}
	end := bytes.IndexByte(src, '\n')
	if end < 0 {
		return "", 0, libError("Invalid library metadata")
	}
	parts := strings.Split(string(src[2:end]), " ")
	engine, name, named := parts[0], "", false
	for _, p := range parts[1:] {
		v, ok := strings.CutPrefix(p, "name=")
		if !ok {
			return "", 0, libError("Invalid metadata value given: " + p)
		}
		if named {
			return "", 0, libError("Invalid metadata value, name argument was given multiple times")
		}
		name, named = v, true
	}
	switch {
	case !named:
		return "", 0, libError("Library name was not given")
	case !strings.EqualFold(engine, "lua"):
		return "", 0, libError("Engine '" + engine + "' not found")
	case !ValidName(name):
		return "", 0, libError(errInvalidName)
	}
	return name, end, nil
}

// compileLibrary compiles a library's code (after its shebang line, whose line feed it keeps
// so that line numbers stay the user's).
func compileLibrary(src []byte) (*lua.FunctionProto, error) {
	_, n, err := libraryHeader(src)
	if err != nil {
		return nil, err
	}
	proto, msg := compileChunk(src[n:], functionChunk)
	if msg != "" {
		return nil, &Error{Msg: mapCRLF("ERR Error compiling function: " + msg), Err: ErrCompile}
	}
	return proto, nil
}

// fnRun is what a VM runs instead of a script: a library's code, then (call) one of the
// functions it registered.
type fnRun struct {
	call bool
	name string // the function to call
	// lib is what the code registered, filled in by the run.
	lib        Library
	callbacks  []*lua.LFunction
	keys, argv [][]byte
}

// LoadLibrary runs a library's code as FUNCTION LOAD does, within LoadTimeout (or ctx), and
// returns what it registered. Its errors are *Errors with Redis's texts ("ERR Error
// registering functions: ...", "ERR No functions registered").
func (e *Engine) LoadLibrary(ctx context.Context, src []byte) (*Library, error) {
	name, _, err := libraryHeader(src)
	if err != nil {
		return nil, err
	}
	f := &fnRun{}
	if _, err := e.runBudget(ctx, 0, src, nil, nil, nil, nil, nil, f); err != nil {
		e.countFailure(err)
		return nil, err
	}
	e.stats.runs.Add(1)
	if len(f.lib.Functions) == 0 {
		return nil, libError("No functions registered")
	}
	f.lib.Name = name
	return &f.lib, nil
}

// RunFunctionBudget is RunBudget for the function name of the library src (FCALL): the
// library's code runs, then the function, with keys and argv as its two arguments. A function
// the code does not register is an *Error, "ERR Function not found".
func (e *Engine) RunFunctionBudget(ctx context.Context, budget time.Duration, src []byte, name string, keys, argv [][]byte, call Caller) (Value, *Suspended, error) {
	var s *Suspended
	f := &fnRun{call: true, name: name, keys: keys, argv: argv}
	v, err := e.runBudget(ctx, budget, src, keys, argv, call, nil, &s, f)
	if errors.Is(err, ErrBudget) {
		e.stats.overBudget.Add(1)
		return v, s, err
	}
	e.count(err)
	return v, nil, err
}

// RunFunction runs the function again (as RunFunctionBudget, without a budget): see Run.
func (s *Suspended) RunFunction(ctx context.Context, src []byte, name string, keys, argv [][]byte, call Caller) (Value, error) {
	f := &fnRun{call: true, name: name, keys: keys, argv: argv}
	v, err := s.e.runBudget(ctx, 0, src, keys, argv, call, s, nil, f)
	s.e.count(err)
	return v, err
}

// CompileLibrary compiles a library and keeps it for its calls, as Compile does a script.
func (e *Engine) CompileLibrary(src []byte) error {
	if e.isClosed() {
		return errEngineClosed
	}
	_, err := e.loadLibrary(src)
	return err
}

// loadLibrary returns a library's code compiled, from the cache or compiled now.
func (e *Engine) loadLibrary(src []byte) (*cached, error) {
	if c, ok := e.libs.get(src); ok {
		e.stats.hits.Add(1)
		return c, nil
	}
	proto, err := compileLibrary(src)
	if err != nil {
		return nil, err
	}
	e.stats.compiles.Add(1)
	c := &cached{src: string(src), sha: SHA1Hex(src), proto: proto}
	e.libs.put(c)
	return c, nil
}

// initFunctions makes the VM's library environment: libEnv, every library's globals, reads
// through libMeta's __index to loadGlobals while a library registers and to the script
// globals while one of its functions runs; it refuses writes as the globals do.
func (m *vm) initFunctions(ro *lua.LFunction) {
	L := m.L
	api := L.CreateTable(0, 8)
	api.RawSetString("register_function", L.NewFunction(m.registerFunction))
	api.RawSetString("log", L.NewFunction(m.log))
	for i, l := range logLevels {
		api.RawSetString(l.name, lua.LNumber(i))
	}
	missing := L.CreateTable(0, 1)
	missing.RawSetString("__index", L.NewFunction(nonexistentGlobal))
	api.Metatable = missing
	lg := L.CreateTable(0, 1)
	lg.RawSetString("redis", m.proxy(api, ro))
	lg.Metatable = missing
	m.loadGlobals = lg
	m.libMeta = L.CreateTable(0, 2)
	m.libMeta.RawSetString("__index", lg)
	m.libMeta.RawSetString("__newindex", ro)
	m.libEnv = L.NewTable()
	m.libEnv.Metatable = m.libMeta
	m.backing[m.libEnv] = lg
}

// runFunction is the Lua function a VM runs for a fnRun: the library's code in the library
// environment, then, for a call, the function it registered under the name called.
func (m *vm) runFunction(L *lua.LState) int {
	f := m.fn
	m.libMeta.RawSetString("__index", m.loadGlobals)
	code := L.NewFunctionFromProto(m.fnProto)
	code.Env = m.libEnv
	L.Push(code)
	m.registering = true
	L.Call(0, 0)
	m.registering = false
	m.libMeta.RawSetString("__index", m.globals)
	if !f.call {
		return 0
	}
	for i, fn := range f.lib.Functions {
		if fn.Name == f.name {
			L.Push(f.callbacks[i])
			L.Push(stringTable(L, f.keys))
			L.Push(stringTable(L, f.argv))
			L.Call(2, 1)
			return 1
		}
	}
	L.Error(errTable(L, "Function not found"), 0)
	return 0
}

// registerFunction is redis.register_function, Redis 7.0's luaRegisterFunction: (name,
// callback) or a table of named arguments (function_name, callback, description, flags).
func (m *vm) registerFunction(L *lua.LState) int {
	f := m.fn
	if f == nil || !m.registering {
		raise(L, "redis.register_function can only be called on FUNCTION LOAD command")
	}
	var fn Function
	var cb *lua.LFunction
	switch L.GetTop() {
	case 1:
		t, ok := L.Get(1).(*lua.LTable)
		if !ok {
			raise(L, "calling redis.register_function with a single argument is only applicable to Lua table (representing named arguments).")
		}
		named := false
		for k, v := t.Next(lua.LNil); k != lua.LNil; k, v = t.Next(k) {
			key, ok := stringish(k) // lua_isstring: a number is one
			if !ok {
				raise(L, "named argument key given to redis.register_function is not a string")
			}
			switch key {
			case "function_name":
				if fn.Name, ok = stringish(v); !ok {
					raise(L, "function_name argument given to redis.register_function must be a string")
				}
				named = true
			case "description":
				if fn.Description, ok = stringish(v); !ok {
					raise(L, "description argument given to redis.register_function must be a string")
				}
			case "callback":
				if cb, ok = v.(*lua.LFunction); !ok {
					raise(L, "callback argument given to redis.register_function must be a function")
				}
			case "flags":
				ft, ok := v.(*lua.LTable)
				if !ok {
					raise(L, "flags argument to redis.register_function must be a table representing function flags")
				}
				fn.Flags = m.functionFlags(L, ft)
			default:
				raise(L, "unknown argument given to redis.register_function")
			}
		}
		if !named {
			raise(L, "redis.register_function must get a function name argument")
		}
		if cb == nil {
			raise(L, "redis.register_function must get a callback argument")
		}
	case 2:
		var ok bool
		if fn.Name, ok = stringish(L.Get(1)); !ok {
			raise(L, "first argument to redis.register_function must be a string")
		}
		if cb, ok = L.Get(2).(*lua.LFunction); !ok {
			raise(L, "second argument to redis.register_function must be a function")
		}
	default:
		raise(L, "wrong number of arguments to redis.register_function")
	}
	if !ValidName(fn.Name) {
		raise(L, errInvalidName)
	}
	for _, g := range f.lib.Functions {
		if g.Name == fn.Name {
			raise(L, "Function already exists in the library")
		}
	}
	if len(f.lib.Functions) >= MaxLibraryFunctions {
		raise(L, "a library registers at most "+itoa(MaxLibraryFunctions)+" functions in raftlock")
	}
	f.lib.Functions = append(f.lib.Functions, fn)
	f.callbacks = append(f.callbacks, cb)
	return 0
}

// MaxLibraryFunctions bounds the functions one library registers.
const MaxLibraryFunctions = 1000

func itoa(n int) string { return fmtG(float64(n), 17) }

// functionFlags reads register_function's flags table: each value one of Redis's flag names.
func (m *vm) functionFlags(L *lua.LState, t *lua.LTable) Flags {
	var flags Flags
	for k, v := t.Next(lua.LNil); k != lua.LNil; k, v = t.Next(k) {
		name, ok := stringish(v)
		found := false
		for _, f := range flagNames {
			if ok && f.name == name {
				flags |= f.flag
				found = true
			}
		}
		if !found {
			raise(L, "unknown flag given")
		}
	}
	return flags
}
