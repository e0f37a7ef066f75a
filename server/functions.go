package server

// Functions: FUNCTION LOAD|DELETE|FLUSH|LIST|DUMP|RESTORE|STATS|KILL|HELP, FCALL and FCALL_RO
// (Redis 7.0). A library's source is replicated through the log (fsm.KindStoreLibrary), as a
// script's is, so every node has every library, after a failover and a restart too. What a
// library registers is learnt by running its code (script.Engine.LoadLibrary) on the node that
// needs it, the first time it does (functionRegistry). FCALL runs like EVAL (scripting.go): on
// the leader's view, within the script limits, its writes guarded commands.

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/script"
)

// librariesKey is the key every change of the libraries marks as in flight (with a no-op
// command that carries it), and that FUNCTION LOAD, DELETE, FLUSH and RESTORE wait on: one
// change is evaluated against the libraries the previous one left, so that two loads cannot
// both register a function of the same name. Its first byte is no database's, so it is no
// table key.
var librariesKey = []byte("\xfflibraries")

// librariesMark is the no-op command that marks librariesKey.
func librariesMark() fsm.Command { return fsm.Command{Kind: fsm.KindNoop, Key: librariesKey} }

// Default bounds of the libraries (ScriptLimits).
const (
	defaultLibraries     = 1000
	defaultLibraryBytes  = 64 << 20
	defaultFunctionCount = 10000
)

// libraryLimits returns the bounds of the libraries, defaults for zero fields.
func libraryLimits(l ScriptLimits) (libs, bytes, functions int) {
	libs, bytes, functions = l.Libraries, l.LibraryBytes, l.Functions
	if libs <= 0 {
		libs = defaultLibraries
	}
	if bytes <= 0 {
		bytes = defaultLibraryBytes
	}
	if functions <= 0 {
		functions = defaultFunctionCount
	}
	return libs, bytes, functions
}

// functionRegistry is what this node knows of the stored libraries: what each registered
// (keyed by its source), and which library has each function, for one fsm.Libraries (which
// every change replaces, so its identity says whether the index is current).
type functionRegistry struct {
	mu struct {
		sync.Mutex
		libs   *fsm.Libraries
		index  map[string]fnEntry
		loaded map[string]*script.Library
		// running are the functions running now (FUNCTION STATS).
		running map[*fnRunning]struct{}
	}
}

// fnEntry is one function of a stored library.
type fnEntry struct {
	lib string // the library's name
	src string // its source
	fn  script.Function
}

// fnRunning is one FCALL running, for FUNCTION STATS.
type fnRunning struct {
	name  string
	args  [][]byte
	start time.Time
}

// functionIndex returns the functions of libs by name (lowercase: FCALL's names ignore
// case, as Redis's), and what each library registered by its
// source. A library this node has not run yet runs now (LoadLibrary): one whose code fails
// here (it ran past its time on a slower node) is left out, with a warning.
func (s *Server) functionIndex(libs *fsm.Libraries) (map[string]fnEntry, map[string]*script.Library) {
	fr := &s.functions
	fr.mu.Lock()
	if fr.mu.libs == libs {
		index, loaded := fr.mu.index, fr.mu.loaded
		fr.mu.Unlock()
		return index, loaded
	}
	old := fr.mu.loaded
	fr.mu.Unlock()
	loaded := make(map[string]*script.Library, libs.Len())
	index := map[string]fnEntry{}
	for _, name := range libs.Names() {
		src, _ := libs.Get(name)
		lib, ok := old[src]
		if !ok {
			var err error
			if lib, err = s.scripts.LoadLibrary(s.ctx, []byte(src)); err != nil {
				s.log.Warn("a stored function library does not load on this node", "library", name, "err", err)
				continue
			}
		}
		loaded[src] = lib
		for _, f := range lib.Functions {
			index[strings.ToLower(f.Name)] = fnEntry{lib: name, src: src, fn: f}
		}
	}
	fr.mu.Lock()
	fr.mu.libs, fr.mu.index, fr.mu.loaded = libs, index, loaded
	fr.mu.Unlock()
	return index, loaded
}

