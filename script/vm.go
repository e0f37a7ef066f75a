package script

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	lua "github.com/yuin/gopher-lua"
)

// Limits of one VM. gopher-lua cannot bound the heap a script allocates; these bound its
// stacks, and the time limit bounds the rest (see Config.Timeout and the package comment).
const (
	// callStackSize bounds call depth ("stack overflow" past it): 2000 frames of 80 bytes,
	// allocated with the VM. Lua 5.1 (and so Redis) allows 20000; lock scripts use a handful.
	// (gopher-lua's growable call stack is not used: it panics instead of raising "stack
	// overflow" when full.)
	callStackSize = 2000
	// The value stack starts with registrySize slots (16 bytes each) and grows by
	// registryGrowStep up to registryMaxSize (512 KiB), "registry overflow" past that. A VM
	// keeps what it grew to, so this also bounds an idle VM's memory.
	registrySize     = 2048
	registryGrowStep = 4096
	registryMaxSize  = 32 << 10
	// maxRepBytes bounds string.rep, the one library call that allocates any size at once,
	// out of reach of the time limit (Lua 5.3's "resulting string too large").
	maxRepBytes = 64 << 20
	// maxLibBytes bounds the strings cjson.encode, cmsgpack.pack and struct.pack build: a
	// table that holds one big string many times would otherwise make them build gigabytes
	// in one call, out of reach of the time limit.
	maxLibBytes = 64 << 20
	// checkEvery is how many VM instructions run between two looks at the clock and the ctx.
	checkEvery = 1024
	// memoryEvery is how many of those looks pass between two reads of the heap's size.
	memoryEvery = 8
	// maxChunkBytes bounds the source loadstring and load compile: compiling cannot be
	// stopped by the time limit, so its size bounds its time (as maxScriptBytes bounds a
	// script's, in the server).
	maxChunkBytes = 256 << 10
)

// vm is one Lua state with raftlock's sandbox, used by one run at a time.
//
// The sandbox: a script sees _G, string, table, math, redis, bit, cjson, struct and cmsgpack
// as empty read-only proxy tables that read through to the real ones, which it can never
// reach. Writing to a proxy, by assignment, rawset, setmetatable or table.insert/remove/sort,
// raises Redis 7.0's "Attempt to modify a readonly table"; reading a global that does not
// exist raises Redis's "Script attempted to access nonexistent global variable". KEYS and
// ARGV are new tables each run, and the settings of cjson are reset. So nothing a script does
// can outlive its run, and no per-run rebuild is needed.
type vm struct {
	L       *lua.LState
	e       *Engine
	rc      runCtx
	handler *lua.LFunction // the error handler: notes where a run failed
	globals *lua.LTable    // what _G reads through to; holds the last run's KEYS and ARGV
	// backing maps each proxy to the table it shows.
	backing map[*lua.LTable]*lua.LTable
	gProxy  *lua.LTable // _G
	gMeta   *lua.LTable // what getmetatable(_G) returns: a read-only empty table
	strMeta *lua.LTable // what getmetatable("") returns: read-only {__index = string}
	nextFn  *lua.LFunction
	rng     rand48
	null    *lua.LUserData // cjson.null
	cjson   cjsonConfig    // the settings of the global cjson, reset for every run

	// The current run.
	call   Caller
	sha    string
	chunks map[string]string // loadstring's printed chunk names -> the names given
	fail   failure
	broken bool // a panic escaped the VM: its state cannot be trusted
	// killed asks the current run to stop (Engine.Kill, from another goroutine).
	killed atomic.Bool

	// Functions (function.go): the run's library and function, if it runs one; the library
	// environment; registering is set while a library's code runs.
	fn                           *fnRun
	fnProto                      *lua.FunctionProto
	registering                  bool
	libEnv, libMeta, loadGlobals *lua.LTable
}

// failure is where the error that ended a run was raised, as Redis's error handler records it.
type failure struct {
	ok     bool
	source string
	line   int
}

