package script

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

var posInf = math.Inf(1)

// The redis.log levels (redis.LOG_DEBUG ...), and the slog level each is logged at.
var logLevels = [...]struct {
	name  string
	level slog.Level
}{
	{"LOG_DEBUG", slog.LevelDebug},
	{"LOG_VERBOSE", slog.LevelDebug},
	{"LOG_NOTICE", slog.LevelInfo},
	{"LOG_WARNING", slog.LevelWarn},
}

// redisLib builds the redis table: call, pcall, error_reply, status_reply, sha1hex, log and
// its levels, setresp, replicate_commands. Not provided: set_repl and REPL_* (every effect is
// replicated), breakpoint and debug (no debugger), acl_check_cmd, REDIS_VERSION(_NUM).
func (m *vm) redisLib() *lua.LTable {
	L := m.L
	t := L.CreateTable(0, 16)
	for name, f := range map[string]lua.LGFunction{
		"call":               func(L *lua.LState) int { return m.command(L, true) },
		"pcall":              func(L *lua.LState) int { return m.command(L, false) },
		"error_reply":        errorReply,
		"status_reply":       statusReply,
		"sha1hex":            sha1hexFn,
		"log":                m.log,
		"setresp":            setresp,
		"replicate_commands": func(L *lua.LState) int { L.Push(lua.LTrue); return 1 },
	} {
		t.RawSetString(name, L.NewFunction(f))
	}
	for i, l := range logLevels {
		t.RawSetString(l.name, lua.LNumber(i))
	}
	return t
}

// raise raises Redis's error table for msg (luaPushError + luaError): {err="ERR msg"}, which
// the error handler completes with the script position.
func raise(L *lua.LState, msg string) {
	L.Error(errTable(L, msg), 0)
}

// command is redis.call (raise) and redis.pcall (!raise): Redis 7.0's luaRedisGenericCommand.
func (m *vm) command(L *lua.LState, raise bool) int {
	argc := L.GetTop()
	fail := func(msg string) int {
		t := errTable(L, msg)
		if raise {
			L.Error(t, 0)
		}
		L.Push(t)
		return 1
	}
	if argc == 0 {
		return fail("Please specify at least one argument for this redis lib call")
	}
	// One allocation for all the bytes; each argument is capped so that appending to one
	// cannot overwrite the next.
	var strs [8]string
	texts := strs[:0]
	size := 0
	for i := 1; i <= argc; i++ {
		var s string
		switch v := L.Get(i).(type) {
		case lua.LString:
			s = string(v)
		case lua.LNumber:
			s = fmtG(float64(v), 17) // Redis formats numbers with %.17g, Lua with %.14g
		default:
			return fail("Lua redis lib command arguments must be strings or integers")
		}
		texts = append(texts, s)
		size += len(s)
	}
	m.reserve(L, size) // the arguments' copy (memory.go)
	buf := make([]byte, 0, size)
	args := make([][]byte, argc)
	for i, s := range texts {
		start := len(buf)
		buf = append(buf, s...)
		args[i] = buf[start:len(buf):len(buf)]
	}
	reply, err := m.invoke(args)
	if err != nil {
		m.rc.kill(&Error{Msg: mapCRLF(err.Error()), Err: err}, false)
		L.RaiseError("%s", errKilled.Error())
	}
	if m.rc.check(); m.rc.done != nil {
		L.RaiseError("%s", errKilled.Error())
	}
	lv := toLua(L, reply)
	if raise && reply.Kind == KindError {
		L.Error(lv, 0)
	}
	L.Push(lv)
	return 1
}

// invoke calls the Caller; a panic in it aborts the script instead of unwinding through the
// VM (gopher-lua would turn it into a Lua error that the script could catch).
func (m *vm) invoke(args [][]byte) (v Value, err error) {
	if m.call == nil {
		return Value{Kind: KindError, Str: []byte("ERR Unknown Redis command called from script")}, nil
	}
	defer func() {
		if r := recover(); r != nil {
			m.e.cfg.Logger.Error("script: panic in redis.call", "sha", m.sha, "panic", r, "stack", string(debug.Stack()))
			err = fmt.Errorf("ERR internal error in redis.call: %v", r)
		}
	}()
	return m.call.Call(args)
}

// errorReply is redis.error_reply(msg): it returns {err=...} (it does not raise).
func errorReply(L *lua.LState) int {
	s, ok := L.Get(1).(lua.LString)
	if L.GetTop() != 1 || !ok {
		L.Push(errTable(L, "wrong number or type of arguments"))
		return 1
	}
	msg := string(s)
	if !strings.HasPrefix(msg, "-") {
		msg = "-" + msg
	}
	L.Push(errTable(L, msg))
	return 1
}