// warmFunctions learns what the stored libraries register before an evaluation that needs it
// takes the view lock: running a library's code can take up to its load time limit. Inside
// MULTI/EXEC, which holds the view lock already, it does nothing.
func (r *request) warmFunctions() {
	if r.path == onScript {
		return
	}
	var libs *fsm.Libraries
	r.s.node.ExecLocal(func(v node.View) { libs = v.Libraries() })
	r.s.functionIndex(libs)
}

func (fr *functionRegistry) begin(name string, args [][]byte) *fnRunning {
	// A copy: FUNCTION STATS reads them from another connection, and the caller's arguments live
	// in its connection's read buffer, reused once the call ends.
	args = slices.Clone(args)
	for i, a := range args {
		args[i] = slices.Clone(a)
	}
	f := &fnRunning{name: name, args: args, start: time.Now()}
	fr.mu.Lock()
	if fr.mu.running == nil {
		fr.mu.running = map[*fnRunning]struct{}{}
	}
	fr.mu.running[f] = struct{}{}
	fr.mu.Unlock()
	return f
}

func (fr *functionRegistry) end(f *fnRunning) {
	fr.mu.Lock()
	delete(fr.mu.running, f)
	fr.mu.Unlock()
}

// oldestRunning is the function that has run longest now, nil if none.
func (fr *functionRegistry) oldestRunning() *fnRunning {
	fr.mu.Lock()
	defer fr.mu.Unlock()
	var oldest *fnRunning
	for f := range fr.mu.running {
		if oldest == nil || f.start.Before(oldest.start) {
			oldest = f
		}
	}
	return oldest
}

func cmdFCall(r *request)   { r.runHalves(fcallHalves(r, false)) }
func cmdFCallRO(r *request) { r.runHalves(fcallHalves(r, true)) }

// fcallHalves is FCALL and FCALL_RO function numkeys key... arg...: EVAL's halves
// (evalHalves), running a function of a stored library instead of a script.
func fcallHalves(r *request, readOnly bool) ([][]byte, node.Eval, finishFunc) {
	if r.path == onScript && !r.script.tx {
		r.w.Error("ERR This Redis command is not allowed from script")
		return nil, nil, nil
	}
	r.warmFunctions()
	numkeys, ok := parseInt(r.args[2])
	bad := ""
	switch {
	case !ok:
		bad = "ERR Bad number of keys provided"
	case numkeys < 0:
		bad = "ERR Number of keys can't be negative"
	case numkeys > int64(len(r.args)-3):
		bad = "ERR Number of keys can't be greater than number of args"
	}
	if bad != "" {
		// Redis looks the function up first.
		found := false
		_, err := r.exec(nil, func(v node.View) []fsm.Command {
			index, _ := r.s.functionIndex(v.Libraries())
			_, found = index[lower(r.args[1])]
			return nil
		})
		switch {
		case err != nil:
			r.replyError(err)
		case !found:
			r.w.Error("ERR Function not found")
		default:
			r.w.Error(bad)
		}
		return nil, nil, nil
	}
	e := &evalCall{r: r, readOnly: readOnly, fn: lower(r.args[1]), keys: r.args[3 : 3+numkeys], argv: r.args[3+numkeys:]}
	e.tableKeys = dbKeys(r.db, e.keys)
	return e.tableKeys, e.eval, e.finish
}

// resolveFunction finds the function an FCALL names in v's libraries, and refuses it as Redis
// does: an unknown one, or one without no-writes called by FCALL_RO. It returns the library's
// source and whether the run is read-only.
func (e *evalCall) resolveFunction(v node.View) (src []byte, readOnly bool, refused string) {
	index, _ := e.r.s.functionIndex(v.Libraries())
	f, ok := index[strings.ToLower(e.fn)] // names are looked up as Redis does, ignoring case
	if ok {
		e.fn = f.fn.Name // and run, and shown by FUNCTION STATS, as registered
	}
	switch {
	case !ok:
		return nil, false, "ERR Function not found"
	case e.readOnly && f.fn.Flags&script.FlagNoWrites == 0:
		return nil, false, "ERR Can not execute a script with write flag using *_ro command."
	}
	// The stored source, read in place: the engine only reads it (a library it compiles keeps
	// a copy), and the libraries' strings never change.
	return unsafe.Slice(unsafe.StringData(f.src), len(f.src)), e.readOnly || f.fn.Flags&script.FlagNoWrites != 0, ""
}