func newVM(e *Engine) *vm {
	L := lua.NewState(lua.Options{
		CallStackSize:    callStackSize,
		RegistrySize:     registrySize,
		RegistryGrowStep: registryGrowStep,
		RegistryMaxSize:  registryMaxSize,
		SkipOpenLibs:     true,
	})
	for _, lib := range []struct {
		name string
		open lua.LGFunction
	}{{"", lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.open))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	m := &vm{L: L, e: e, backing: make(map[*lua.LTable]*lua.LTable), chunks: make(map[string]string)}
	opened := L.G.Global
	lib := func(name string) *lua.LTable { return opened.RawGetString(name).(*lua.LTable) }
	fn := func(tb *lua.LTable, name string) *lua.LFunction { return tb.RawGetString(name).(*lua.LFunction) }

	// string: the library without gopher-lua's self-reference (string.__index), and a string
	// metatable of our own, so that ("x"):upper() works and getmetatable("") reaches no real table.
	str := copyTable(L, lib("string"))
	str.RawSetString("__index", lua.LNil)
	str.RawSetString("rep", L.NewFunction(m.strRep))
	str.RawSetString("find", L.NewFunction(m.strFind))
	str.RawSetString("match", L.NewFunction(m.strMatch))
	str.RawSetString("gmatch", L.NewFunction(m.strGmatch))
	str.RawSetString("gfind", str.RawGetString("gmatch")) // Lua 5.1's old name for it
	str.RawSetString("gsub", L.NewFunction(m.strGsub))
	str.RawSetString("format", L.NewFunction(m.strFormat(fn(str, "format").GFunction)))
	for _, name := range []string{"upper", "lower", "reverse"} {
		str.RawSetString(name, L.NewFunction(m.sameSize(fn(str, name).GFunction)))
	}
	strMT := L.CreateTable(0, 1)
	strMT.RawSetString("__index", str)
	L.SetMetatable(lua.LString(""), strMT)

	tab := copyTable(L, lib("table"))
	tab.RawSetString("sort", L.NewFunction(m.tableSort))
	for _, name := range []string{"insert", "remove", "sort"} {
		tab.RawSetString(name, L.NewFunction(m.guardFirstArg(fn(tab, name).GFunction)))
	}
	tab.RawSetString("concat", L.NewFunction(m.tableConcat(fn(tab, "concat").GFunction)))

	mth := copyTable(L, lib("math"))
	mth.RawSetString("huge", lua.LNumber(posInf)) // gopher-lua has MaxFloat64
	mth.RawSetString("random", L.NewFunction(m.mathRandom))
	mth.RawSetString("randomseed", L.NewFunction(m.mathRandomseed))

	ro := L.NewFunction(readonly)
	g := L.CreateTable(0, 32)
	m.globals = g
	m.gProxy = m.proxy(g, ro)
	m.gMeta = m.proxy(L.NewTable(), ro)
	strProxy := m.proxy(str, ro)
	strMetaShown := L.CreateTable(0, 1)
	strMetaShown.RawSetString("__index", strProxy)
	m.strMeta = m.proxy(strMetaShown, ro)

	// Lua's base library as Redis 7.0 keeps it, less gcinfo and coroutine; no print, dofile,
	// loadfile, require, module, getfenv, setfenv, newproxy, and no os, io, debug or package.
	for _, name := range []string{"assert", "ipairs", "rawequal", "select", "tonumber",
		"type", "unpack", "xpcall", "_VERSION"} {
		g.RawSetString(name, opened.RawGetString(name))
	}
	m.nextFn = L.NewFunction(m.next)
	origPCall := fn(opened, "pcall").GFunction
	origSetMT := fn(opened, "setmetatable").GFunction
	for name, f := range map[string]lua.LGFunction{
		"error":          luaError,
		"pcall":          func(L *lua.LState) int { return redisPCallWrapper(L, origPCall) },
		"getmetatable":   m.getmetatable,
		"setmetatable":   func(L *lua.LState) int { return m.setmetatable(L, origSetMT) },
		"rawget":         m.rawget,
		"rawset":         m.rawset,
		"pairs":          m.pairs,
		"loadstring":     m.loadstring,
		"load":           m.loadBounded,
		"collectgarbage": collectGarbage,
		"tostring":       tostring,
	} {
		g.RawSetString(name, L.NewFunction(f))
	}
	g.RawSetString("next", m.nextFn)
	g.RawSetString(concatName, L.NewFunction(m.concat))
	g.RawSetString("_G", m.gProxy)
	g.RawSetString("string", strProxy)
	g.RawSetString("table", m.proxy(tab, ro))
	g.RawSetString("math", m.proxy(mth, ro))
	g.RawSetString("redis", m.proxy(m.redisLib(), ro))
	// Redis's extra libraries. cjson.null is a userdata no script can change: setmetatable
	// takes only tables, and there is no debug.setmetatable.
	m.null = L.NewUserData()
	m.null.Value = cjsonNull{}
	m.cjson = defaultCJSON()
	g.RawSetString("bit", m.proxy(bitLib(L), ro))
	g.RawSetString("cjson", m.proxy(m.cjsonLib(&m.cjson), ro))
	g.RawSetString("struct", m.proxy(m.structLib(), ro))
	g.RawSetString("cmsgpack", m.proxy(m.cmsgpackLib(), ro))
	gMT := L.CreateTable(0, 1)
	gMT.RawSetString("__index", L.NewFunction(nonexistentGlobal))
	g.Metatable = gMT

	m.initFunctions(ro)

	// Chunks loaded at run time (loadstring, load) get _G as their environment.
	L.Env = m.gProxy
	m.handler = L.NewFunction(m.onError)
	// gopher-lua asks the context's Done for every instruction: runCtx is the time limit.
	L.SetContext(&m.rc)
	return m
}