// statusReply is redis.status_reply(msg): it returns {ok=msg}.
func statusReply(L *lua.LState) int {
	s, ok := L.Get(1).(lua.LString)
	if L.GetTop() != 1 || !ok {
		L.Push(errTable(L, "wrong number or type of arguments"))
		return 1
	}
	t := L.CreateTable(0, 1)
	t.RawSetString("ok", s)
	L.Push(t)
	return 1
}

// sha1hexFn is redis.sha1hex(s): s as lua_tolstring sees it (a number is its %.14g text,
// anything else the empty string).
func sha1hexFn(L *lua.LState) int {
	if L.GetTop() != 1 {
		raise(L, "wrong number of arguments")
	}
	s, _ := stringish(L.Get(1))
	sum := sha1.Sum([]byte(s))
	L.Push(lua.LString(hex.EncodeToString(sum[:])))
	return 1
}

// log is redis.log(level, ...): the strings and numbers after level, joined by spaces, logged
// through slog at the level's slog level (LOG_DEBUG and LOG_VERBOSE at Debug, LOG_NOTICE at
// Info, LOG_WARNING at Warn), with the script's SHA1.
func (m *vm) log(L *lua.LState) int {
	argc := L.GetTop()
	if argc < 2 {
		raise(L, "redis.log() requires two arguments or more.")
	}
	f, ok := toNumber(L.Get(1))
	if !ok {
		raise(L, "First argument must be a number (log level).")
	}
	level := int(f)
	if level < 0 || level >= len(logLevels) {
		raise(L, "Invalid debug level.")
	}
	lg := m.e.cfg.Logger
	if !lg.Enabled(m.rc.parent, logLevels[level].level) {
		return 0
	}
	var b strings.Builder
	for i := 2; i <= argc; i++ {
		// As Redis: values that are not strings or numbers are skipped, and every argument
		// after the first is preceded by a space.
		if s, ok := stringish(L.Get(i)); ok {
			if i != 2 {
				b.WriteByte(' ')
			}
			b.WriteString(s)
		}
	}
	ctx := m.rc.parent
	if ctx == nil {
		ctx = context.Background()
	}
	lg.LogAttrs(ctx, logLevels[level].level, "redis.log", slog.String("text", b.String()), slog.String("sha", m.sha))
	return 0
}

// setresp is redis.setresp(2|3). Scripts speak RESP2 only: setresp(2) is accepted and does
// nothing, setresp(3) raises an error (with RESP3, nulls would reach the script as nil, and
// maps, sets, doubles and booleans as tables the server does not produce).
func setresp(L *lua.LState) int {
	if L.GetTop() != 1 {
		raise(L, "redis.setresp() requires one argument.")
	}
	f, _ := toNumber(L.Get(1))
	switch int(f) {
	case 2:
		return 0
	case 3:
		raise(L, "raftlock scripts speak RESP2 only: redis.setresp(3) is not supported")
	}
	raise(L, "RESP version must be 2 or 3.")
	return 0
}

// raiseLua raises msg as luaL_error does: prefixed with the position of the Lua code that
// called the running Go function, or with nothing if a Go function called it (gopher-lua's
// RaiseError looks past Go functions).
func raiseLua(L *lua.LState, msg string) {
	L.Error(lua.LString(where(L, 1)+msg), 0)
}

// luaError is Lua's error(value [, level]), with Lua 5.1's positions: gopher-lua's error puts
// level 2 at the wrong frame and gives numbers no position.
func luaError(L *lua.LState) int {
	obj := L.Get(1)
	level := L.OptInt(2, 1)
	if s, ok := stringish(obj); ok && level > 0 {
		obj = lua.LString(where(L, level) + s)
	}
	L.Error(obj, 0)
	return 0
}

// where is luaL_where: "chunk:line:" of the function level calls up from the running Go
// function (level 1: the function that called it), or "" if that is not Lua code.
func where(L *lua.LState, level int) string {
	dbg, ok := L.GetStack(level)
	if !ok {
		return ""
	}
	if _, err := L.GetInfo("Sl", dbg, lua.LNil); err != nil || dbg.What == "G" || dbg.CurrentLine <= 0 {
		return ""
	}
	return fmt.Sprintf("%s:%d: ", dbg.Source, dbg.CurrentLine)
}