// functionHelp is FUNCTION HELP's text, Redis 7.0's.
var functionHelp = []string{
	"LOAD [REPLACE] <FUNCTION CODE>",
	"    Create a new library with the given library name and code.",
	"DELETE <LIBRARY NAME>",
	"    Delete the given library.",
	"LIST [LIBRARYNAME PATTERN] [WITHCODE]",
	"    Return general information on all the libraries:",
	"    * Library name",
	"    * The engine used to run the Library",
	"    * Library description",
	"    * Functions list",
	"    * Library code (if WITHCODE is given)",
	"    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
	"STATS",
	"    Return information about the current function running:",
	"    * Function name",
	"    * Command used to run the function",
	"    * Duration in MS that the function is running",
	"    If no function is running, return nil",
	"    In addition, returns a list of available engines.",
	"KILL",
	"    Kill the current running function.",
	"FLUSH [ASYNC|SYNC]",
	"    Delete all the libraries.",
	"    When called without the optional mode argument, the behavior is determined by the",
	"    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
	"    * ASYNC: Asynchronously flush the libraries.",
	"    * SYNC: Synchronously flush the libraries.",
	"DUMP",
	"    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
	"RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
	"    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
	"    control how to handle existing libraries (default APPEND):",
	"    * FLUSH: delete all existing libraries.",
	"    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
	"    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
	"      libraries with the new libraries (notice that even on this option there is a chance of failure",
	"      in case of functions name collision with another library).",
}

// functionArity is the arity of each FUNCTION subcommand, Redis 7.0's.
var functionArity = map[string]int{
	"delete": 3, "dump": 2, "flush": -2, "help": 2, "kill": 2, "list": -2, "load": -3, "restore": -3, "stats": 2,
}

// FUNCTION subcommand ...
func cmdFunction(r *request) {
	sub := lower(r.args[1])
	arity, known := functionArity[sub]
	switch {
	case !known:
		r.w.Error("ERR unknown subcommand '" + string(appendSanitized(nil, r.args[1], 128)) + "'. Try FUNCTION HELP.")
		return
	case !arityOK(arity, len(r.args)):
		r.w.Error("ERR wrong number of arguments for 'function|" + sub + "' command")
		return
	case r.spans && !r.pinned && r.path != onScript:
		r.acrossGroups()
		return
	}
	switch sub {
	case "load":
		functionLoad(r)
	case "delete":
		functionDelete(r)
	case "flush":
		functionFlush(r)
	case "list":
		functionList(r)
	case "dump":
		functionDump(r)
	case "restore":
		functionRestore(r)
	case "stats":
		functionStats(r)
	case "kill":
		// As SCRIPT KILL: it needs no view, the function it stops holds it. It stops scripts
		// too (one engine runs both).
		if r.s.scripts.Kill() == 0 {
			r.w.Error("NOTBUSY No scripts in execution right now.")
			return
		}
		r.w.SimpleString("OK")
	case "help":
		r.writeHelp("FUNCTION", functionHelp)
	}
}

// syntaxError is Redis's addReplySubcommandSyntaxError.
func (r *request) syntaxError(container string) {
	r.w.Error("ERR unknown subcommand or wrong number of arguments for '" + string(appendSanitized(nil, r.args[1], 128)) +
		"'. Try " + container + " HELP.")
}

// loadedLibrary is a library FUNCTION LOAD or RESTORE ran: its source and what it registered,
// or why it did not load.
type loadedLibrary struct {
	name string
	src  []byte
	lib  *script.Library
	err  error
}

// loadLibrary checks and runs a library's code, outside the view lock.
func (r *request) loadLibrary(src []byte) loadedLibrary {
	l := loadedLibrary{src: src}
	if len(src) > maxScriptBytes {
		l.err = errString("ERR library too large: raftlock libraries are at most " + itoa(maxScriptBytes) + " bytes")
		return l
	}
	if l.name, l.err = script.LibraryName(src); l.err != nil {
		return l
	}
	if l.err = r.s.scripts.CompileLibrary(src); l.err != nil {
		return l
	}
	// Inside MULTI/EXEC it runs holding the view lock: within the transaction's script time.
	ctx := r.c.ctx
	if r.path == onScript && r.script.tx {
		ctx = r.script.ctx
	}
	l.lib, l.err = r.s.scripts.LoadLibrary(ctx, src)
	return l
}

type errString string