func copyTable(L *lua.LState, from *lua.LTable) *lua.LTable {
	t := L.CreateTable(0, 32)
	from.ForEach(func(k, v lua.LValue) { t.RawSet(k, v) })
	return t
}

// proxy returns an empty table that reads through to real and refuses writes.
func (m *vm) proxy(real *lua.LTable, ro *lua.LFunction) *lua.LTable {
	mt := m.L.CreateTable(0, 2)
	mt.RawSetString("__index", real)
	mt.RawSetString("__newindex", ro)
	p := m.L.NewTable()
	p.Metatable = mt
	m.backing[p] = real
	return p
}

func (m *vm) readonlyArg(L *lua.LState, n int) {
	if t, ok := L.Get(n).(*lua.LTable); ok {
		if _, ok := m.backing[t]; ok {
			// Raised without a position, as Redis's VM raises it for rawset & co.
			L.Error(lua.LString("Attempt to modify a readonly table"), 0)
		}
	}
}

// guardFirstArg wraps a library function that modifies its first argument.
func (m *vm) guardFirstArg(f lua.LGFunction) lua.LGFunction {
	return func(L *lua.LState) int {
		m.readonlyArg(L, 1)
		return f(L)
	}
}

// readonly is every proxy's __newindex.
func readonly(L *lua.LState) int {
	raiseLua(L, "Attempt to modify a readonly table")
	return 0
}

// nonexistentGlobal is __index of the globals: reading an undefined global is an error.
func nonexistentGlobal(L *lua.LState) int {
	name, ok := stringish(L.Get(2))
	if !ok {
		raiseLua(L, "Second argument to luaProtectedTableError must be a string or number")
	}
	raiseLua(L, "Script attempted to access nonexistent global variable '"+name+"'")
	return 0
}