// redisPCallWrapper is pcall as Redis 7.0 replaces it (luaRedisPcall): when the error caught is
// an error table, pcall returns its err field instead, so that
// local ok, err = pcall(redis.call, ...) gives a string.
func redisPCallWrapper(L *lua.LState, pcall lua.LGFunction) int {
	if L.GetTop() == 0 {
		// Redis calls its result placeholder (true) in this case.
		L.Push(lua.LFalse)
		L.Push(lua.LString("attempt to call a boolean value"))
		return 2
	}
	n := pcall(L)
	if n == 2 && L.Get(-2) == lua.LFalse {
		if t, ok := L.Get(-1).(*lua.LTable); ok {
			switch e := t.RawGetString("err").(type) {
			case lua.LString, lua.LNumber:
				L.Replace(-1, e)
			}
		}
	}
	return n
}

// getmetatable hides the real tables behind the proxies: getmetatable(_G) is a read-only
// table (Redis's _G has a metatable), the libraries have none, and a string's metatable is a
// read-only {__index = string}.
func (m *vm) getmetatable(L *lua.LState) int {
	obj := L.CheckAny(1)
	switch v := obj.(type) {
	case lua.LString:
		L.Push(m.strMeta)
		return 1
	case *lua.LTable:
		if _, ok := m.backing[v]; ok {
			if v == m.gProxy {
				L.Push(m.gMeta)
			} else {
				L.Push(lua.LNil)
			}
			return 1
		}
	}
	L.Push(L.GetMetatable(obj))
	return 1
}

// setmetatable is Lua 5.1's: it takes a table only (gopher-lua's also sets the metatable of
// a userdata, or of all numbers, strings or functions, which would outlive the run), and
// refuses the read-only ones.
func (m *vm) setmetatable(L *lua.LState, orig lua.LGFunction) int {
	if _, ok := L.Get(1).(*lua.LTable); !ok {
		typeError(L, 1, "table")
	}
	switch L.Get(2).(type) {
	case *lua.LNilType, *lua.LTable:
	default:
		argError(L, 2, "nil or table expected")
	}
	if L.GetTop() < 2 {
		argError(L, 2, "nil or table expected")
	}
	m.readonlyArg(L, 1)
	return orig(L)
}

// rawget reads a proxy's real table, so that rawget(_G, "redis") works.
func (m *vm) rawget(L *lua.LState) int {
	t := L.CheckTable(1)
	key := L.CheckAny(2)
	if real, ok := m.backing[t]; ok {
		t = real
	}
	L.Push(t.RawGet(key))
	return 1
}

func (m *vm) rawset(L *lua.LState) int {
	t := L.CheckTable(1)
	L.CheckAny(2)
	L.CheckAny(3)
	m.readonlyArg(L, 1)
	L.RawSet(t, L.Get(2), L.Get(3))
	L.Push(t)
	return 1
}

// next and pairs walk a proxy's real table, so that pairs(_G) and pairs(string) list them.
func (m *vm) next(L *lua.LState) int {
	t := L.CheckTable(1)
	if real, ok := m.backing[t]; ok {
		t = real
	}
	k, v := t.Next(L.Get(2))
	if k == lua.LString(concatName) && t == m.globals {
		k, v = t.Next(k) // the .. operator's function is no global to list
	}
	if k == lua.LNil {
		L.Push(lua.LNil)
		return 1
	}
	L.Push(k)
	L.Push(v)
	return 2
}

func (m *vm) pairs(L *lua.LState) int {
	t := L.CheckTable(1)
	L.Push(m.nextFn)
	L.Push(t)
	L.Push(lua.LNil)
	return 3
}

// loadstring(s [, chunkname]) compiles s with _G as its environment. It can only load source
// (gopher-lua has no bytecode loader; Redis 7.0 refuses bytecode too). Chunks are named as in
// Lua 5.1 ([string "..."]) in error messages.
func (m *vm) loadstring(L *lua.LState) int {
	s := L.CheckString(1)
	if len(s) > maxChunkBytes {
		L.Push(lua.LNil)
		L.Push(lua.LString(chunkTooLarge))
		return 2
	}
	return m.pushChunk(L, []byte(s), L.OptString(2, s))
}

// pushChunk compiles src as the chunk name (loadstring, load) and pushes its function, or nil
// and the compile error. A heavy chunk is not compiled holding the node's view.
func (m *vm) pushChunk(L *lua.LState, src []byte, name string) int {
	if len(src) > heavyChunk {
		m.notHoldingView(L)
	}
	display := chunkID(name)
	proto, msg := compileChunk(src, display)
	if msg != "" {
		L.Push(lua.LNil)
		L.Push(lua.LString(msg))
		return 2
	}
	m.chunks[display] = name
	L.Push(L.NewFunctionFromProto(proto))
	return 1
}