func (e errString) Error() string { return string(e) }

// FUNCTION LOAD [REPLACE] code
func functionLoad(r *request) {
	replace := false
	for _, a := range r.args[2 : len(r.args)-1] {
		if !is(a, "replace") {
			r.w.Error("ERR Unknown option given: " + string(appendSanitized(nil, a, 128)))
			return
		}
		replace = true
	}
	l := r.loadLibrary(r.args[len(r.args)-1])
	if l.name == "" { // the shebang line is wrong: nothing to compare with the stored libraries
		r.w.Error(l.err.Error())
		return
	}
	if r.storeLibraries([]loadedLibrary{l}, replace, false, false) {
		r.w.BulkString(l.name)
	}
}

// storeLibraries proposes loaded (libraryChanges: replace, flush and restore say how they meet
// the stored libraries) and reports whether they were stored; otherwise it has replied why not.
func (r *request) storeLibraries(loaded []loadedLibrary, replace, flush, restore bool) bool {
	r.warmFunctions()
	refused := ""
	_, err := r.exec([][]byte{librariesKey}, func(v node.View) []fsm.Command {
		var cmds []fsm.Command
		if refused, cmds = r.s.libraryChanges(v.Libraries(), loaded, replace, flush, restore); refused != "" {
			return nil
		}
		return append(cmds, librariesMark())
	})
	switch {
	case err != nil:
		r.replyError(err)
	case refused != "":
		r.w.Error(refused)
	default:
		return true
	}
	return false
}

// libraryChanges returns the commands that store loaded in libs (after flushing them all when
// flush), or Redis's error that refuses them: a library that exists unless replace, one that
// did not load, a function another library has, or a bound passed. (Redis quotes the name of
// an existing library for LOAD, not for RESTORE.)
func (s *Server) libraryChanges(libs *fsm.Libraries, loaded []loadedLibrary, replace, flush, restore bool) (string, []fsm.Command) {
	index, _ := s.functionIndex(libs)
	if flush {
		index = nil
	}
	maxLibs, maxBytes, maxFuncs := libraryLimits(s.cfg.Scripts)
	count, size, funcs := libs.Len(), libs.Bytes(), len(index)
	if flush {
		count, size, funcs = 0, 0, 0
	}
	owner := map[string]string{} // the functions of the libraries being stored
	var cmds []fsm.Command
	if flush {
		cmds = append(cmds, fsm.Command{Kind: fsm.KindFlushLibraries})
	}
	for _, l := range loaded {
		old, exists := libs.Get(l.name)
		exists = exists && !flush
		switch {
		case exists && !replace && !restore:
			return "ERR Library '" + l.name + "' already exists", nil
		case exists && !replace:
			return "ERR Library " + l.name + " already exists", nil
		case l.err != nil:
			return l.err.Error(), nil
		}
		for _, f := range l.lib.Functions {
			key := strings.ToLower(f.Name)
			if e, ok := index[key]; ok && e.lib != l.name || owner[key] != "" && owner[key] != l.name {
				return "ERR Function " + f.Name + " already exists", nil
			}
			owner[key] = l.name
		}
		if exists {
			count, size = count-1, size-len(old)
			for _, e := range index {
				if e.lib == l.name {
					funcs--
				}
			}
		}
		count, size, funcs = count+1, size+len(l.src), funcs+len(l.lib.Functions)
		cmds = append(cmds, fsm.Command{Kind: fsm.KindStoreLibrary, Key: []byte(l.name), Owner: l.src})
	}
	if count > maxLibs || size > maxBytes || funcs > maxFuncs {
		return librariesFull(maxLibs, maxBytes, maxFuncs), nil
	}
	return "", cmds
}

// librariesFull is the refusal of libraries past the bounds.
func librariesFull(maxLibs, maxBytes, maxFuncs int) string {
	return "ERR the function libraries are full (at most " + itoa(int64(maxLibs)) + " libraries, " + itoa(int64(maxBytes)) +
		" bytes of source and " + itoa(int64(maxFuncs)) + " functions): delete libraries with FUNCTION DELETE or FUNCTION FLUSH"
}