// run runs one script. The VM can run another afterwards unless rc.stop or broken is set.
func (m *vm) run(ctx context.Context, proto *lua.FunctionProto, sha string, keys, argv [][]byte, call Caller, budget time.Duration) (Value, error) {
	L := m.L
	timeout := m.e.cfg.Timeout
	if m.fn != nil && !m.fn.call {
		timeout = min(timeout, LoadTimeout)
	}
	m.rc.begin(ctx, m.e.now, timeout)
	if budget > 0 && budget < m.e.cfg.Timeout {
		m.rc.budget, m.rc.budgetEnd = budget, m.rc.deadline.Add(budget-m.e.cfg.Timeout)
	}
	m.rc.watchMemory(&m.killed, m.e.cfg.MaxMemory)
	m.call, m.sha, m.fail = call, sha, failure{}
	m.rng.reset()
	m.cjson = defaultCJSON()
	if m.fn != nil {
		// A function has no KEYS nor ARGV: they are its two arguments.
		m.globals.RawSetString("KEYS", lua.LNil)
		m.globals.RawSetString("ARGV", lua.LNil)
		m.fnProto, m.sha = proto, m.fn.name
		L.Push(L.NewFunction(m.runFunction))
	} else {
		m.globals.RawSetString("KEYS", stringTable(L, keys))
		m.globals.RawSetString("ARGV", stringTable(L, argv))
		L.Push(L.NewFunctionFromProto(proto))
	}
	err := m.pcall()
	if m.fn != nil {
		m.fnProto, m.registering = nil, false
		m.libMeta.RawSetString("__index", m.loadGlobals)
	}
	var v Value
	if err == nil {
		budget := m.e.cfg.MaxReplyBytes
		if v = toValue(L.Get(-1), 0, &budget); budget < 0 {
			m.rc.kill(&Error{Msg: "ERR the script's reply is larger than " + strconv.FormatInt(m.e.cfg.MaxReplyBytes, 10) + " bytes", Err: ErrMemory}, false)
		}
	}
	if !m.broken {
		L.SetTop(0)
	}
	// KEYS and ARGV stay until the next run replaces them: deleting them costs more than a
	// short run's VM time.
	m.call = nil
	if len(m.chunks) > 0 {
		clear(m.chunks)
	}
	if stop := m.rc.stop; stop != nil {
		if m.fn != nil && !m.fn.call {
			if errors.Is(stop.Err, ErrTimeout) {
				return Value{}, &Error{Msg: "ERR Error registering functions: ERR FUNCTION LOAD timeout", Err: ErrTimeout}
			}
			return Value{}, stop
		}
		if m.rc.where && m.fail.ok {
			return Value{}, &Error{Msg: stop.Msg + m.position(), Err: stop.Err}
		}
		return Value{}, stop
	}
	if err != nil {
		return Value{}, m.failure(err)
	}
	return v, nil
}

// tick is the time limit for Go functions that loop over a script's data (cjson, cmsgpack):
// called once per table, it stops the run as an instruction past the limit would.
func (m *vm) tick(L *lua.LState) {
	if m.rc.Done() != nil {
		L.RaiseError("%s", errKilled.Error())
	}
}

// pcall calls the function on top of the stack under the error handler. gopher-lua's PCall
// can let a panic out: it pushes the handler onto the value stack unprotected, so a script
// that filled the stack (unpack({}, 1, 1e7)) makes that push panic. The VM is then dropped.
func (m *vm) pcall() (err error) {
	defer func() {
		if r := recover(); r != nil {
			m.broken = true
			if ae, ok := r.(*lua.ApiError); ok {
				err = ae
			} else {
				err = fmt.Errorf("%v", r)
			}
		}
	}()
	return m.L.PCall(0, 1, m.handler)
}

func stringTable(L *lua.LState, items [][]byte) *lua.LTable {
	t := L.CreateTable(len(items), 0)
	for i, s := range items {
		t.RawSetInt(i+1, lua.LString(s))
	}
	return t
}

// onError is the error handler of every run, Redis's __redis__err__handler: it notes the
// position of the Lua code that raised the error (the caller's, when a library function raised
// it) and passes the error on.
func (m *vm) onError(L *lua.LState) int {
	obj := L.Get(1)
	m.fail = failure{}
	dbg, ok := L.GetStack(1)
	if ok {
		if _, err := L.GetInfo("Sl", dbg, lua.LNil); err == nil && dbg.What == "G" {
			if dbg, ok = L.GetStack(2); ok {
				_, err = L.GetInfo("Sl", dbg, lua.LNil)
				ok = err == nil
			}
		}
	}
	if ok {
		m.fail = failure{ok: true, source: m.sourceName(dbg), line: dbg.CurrentLine}
	}
	L.Push(obj)
	return 1
}

// sourceName is the chunk name Redis's handler reports (debug.getinfo's source).
func (m *vm) sourceName(dbg *lua.Debug) string {
	switch {
	case dbg.What == "G":
		return "=[C]"
	case dbg.Source == chunkName || dbg.Source == functionChunk:
		return "@" + dbg.Source
	}
	if name, ok := m.chunks[dbg.Source]; ok {
		return name
	}
	return dbg.Source
}

func (m *vm) position() string {
	return " script: " + m.sha + ", on " + m.fail.source + ":" + strconv.Itoa(m.fail.line) + "."
}