// chunkTooLarge is what loadstring and load return for a chunk past maxChunkBytes.
var chunkTooLarge = "chunk too large: loadstring and load compile at most " + strconv.Itoa(maxChunkBytes) + " bytes"

// loadBounded is load(func [, chunkname]) with at most maxChunkBytes of source: it reads the
// pieces itself (each call of the reader runs under the time limit), then compiles them as
// loadstring does (so that their .. is charged too: memory.go). As Lua 5.1, the chunk is named
// "=(load)" when no name is given.
func (m *vm) loadBounded(L *lua.LState) int {
	fn := L.CheckFunction(1)
	name := L.OptString(2, "=(load)")
	top := L.GetTop()
	var src strings.Builder
	for {
		L.SetTop(top)
		L.Push(fn)
		L.Call(0, 1)
		piece := L.Get(-1)
		L.Pop(1)
		if piece == lua.LNil {
			break
		}
		if !lua.LVCanConvToString(piece) {
			L.Push(lua.LNil)
			L.Push(lua.LString("reader function must return a string"))
			return 2
		}
		s := piece.String()
		if s == "" {
			break
		}
		if src.Len()+len(s) > maxChunkBytes {
			L.Push(lua.LNil)
			L.Push(lua.LString(chunkTooLarge))
			return 2
		}
		src.WriteString(s)
	}
	L.SetTop(top)
	return m.pushChunk(L, []byte(src.String()), name)
}

// chunkID is Lua 5.1's luaO_chunkid: how a chunk name is printed in error messages.
func chunkID(source string) string {
	const idSize = 80 // Redis's LUA_IDSIZE (measured: it prints 63 bytes of a [string])
	switch {
	case strings.HasPrefix(source, "="):
		s := source[1:]
		if len(s) > idSize-1 {
			s = s[:idSize-1]
		}
		return s
	case strings.HasPrefix(source, "@"):
		s, max := source[1:], idSize-len(" '...' ")-1
		if len(s) > max {
			s = "..." + s[len(s)-max:]
		}
		return s
	}
	max := idSize - len(` [string "..."] `) - 1
	n := strings.IndexAny(source, "\r\n")
	if n < 0 {
		n = len(source)
	}
	if n > max {
		n = max
	}
	if n < len(source) {
		return `[string "` + source[:n] + `..."]`
	}
	return `[string "` + source + `"]`
}

// tostring prints numbers as Lua 5.1 does, with %.14g (gopher-lua's would print Go's
// shortest form: 0.11108528222473585 for Redis's 0.11108528222474). The ".." operator still
// uses gopher-lua's form.
func tostring(L *lua.LState) int {
	v := L.CheckAny(1)
	if n, ok := v.(lua.LNumber); ok {
		L.Push(lua.LString(fmtG(float64(n), 14)))
		return 1
	}
	if isCJSONNull(v) {
		// Lua's "%p" of the NULL light userdata, as glibc prints it.
		L.Push(lua.LString("userdata: (nil)"))
		return 1
	}
	L.Push(lua.LString(L.ToStringMeta(v).String()))
	return 1
}

// collectGarbage is collectgarbage: a no-op returning 0. The real one would run the Go
// collector for the whole process (gopher-lua calls runtime.GC).
func collectGarbage(L *lua.LState) int {
	L.Push(lua.LNumber(0))
	return 1
}

// mathRandom is Redis's math.random (its lmathlib.c, on rand48).
func (m *vm) mathRandom(L *lua.LState) int {
	r := m.rng.float()
	switch L.GetTop() {
	case 0:
		L.Push(lua.LNumber(r))
	case 1:
		u := int64(L.CheckNumber(1))
		if u < 1 {
			raiseLua(L, "bad argument #1 to 'random' (interval is empty)")
		}
		L.Push(lua.LNumber(math.Floor(r*float64(u)) + 1))
	case 2:
		l, u := int64(L.CheckNumber(1)), int64(L.CheckNumber(2))
		if l > u {
			raiseLua(L, "bad argument #2 to 'random' (interval is empty)")
		}
		L.Push(lua.LNumber(math.Floor(r*float64(u-l+1)) + float64(l)))
	default:
		raiseLua(L, "wrong number of arguments")
	}
	return 1
}

func (m *vm) mathRandomseed(L *lua.LState) int {
	m.rng.seed(int32(int64(L.CheckNumber(1))))
	return 0
}