// FUNCTION DELETE library
func functionDelete(r *request) {
	name := string(r.args[2])
	found := false
	_, err := r.exec([][]byte{librariesKey}, func(v node.View) []fsm.Command {
		if _, found = v.Libraries().Get(name); !found {
			return nil
		}
		return []fsm.Command{{Kind: fsm.KindDeleteLibrary, Key: []byte(name)}, librariesMark()}
	})
	switch {
	case err != nil:
		r.replyError(err)
	case !found:
		r.w.Error("ERR Library not found")
	default:
		r.w.SimpleString("OK")
	}
}

// FUNCTION FLUSH [ASYNC|SYNC]
func functionFlush(r *request) {
	switch {
	case len(r.args) > 3:
		r.syntaxError("FUNCTION")
		return
	case len(r.args) == 3 && !is(r.args[2], "async") && !is(r.args[2], "sync"):
		r.w.Error("ERR FUNCTION FLUSH only supports SYNC|ASYNC option")
		return
	}
	_, err := r.exec([][]byte{librariesKey}, func(v node.View) []fsm.Command {
		return []fsm.Command{{Kind: fsm.KindFlushLibraries}, librariesMark()}
	})
	if err != nil {
		r.replyError(err)
		return
	}
	r.w.SimpleString("OK")
}

// FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE]: the libraries in name order (Redis's order
// is its hash table's), each function of a library in the order its code registered it.
func functionList(r *request) {
	var pattern []byte
	withCode, named := false, false
	for i := 2; i < len(r.args); i++ {
		switch a := r.args[i]; {
		case is(a, "withcode") && !withCode:
			withCode = true
		case is(a, "libraryname") && !named:
			if i+1 >= len(r.args) {
				r.w.Error("ERR library name argument was not given")
				return
			}
			pattern, named = bytes.ToLower(r.args[i+1]), true
			i++
		default:
			r.w.Error("ERR Unknown argument " + string(appendSanitized(nil, a, 128)))
			return
		}
	}
	r.warmFunctions()
	var libs *fsm.Libraries
	if _, err := r.exec(nil, func(v node.View) []fsm.Command { libs = v.Libraries(); return nil }); err != nil {
		r.replyError(err)
		return
	}
	_, loaded := r.s.functionIndex(libs)
	var names []string
	for _, name := range libs.Names() {
		src, _ := libs.Get(name)
		if loaded[src] != nil && (!named || globMatch(pattern, []byte(strings.ToLower(name)))) {
			names = append(names, name)
		}
	}
	r.w.Array(len(names))
	for _, name := range names {
		src, _ := libs.Get(name)
		lib := loaded[src]
		r.w.Map(3 + int(b2i(withCode)))
		r.w.BulkString("library_name")
		r.w.BulkString(name)
		r.w.BulkString("engine")
		r.w.BulkString("LUA")
		r.w.BulkString("functions")
		r.w.Array(len(lib.Functions))
		for _, f := range lib.Functions {
			r.w.Map(3)
			r.w.BulkString("name")
			r.w.BulkString(f.Name)
			r.w.BulkString("description")
			if f.Description == "" {
				r.w.Null()
			} else {
				r.w.BulkString(f.Description)
			}
			r.w.BulkString("flags")
			flags := script.FlagNames(f.Flags)
			r.w.Set(len(flags))
			for _, fl := range flags {
				r.w.SimpleString(fl)
			}
		}
		if withCode {
			r.w.BulkString("library_code")
			r.w.BulkString(src)
		}
	}
}

// FUNCTION STATS: the function running longest now on this node, and the libraries' figures.
func functionStats(r *request) {
	r.warmFunctions()
	var libs *fsm.Libraries
	if _, err := r.exec(nil, func(v node.View) []fsm.Command { libs = v.Libraries(); return nil }); err != nil {
		r.replyError(err)
		return
	}
	index, _ := r.s.functionIndex(libs)
	r.w.Map(2)
	r.w.BulkString("running_script")
	if f := r.s.functions.oldestRunning(); f != nil {
		r.w.Map(3)
		r.w.BulkString("name")
		r.w.BulkString(f.name)
		r.w.BulkString("command")
		r.w.Array(len(f.args))
		for _, a := range f.args {
			r.w.Bulk(a)
		}
		r.w.BulkString("duration_ms")
		r.w.Int(time.Since(f.start).Milliseconds())
	} else {
		r.w.Null()
	}
	r.w.BulkString("engines")
	r.w.Map(1)
	r.w.BulkString("LUA")
	r.w.Map(2)
	r.w.BulkString("libraries_count")
	r.w.Int(int64(libs.Len()))
	r.w.BulkString("functions_count")
	r.w.Int(int64(len(index)))
}