// failure builds the reply for a run that raised an error, as Redis's luaCallFunction does:
// the error table's err field, or "ERR " and the error's text, then where it was raised.
func (m *vm) failure(err error) *Error {
	var obj lua.LValue = lua.LString(err.Error())
	var ae *lua.ApiError
	if errors.As(err, &ae) {
		obj = ae.Object
	}
	msg, ok := "", false
	if t, isTable := obj.(*lua.LTable); isTable {
		msg, ok = stringish(t.RawGetString("err"))
	}
	if !ok {
		msg = "ERR " + luaString(obj)
	}
	if m.fn != nil && !m.fn.call {
		// A library's code failed at load: Redis adds no position, but says when.
		return &Error{Msg: mapCRLF("ERR Error registering functions: " + msg), Err: ErrCompile}
	}
	if !m.fail.ok {
		m.fail = positionOf(obj)
	}
	if m.fail.ok {
		msg += m.position()
	}
	return &Error{Msg: mapCRLF(msg)}
}

// positionOf finds where an error was raised from its "user_script:<line>:" prefix, for the
// errors whose handler could not run: "stack overflow", when the handler finds no room either.
func positionOf(obj lua.LValue) failure {
	s, ok := obj.(lua.LString)
	if !ok {
		return failure{}
	}
	chunk := chunkName
	rest, ok := strings.CutPrefix(string(s), chunk+":")
	if !ok {
		chunk = functionChunk
		if rest, ok = strings.CutPrefix(string(s), chunk+":"); !ok {
			return failure{}
		}
	}
	digits, _, ok := strings.Cut(rest, ":")
	line, err := strconv.Atoi(digits)
	if !ok || err != nil {
		return failure{}
	}
	return failure{ok: true, source: "@" + chunk, line: line}
}

// runCtx is the context gopher-lua runs a script under, and so the time limit: the VM calls
// Done before every instruction, and every checkEvery calls Done looks at the clock and the
// run's ctx. Once the run must stop, Done returns a closed channel, and every later
// instruction raises an error: pcall cannot keep a stopped script alive.
//
// Storing the run's ctx here is gopher-lua's design (LState.SetContext). runCtx is not a
// general-purpose context: only the VM's goroutine may call Done.
type runCtx struct {
	parent     context.Context
	parentDone <-chan struct{}
	now        func() time.Time
	timeout    time.Duration
	deadline   time.Time
	n          uint32
	// budget, when not zero, stops the run with ErrBudget at budgetEnd (RunBudget).
	budget    time.Duration
	budgetEnd time.Time
	done      chan struct{}
	stop      *Error // why the run was stopped
	where     bool   // add the script position to stop's text

	// The memory limit: killed is the VM's SCRIPT KILL flag; every memoryEvery checks the heap
	// is measured, and once it passed memNext a collection tells what the run holds: more than
	// maxMem above memBase (the live heap when it began) stops it.
	killed           *atomic.Bool
	maxMem           int64
	memBase, memNext uint64
	checks           uint32
}

var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

func (r *runCtx) begin(ctx context.Context, now func() time.Time, timeout time.Duration) {
	*r = runCtx{parent: ctx, parentDone: ctx.Done(), now: now, timeout: timeout, deadline: now().Add(timeout)}
}

func (r *runCtx) Deadline() (time.Time, bool) { return r.deadline, true }

func (r *runCtx) Done() <-chan struct{} {
	r.n++
	if r.n%checkEvery == 0 && r.done == nil {
		r.check()
	}
	return r.done
}

func (r *runCtx) Err() error {
	if r.done != nil {
		return errKilled
	}
	return nil
}

func (r *runCtx) Value(key any) any {
	if r.parent == nil {
		return nil
	}
	return r.parent.Value(key)
}

// watchMemory arms the kill flag and the memory limit of the run begin started.
func (r *runCtx) watchMemory(killed *atomic.Bool, maxMem int64) {
	live, objects := heapFigures()
	r.killed, r.maxMem, r.memBase, r.memNext = killed, maxMem, live, objects+uint64(maxMem)
}

// heapFigures is the live heap as of the last collection and the heap's objects now, garbage
// included: cheap to read (no collection, no stop of the world).
func heapFigures() (live, objects uint64) {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}, {Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64(), s[1].Value.Uint64()
}