// The payload of FUNCTION DUMP is raftlock's own, not Redis's RDB encoding (the two do not
// restore each other's): dumpMagic, dumpVersion, the number of libraries, each library's
// source (length-prefixed) in name order, then a CRC-32C of everything before it.
const (
	dumpMagic   = "RLFN"
	dumpVersion = 1
)

var dumpCRC = crc32.MakeTable(crc32.Castagnoli)

// FUNCTION DUMP
func functionDump(r *request) {
	var libs *fsm.Libraries
	if _, err := r.exec(nil, func(v node.View) []fsm.Command { libs = v.Libraries(); return nil }); err != nil {
		r.replyError(err)
		return
	}
	srcs := make([][]byte, 0, libs.Len())
	for _, name := range libs.Names() {
		src, _ := libs.Get(name)
		srcs = append(srcs, []byte(src))
	}
	r.w.Bulk(appendDump(nil, srcs))
}

// appendDump appends the FUNCTION DUMP payload of the library sources srcs to b.
func appendDump(b []byte, srcs [][]byte) []byte {
	start := len(b)
	b = append(b, dumpMagic...)
	b = append(b, dumpVersion)
	b = binary.AppendUvarint(b, uint64(len(srcs)))
	for _, src := range srcs {
		b = binary.AppendUvarint(b, uint64(len(src)))
		b = append(b, src...)
	}
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b[start:], dumpCRC))
}

// parseDump returns the sources of a FUNCTION DUMP payload, false if it is not one.
func parseDump(b []byte) ([][]byte, bool) {
	if len(b) < len(dumpMagic)+1+4 || string(b[:len(dumpMagic)]) != dumpMagic || b[len(dumpMagic)] != dumpVersion {
		return nil, false
	}
	body, sum := b[:len(b)-4], binary.BigEndian.Uint32(b[len(b)-4:])
	if crc32.Checksum(body, dumpCRC) != sum {
		return nil, false
	}
	rest := body[len(dumpMagic)+1:]
	n, k := binary.Uvarint(rest)
	if k <= 0 || n > uint64(len(rest)) {
		return nil, false
	}
	rest = rest[k:]
	srcs := make([][]byte, 0, n)
	for range n {
		l, k := binary.Uvarint(rest)
		if k <= 0 || l > uint64(len(rest)-k) {
			return nil, false
		}
		srcs = append(srcs, rest[k:k+int(l)])
		rest = rest[k+int(l):]
	}
	return srcs, len(rest) == 0
}

// FUNCTION RESTORE payload [FLUSH|APPEND|REPLACE]
func functionRestore(r *request) {
	if len(r.args) > 4 {
		r.syntaxError("FUNCTION")
		return
	}
	flush, replace := false, false
	if len(r.args) == 4 {
		switch p := r.args[3]; {
		case is(p, "flush"):
			flush = true
		case is(p, "replace"):
			replace = true
		case is(p, "append"):
		default:
			r.w.Error("ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.")
			return
		}
	}
	srcs, ok := parseDump(r.args[2])
	if !ok {
		r.w.Error("ERR DUMP payload version or checksum are wrong")
		return
	}
	// A payload past the bounds on its own is refused before any of its code runs: each
	// library's load may take up to its time limit.
	maxLibs, maxBytes, maxFuncs := libraryLimits(r.s.cfg.Scripts)
	total := 0
	for _, src := range srcs {
		total += len(src)
	}
	if len(srcs) > maxLibs || total > maxBytes {
		r.w.Error(librariesFull(maxLibs, maxBytes, maxFuncs))
		return
	}
	loaded := make([]loadedLibrary, 0, len(srcs))
	seen := map[string]bool{}
	for _, src := range srcs {
		l := r.loadLibrary(src)
		if l.err == nil && seen[l.name] {
			l.err = errString("ERR Library " + l.name + " already exists")
		}
		if l.err != nil {
			r.w.Error(l.err.Error())
			return
		}
		seen[l.name] = true
		loaded = append(loaded, l)
	}
	if r.storeLibraries(loaded, replace, flush, true) {
		r.w.SimpleString("OK")
	}
}