// checkMemory stops the run if it holds more than maxMem: when the heap passed memNext, a
// collection (rare: once per maxMem of growth) tells garbage from what the run keeps.
func (r *runCtx) checkMemory() {
	if _, objects := heapFigures(); objects < r.memNext {
		return
	}
	runtime.GC()
	live, objects := heapFigures()
	if live > r.memBase+uint64(r.maxMem) {
		r.killMemory()
		return
	}
	r.memNext = objects + r.headroom(live)
}

// reserve reports whether the run may allocate n more bytes now: its live heap and n must fit
// the limit. Once the heap grew past memNext, a collection tells what the run keeps. A false
// answer has stopped the run (or it was stopped already).
func (r *runCtx) reserve(n uint64) bool {
	switch {
	case r.done != nil:
		return false
	case r.killed == nil || r.maxMem <= 0:
		return true // no limit armed (a run outside Engine.Run)
	case n > uint64(r.maxMem):
		r.killMemory()
		return false
	}
	if _, objects := heapFigures(); objects+n < r.memNext {
		return true
	}
	runtime.GC()
	live, objects := heapFigures()
	if live+n > r.memBase+uint64(r.maxMem) {
		r.killMemory()
		return false
	}
	r.memNext = objects + r.headroom(live)
	return true
}

// headroom is how far the heap may grow before the next collection: what is left of the
// limit, so that the run cannot pass it between two, but at least an eighth of the limit, so
// that a run near its limit making garbage does not collect all the time.
func (r *runCtx) headroom(live uint64) uint64 {
	limit := r.memBase + uint64(r.maxMem)
	left := uint64(0)
	if live < limit {
		left = limit - live
	}
	return max(left, uint64(r.maxMem)/8)
}

func (r *runCtx) overBudget() {
	r.kill(&Error{Msg: "ERR Script stopped: it ran longer than its budget (" + r.budget.String() + ")", Err: ErrBudget}, false)
}

func (r *runCtx) killMemory() {
	r.kill(&Error{Msg: "ERR Script killed: it used more than the script memory limit (" + strconv.FormatInt(r.maxMem>>20, 10) + " MiB)", Err: ErrMemory}, true)
}

// check stops the run if its ctx is done, its time is up, SCRIPT KILL asked, or it holds too
// much memory.
func (r *runCtx) check() {
	if r.done != nil {
		return
	}
	if r.killed != nil && r.killed.Load() {
		r.kill(&Error{Msg: "ERR Script killed by user with SCRIPT KILL...", Err: ErrKilled}, true)
		return
	}
	if r.checks++; r.maxMem > 0 && r.checks%memoryEvery == 0 {
		if r.checkMemory(); r.done != nil {
			return
		}
	}
	if r.parentDone != nil {
		select {
		case <-r.parentDone:
			err := context.Cause(r.parent) // the parent's own reason, when it gave one
			r.kill(&Error{Msg: "ERR Script killed: " + err.Error(), Err: err}, true)
			return
		default:
		}
	}
	now := r.now()
	if !now.Before(r.deadline) {
		r.kill(&Error{Msg: "ERR Script killed: it ran longer than the script time limit (" + r.timeout.String() + ")", Err: ErrTimeout}, true)
		return
	}
	if r.budget > 0 && !now.Before(r.budgetEnd) {
		r.overBudget()
	}
}

// kill stops the run with err; where adds the script position to err's text.
func (r *runCtx) kill(err *Error, where bool) {
	r.stop, r.where, r.done = err, where, closedChan
}

// rand48 is Redis's math.random generator (rand.c, the lrand48 recurrence), restarted for
// every run from the state a new Redis server starts with, so a script's "random" numbers are
// the same every time it runs (Redis 7.0 keeps the state from one script to the next).
type rand48 struct{ x uint64 }

const rand48Init = 0x1234ABCD330E // X2 X1 X0 of rand.c

func (r *rand48) reset()         { r.x = rand48Init }
func (r *rand48) seed(s int32)   { r.x = uint64(uint32(s))<<16 | 0x330E }
func (r *rand48) next() int32    { r.x = (0x5DEECE66D*r.x + 0xB) & (1<<48 - 1); return int32(r.x >> 17) }
func (r *rand48) float() float64 { return float64(r.next()%maxInt32) / maxInt32 }

const maxInt32 = 1<<31 - 1
