package server

// Scripting: EVAL, EVALSHA and their _RO forms, SCRIPT; redis.call runs a command handler on
// the script's overlay.

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/resp"
	"github.com/raftlock/raftlock/script"
)

// scriptEngine runs EVAL's Lua.
type scriptEngine = *script.Engine

// ScriptLimits bound scripts (DESIGN.md §10).
type ScriptLimits struct {
	// Memory bounds the heap one run may grow by; Reply the bytes of its reply; CallReplies
	// the bytes of all the replies its redis.calls return. Defaults 256 MiB, 64 MiB, 64 MiB.
	Memory, Reply, CallReplies int64
	// CacheScripts and CacheBytes bound the replicated script cache: a script that is not in
	// it yet is refused by SCRIPT LOAD and EVAL once it holds as many. Defaults 1000 scripts,
	// 64 MiB.
	CacheScripts, CacheBytes int
	// Libraries, LibraryBytes and Functions bound the replicated function libraries: how many,
	// the bytes of their sources, and the functions they register in all. FUNCTION LOAD and
	// RESTORE are refused past them. Zero means the default: 1000 libraries, 64 MiB, 10000
	// functions.
	Libraries, LibraryBytes, Functions int
}

// DefaultScriptLimits returns the default script limits.
func DefaultScriptLimits() ScriptLimits {
	return ScriptLimits{Memory: 256 << 20, Reply: 64 << 20, CallReplies: 64 << 20, CacheScripts: 1000, CacheBytes: 64 << 20,
		Libraries: defaultLibraries, LibraryBytes: defaultLibraryBytes, Functions: defaultFunctionCount}
}

// cacheRefusal is the error for storing src in a full script cache, "" if it fits. The cache
// is replicated state, so it is capped by refusing new scripts rather than by evicting old
// ones: an eviction would have to be a replicated command of its own, and would make EVALSHA
// of a script an application loaded fail at a moment no one chose. SCRIPT FLUSH is the
// replicated way to empty it.
func cacheRefusal(lim ScriptLimits, v node.View, src []byte) string {
	n, bytes := v.ScriptCache()
	if n+1 > lim.CacheScripts || bytes+len(src) > lim.CacheBytes {
		return "ERR the script cache is full (at most " + itoa(int64(lim.CacheScripts)) + " scripts and " + itoa(int64(lim.CacheBytes)) +
			" bytes): run stored scripts with EVALSHA, or empty the cache with SCRIPT FLUSH"
	}
	return ""
}

func newScriptEngine(cfg Config) scriptEngine {
	sc := script.DefaultConfig()
	sc.Timeout = cfg.ScriptTimeout
	sc.MaxMemory, sc.MaxReplyBytes = cfg.Scripts.Memory, cfg.Scripts.Reply
	sc.Logger = cfg.Logger.With("component", "script")
	return script.New(sc)
}

// maxScriptBytes bounds a script's source: scripts are replicated and kept by every node.
const maxScriptBytes = 256 << 10

// scriptRun is a script being evaluated for a request: the overlay its redis.calls evaluate
// on, and whether it may write.
type scriptRun struct {
	ov       *overlay
	readOnly bool
	// tx: the overlay is a transaction's (EXEC), not a script's: a queued EVAL runs on it,
	// within ctx, one time limit for the whole transaction (it holds the view lock throughout).
	tx  bool
	ctx context.Context
	// db is the database the script's redis.calls name keys in: the caller's, until the script
	// SELECTs another (which, as in Redis 7, does not change the caller's).
	db int
	// replyBytes is what its redis.calls returned so far (ScriptLimits.CallReplies).
	replyBytes int64
	// calls holds the replies of its redis.calls, one after the other, written by callW. It is
	// never reset, since the values decoded from a reply point into it; past maxKeptCalls it
	// is let go (those values keep what they need of it) and a new one started.
	calls bytes.Buffer
	callW *resp.Writer
	// call is the request each redis.call runs as, reused: a call is over when its handler
	// returns (its evaluation on the overlay is synchronous), and calls never nest.
	call request
}

// maxKeptCalls is how many bytes of redis.call replies a script run keeps in one buffer.
const maxKeptCalls = 64 << 10

// scriptCaller lets the script engine call commands for the request running the script.
type scriptCaller struct {
	parent *request
	run    *scriptRun
}

func errValue(msg string) script.Value { return script.Value{Kind: script.KindError, Str: []byte(msg)} }

// Call runs one redis.call/redis.pcall: the same handler a client's command runs, as a request
// of its own on the script's overlay, its RESP2 reply captured and decoded into a script value.
// It checks the call first (refusal).
func (sc scriptCaller) Call(args [][]byte) (script.Value, error) {
	p := sc.parent
	cmd, refused := sc.refusal(args, true)
	if refused != "" {
		return errValue(refused), nil
	}
	if p.s.grouped() && cmd.leader && !p.s.inHome(p.home, cmd.keyArgs(args)) {
		// Its overlay is its group's table: another group's key is not in it.
		return errValue("ERR Script attempted to access a non local key in a cluster node script"), nil
	}
	if cmd.leader && p.s.slotsMoved() {
		// Routing here may be behind the group's table (slotmoves.go): a key the script did
		// not declare must be in a slot the table serves now, or the script would read a copy
		// its slot left. While the slot moves the script runs again after the move.
		owned := sc.run.ov.Slots()
		for _, k := range cmd.keyArgs(args) {
			switch owned.Of(fsm.KeySlot(k)).State {
			case fsm.SlotOwned:
			case fsm.SlotFrozen:
				return script.Value{}, &node.SlotError{Frozen: true}
			case fsm.SlotGone:
				if !p.s.grouped() {
					// A node of one group, its slot moved to a group it does not run yet: the
					// script stops with nothing applied and its client is told (reroute).
					return script.Value{}, &node.SlotError{}
				}
				fallthrough
			default:
				return errValue("ERR Script attempted to access a non local key in a cluster node script"), nil
			}
		}
	}
	switch cmd.name {
	case "select":
		db, ok := parseInt(args[1])
		switch {
		case !ok:
			return errValue(errNotInt), nil
		case db < 0 || db >= fsm.Databases:
			return errValue("ERR DB index is out of range"), nil
		}
		sc.run.db = int(db)
		return script.Value{Kind: script.KindStatus, Str: []byte("OK")}, nil
	case "readonly", "readwrite":
		// As on a Redis Cluster node: they set the mode of the script's own client, which
		// reads nothing after the script; the caller's connection keeps its mode.
		return script.Value{Kind: script.KindStatus, Str: []byte("OK")}, nil
	}
	if p.trackReads && !cmd.write {
		// Track the keys the script reads for its caller now, while the script still holds the
		// view: a change applied right after the script is then pushed, never missed. (A script
		// that writes a key after reading it hears of its own write unless NOLOOP, as on Redis.)
		for _, k := range cmd.keyArgs(args) {
			p.s.tracker.read(p.c, fsm.DBKey(sc.run.db, k))
		}
	}
	run := sc.run
	if run.callW == nil {
		run.callW = resp.NewWriter(&run.calls)
	}
	if run.calls.Len() > maxKeptCalls {
		run.calls = bytes.Buffer{}
	}
	from := run.calls.Len()
	if cmd.leader && !cmd.movable {
		args = withDBKeys(cmd, args, run.db)
	}
	run.call = request{s: p.s, c: p.c, w: run.callW, cmd: cmd, args: args, db: run.db, path: onScript, script: run, home: p.home}
	cmd.run(&run.call)
	run.callW.Flush()
	captured := run.calls.Bytes()[from:]
	if run.replyBytes += int64(len(captured)); run.replyBytes > p.s.cfg.Scripts.CallReplies {
		return script.Value{}, errors.New("ERR the script's redis.call replies passed " + itoa(p.s.cfg.Scripts.CallReplies) + " bytes")
	}
	reply, rest, err := resp.ParseValue(captured)
	if err != nil || len(rest) != 0 {
		return script.Value{}, errors.New("ERR internal: undecodable reply inside a script")
	}
	v, err := scriptValue(reply)
	if err != nil {
		return script.Value{}, errors.New("ERR internal: " + err.Error())
	}
	return v, nil
}

// Permitted reports whether Call would refuse args, without calling it and without logging an
// ACL refusal (script.Prechecker).
func (sc scriptCaller) Permitted(args [][]byte) bool {
	_, refused := sc.refusal(args, false)
	return refused == ""
}

var _ script.Prechecker = scriptCaller{}

// refusal checks a call in Redis 7.0's order: an unknown command (or subcommand), the arity, a
// command scripts may not call, ACL (logged when log is set), a write in a read-only script,
// then raftlock's own refusals and the key bound. It returns the command, and the error that
// refuses the call ("" when it may run).
func (sc scriptCaller) refusal(args [][]byte, log bool) (*command, string) {
	p := sc.parent
	cmd := lookupCommand(args[0])
	if cmd == nil {
		return nil, "ERR Unknown Redis command called from script"
	}
	rule, known := scriptRuleOf(cmd, args)
	switch {
	case !known:
		return cmd, "ERR Unknown Redis command called from script"
	case !arityOK(rule.arity, len(args)):
		return cmd, "ERR Wrong number of args calling Redis command from script"
	case !rule.allowed:
		return cmd, "ERR This Redis command is not allowed from script"
	}
	if log {
		if d, ok := p.c.permit(cmd, args, "lua"); !ok {
			return cmd, d.scriptError()
		}
	} else if !p.c.permitted(cmd, args) {
		return cmd, "denied"
	}
	switch {
	case cmd.write && sc.run.readOnly:
		return cmd, "ERR Write commands are not allowed from read-only scripts."
	case cmd.name == "lock":
		return cmd, "ERR LOCK is not allowed from scripts: its token is only known once the grant is applied; use SET key value NX PX ms"
	case cmd.name == "semacquire" || cmd.name == "mlock":
		return cmd, "ERR " + strings.ToUpper(cmd.name) + " is not allowed from scripts: its tokens are only known once the grant is applied"
	case rule.refused:
		return cmd, "ERR This Redis command is not allowed from script"
	case cmd.denyOOM && p.s.full():
		return cmd, "ERR " + errOOM
	}
	return cmd, ""
}

// scriptRule is what redis.call checks of a command before it runs it.
type scriptRule struct {
	arity int // Redis's convention (commands.go)
	// allowed: Redis 7.0 lets a script call it (the command, or the subcommand, has no
	// noscript flag).
	allowed bool
	// refused: raftlock refuses it in a script although Redis does not (after the checks
	// Redis makes first): FLUSHDB and FLUSHALL (the overlay a script runs on cannot show a
	// whole database gone), CLUSTER and RAFT (they ask the node for its members, under the
	// view lock the script holds).
	refused bool
}

// scriptNonLeader are the commands outside the lock table (not run on the leader's view) that a
// script may call, as in Redis 7.0: the others (HELLO, AUTH, QUIT, RESET, WAIT, ROLE, DEBUG,
// MULTI ...) are noscript there too. SELECT, READONLY and READWRITE are answered by Call itself;
// INFO leaves out the figures that need the view lock (introspection.go).
var scriptNonLeader = map[string]bool{
	"ping": true, "echo": true, "select": true, "time": true, "info": true, "command": true,
	"pubsub": true, "readonly": true, "readwrite": true,
}

// scriptSubcommands are the subcommands Redis 7.0 knows of each container command raftlock
// has, with their arity; the ones marked true may be called from a script (no noscript flag).
// redis.call checks a subcommand as Redis does: one Redis does not know is an unknown
// command, a wrong count an arity error, whatever raftlock's handler would reply.
var scriptSubcommands = map[string]map[string]scriptSub{
	"client": {
		"caching": {3, false}, "getname": {2, false}, "getredir": {2, false}, "help": {2, true},
		"id": {2, false}, "info": {2, false}, "kill": {-3, false}, "list": {-2, false},
		"no-evict": {3, false}, "pause": {-3, false}, "reply": {3, false}, "setname": {3, false},
		"tracking": {-3, false}, "trackinginfo": {2, false}, "unblock": {-3, false}, "unpause": {2, false},
	},
	"config": {
		"get": {-3, false}, "help": {2, true}, "resetstat": {2, false}, "rewrite": {2, false}, "set": {-4, false},
	},
	"acl": {
		"cat": {-2, false}, "deluser": {-3, false}, "dryrun": {-4, false}, "genpass": {-2, false},
		"getuser": {3, false}, "help": {2, true}, "list": {2, false}, "load": {2, false}, "log": {-2, false},
		"save": {2, false}, "setuser": {-3, false}, "users": {2, false}, "whoami": {2, false},
	},
	"script": {
		"debug": {3, false}, "exists": {-3, false}, "flush": {-2, false}, "help": {2, true},
		"kill": {2, false}, "load": {3, false},
	},
	"function": {
		"delete": {3, false}, "dump": {2, false}, "flush": {-2, false}, "help": {2, true}, "kill": {2, false},
		"list": {-2, false}, "load": {-3, false}, "restore": {-3, false}, "stats": {2, false},
	},
	"pubsub": {
		"channels": {-2, true}, "help": {2, true}, "numpat": {2, true}, "numsub": {-2, true},
		"shardchannels": {-2, true}, "shardnumsub": {-2, true},
	},
	"command": {
		"count": {2, true}, "docs": {-2, true}, "getkeys": {-4, true}, "getkeysandflags": {-4, true},
		"help": {2, true}, "info": {-2, true}, "list": {-2, true},
	},
	"cluster": {
		"addslots": {-3, true}, "addslotsrange": {-4, true}, "bumpepoch": {2, true},
		"count-failure-reports": {3, true}, "countkeysinslot": {3, true}, "delslots": {-3, true},
		"delslotsrange": {-4, true}, "failover": {-2, true}, "flushslots": {2, true}, "forget": {3, true},
		"getkeysinslot": {4, true}, "help": {2, true}, "info": {2, true}, "keyslot": {3, true},
		"links": {2, true}, "meet": {-4, true}, "myid": {2, true}, "nodes": {2, true},
		"replicas": {3, true}, "replicate": {3, true}, "reset": {-2, false}, "saveconfig": {2, true},
		"set-config-epoch": {3, true}, "setslot": {-4, true}, "shards": {2, true}, "slaves": {3, true},
		"slots": {2, true},
	},
}

// scriptSub is one subcommand of scriptSubcommands.
type scriptSub struct {
	arity   int
	allowed bool
}

// scriptRuleOf returns what redis.call checks of cmd called with args; known is false for a
// subcommand Redis does not have.
func scriptRuleOf(cmd *command, args [][]byte) (rule scriptRule, known bool) {
	rule = scriptRule{arity: cmd.arity}
	switch cmd.name {
	case "flushdb", "flushall":
		// raftlock's table flags them noscript; Redis does not.
		return scriptRule{arity: cmd.arity, allowed: true, refused: true}, true
	case "cluster", "raft":
		rule.refused = true
	}
	subs, container := scriptSubcommands[cmd.name]
	if !container || len(args) < 2 {
		// A container command without its subcommand is checked as itself (its arity
		// refuses it), as Redis's lookup does.
		rule.allowed = !container && !slices.Contains(cmd.flagList, "noscript") && (cmd.leader || scriptNonLeader[cmd.name])
		return rule, true
	}
	sub, ok := subs[lower(args[1])]
	if !ok {
		return rule, false
	}
	return scriptRule{arity: sub.arity, allowed: sub.allowed, refused: rule.refused}, true
}

// scriptValue turns a command's reply, as our writer encoded it in RESP2 for a script, into
// the value redis.call returns.
func scriptValue(v resp.Value) (script.Value, error) {
	switch v.Kind {
	case resp.KindSimple:
		return script.Value{Kind: script.KindStatus, Str: v.Str}, nil
	case resp.KindError:
		return script.Value{Kind: script.KindError, Str: v.Str}, nil
	case resp.KindInteger:
		return script.Value{Kind: script.KindInt, Int: v.Int}, nil
	case resp.KindBulk:
		return script.Value{Kind: script.KindBulk, Str: v.Str}, nil
	case resp.KindNull:
		return script.Value{Kind: script.KindNil}, nil
	case resp.KindArray:
		out := script.Value{Kind: script.KindArray, Array: make([]script.Value, len(v.Elems))}
		for i, e := range v.Elems {
			var err error
			if out.Array[i], err = scriptValue(e); err != nil {
				return script.Value{}, err
			}
		}
		return out, nil
	}
	return script.Value{}, errors.New("a RESP3 reply inside a script")
}

// writeValue writes a script's result to the client in its protocol.
func (r *request) writeValue(v script.Value) {
	switch v.Kind {
	case script.KindNil:
		r.w.Null()
	case script.KindInt:
		r.w.Int(v.Int)
	case script.KindBulk:
		r.w.Bulk(v.Str)
	case script.KindStatus:
		r.w.SimpleString(string(v.Str))
	case script.KindError:
		// Redis writes a script's error as it is after the '-', adding no ERR code and
		// dropping no '-': {err=''} is "-", {err='-X'} is "--X", {err='oops'} is "-oops".
		line := appendSanitized(make([]byte, 0, len(v.Str)+3), []byte{'-'}, 1)
		r.w.Raw(append(appendSanitized(line, v.Str, len(v.Str)), '\r', '\n'))
	case script.KindArray:
		r.w.Array(len(v.Array))
		for _, e := range v.Array {
			r.writeValue(e)
		}
	default:
		r.w.Null()
	}
}

func cmdEval(r *request)      { evalGeneric(r, false, false) }
func cmdEvalSHA(r *request)   { evalGeneric(r, true, false) }
func cmdEvalRO(r *request)    { evalGeneric(r, false, true) }
func cmdEvalSHARO(r *request) { evalGeneric(r, true, true) }

// stageEval and stageEvalSHA are EVAL and EVALSHA in two halves (stage.go).
func stageEval(r *request) ([][]byte, node.Eval, finishFunc) {
	return evalHalves(r, false, false)
}

func stageEvalSHA(r *request) ([][]byte, node.Eval, finishFunc) {
	return evalHalves(r, true, false)
}

// evalGeneric runs EVAL/EVALSHA(_RO) script numkeys key... arg... on the leader's view. The
// script's redis.call effects become guarded commands replicated like any other write; the
// reply goes out after they applied, and only if they applied as the script saw them.
func evalGeneric(r *request, bySHA, readOnly bool) { r.runHalves(evalHalves(r, bySHA, readOnly)) }

// evalHalves is evalGeneric's two halves: the table keys the script declares and its
// evaluation (nil when it replied already), and what replies from the outcome.
func evalHalves(r *request, bySHA, readOnly bool) ([][]byte, node.Eval, finishFunc) {
	if r.path == onScript && !r.script.tx {
		r.w.Error("ERR This Redis command is not allowed from script")
		return nil, nil, nil
	}
	numkeys, ok := parseInt(r.args[2])
	switch {
	case !ok:
		r.w.Error(errNotInt)
		return nil, nil, nil
	case numkeys < 0:
		r.w.Error("ERR Number of keys can't be negative")
		return nil, nil, nil
	case numkeys > int64(len(r.args)-3):
		r.w.Error("ERR Number of keys can't be greater than number of args")
		return nil, nil, nil
	}
	e := &evalCall{r: r, bySHA: bySHA, readOnly: readOnly, keys: r.args[3 : 3+numkeys], argv: r.args[3+numkeys:]}
	if bySHA {
		e.sha = lower(r.args[1])
	} else {
		e.src = r.args[1]
		if len(e.src) > maxScriptBytes {
			r.w.Error("ERR script too large: raftlock scripts are at most " + itoa(maxScriptBytes) + " bytes")
			return nil, nil, nil
		}
		e.sha = r.c.scriptSHA(e.src)
	}
	if !(r.path == onScript && r.script.tx) {
		e.precompile()
	}
	// The script sees the client's keys (KEYS); the node waits on their table keys.
	e.tableKeys = dbKeys(r.db, e.keys)
	return e.tableKeys, e.eval, e.finish
}

// evalCall is one EVAL's state from its first half to its second: what it runs, and what its
// evaluation found, which the reply is made of. One allocation, where closures sharing the
// variables made one for each.
type evalCall struct {
	r               *request
	bySHA, readOnly bool
	src             []byte // EVAL's script
	sha             string
	fn              string // FCALL's function (functions.go); "" for a script
	keys, argv      [][]byte
	tableKeys       [][]byte // keys as the node knows them
	compileErr      error    // EVAL's script does not compile (precompile)
	// What the evaluation found.
	val      script.Value
	runErr   error
	noscript bool
	refused  string
	ov       *overlay
	// A script that runs longer than lockedScriptBudget holding the view lock runs again
	// without it (script_optimistic.go): slow says the run under the lock was stopped; reads
	// and cmds are what the run outside read and yielded, which eval then checks against the
	// view; raced says the check failed; runs counts the runs outside.
	slow, raced bool
	suspended   *script.Suspended // the script waiting to run again, once slow
	running     *fnRunning        // the function's entry in FUNCTION STATS, nil for a script
	reads       *readLog
	cmds        []fsm.Command
	runs        int
}

// eval evaluates the script on the leader's view (node.Eval) and returns its effects: it runs
// it holding the view lock for lockedScriptBudget at most, or checks the reads of the run made
// without it (script_optimistic.go).
func (e *evalCall) eval(v node.View) []fsm.Command {
	if e.reads != nil {
		return e.validated(v)
	}
	if e.suspended != nil {
		// Evaluated again (a key was in flight) after its run on a budget stopped: it runs
		// outside the lock from now on.
		e.slow = true
		return nil
	}
	budget := lockedScriptBudget
	if e.r.path == onScript && e.r.script.tx {
		budget = 0 // EXEC holds the view lock throughout: nothing to run outside it
	}
	cmds := e.evaluate(v, budget)
	e.slow = errors.Is(e.runErr, script.ErrBudget)
	return cmds
}

// evaluate runs the script on v, within budget when not zero, and returns its effects.
func (e *evalCall) evaluate(v node.View, budget time.Duration) []fsm.Command {
	r := e.r
	e.val, e.runErr, e.noscript, e.refused, e.ov = script.Value{}, nil, false, "", nil
	if e.fn != "" {
		return e.evaluateFunction(v, budget)
	}
	code := e.src
	_, known := v.Script(e.sha)
	// EVAL and EVAL_RO cache what they run, as in Redis. A full cache refuses EVAL, but
	// a read-only script only goes uncached: it must not fail for want of a write.
	cache := !known && !e.bySHA
	if cache {
		if e.refused = cacheRefusal(r.s.cfg.Scripts, v, e.src); e.refused != "" {
			if !e.readOnly {
				return nil
			}
			e.refused, cache = "", false
		}
	}
	if e.bySHA {
		s, ok := v.Script(e.sha)
		if !ok {
			e.noscript = true
			return nil
		}
		// The stored source, read in place: Run only reads it (a script it compiles keeps a
		// copy), and the view's strings never change.
		code = unsafe.Slice(unsafe.StringData(s), len(s))
	}
	ov, caller, ctx := e.prepare(v, e.readOnly)
	defer ov.release()
	switch {
	case e.compileErr != nil:
		e.val, e.runErr = script.Value{}, e.compileErr
	case e.suspended != nil: // a run outside the lock after one on a budget (script_optimistic.go)
		e.val, e.runErr = e.suspended.Run(ctx, code, e.keys, e.argv, caller)
	default:
		var s *script.Suspended
		e.val, s, e.runErr = r.s.scripts.RunBudget(ctx, budget, code, e.keys, e.argv, caller)
		if s != nil {
			e.suspended = s
		}
	}
	// As in Redis, effects made before a runtime error stay: scripts are not rolled back.
	// But a killed script has none: its effects are replicated only once it ends, so
	// SCRIPT KILL may stop any script, writing or not (Redis refuses to kill one that
	// wrote, which it cannot undo). Nor has one stopped by its budget: it runs again.
	// Nor has one that reached a key whose slot is moving (Call): it runs again after the move.
	if errors.Is(e.runErr, script.ErrKilled) || errors.Is(e.runErr, script.ErrBudget) || errors.As(e.runErr, new(*node.SlotError)) {
		ov.want = nil // nothing to compare the (no) results with
		return nil
	}
	cmds := ov.cmds
	if cache && !errors.Is(e.runErr, script.ErrCompile) && !errors.Is(e.runErr, script.ErrClosed) {
		// Cache it cluster-wide, so EVALSHA works on every node and after a failover: a
		// script that compiled, even if it then failed, as Redis keeps it.
		cmds = append(cmds, fsm.Command{Kind: fsm.KindStoreScript, Key: []byte(e.sha), Owner: e.src})
	}
	return cmds
}

// prepare makes the overlay a run evaluates on, and its caller and context.
func (e *evalCall) prepare(v node.View, readOnly bool) (*overlay, scriptCaller, context.Context) {
	r := e.r
	ov := newOverlay(v)
	e.ov = ov
	run := &scriptRun{ov: ov, readOnly: readOnly, db: r.db}
	ctx := r.c.ctx
	if r.path == onScript && r.script.tx {
		ctx = r.script.ctx
	}
	return ov, scriptCaller{parent: r, run: run}, ctx
}

// evaluateFunction is evaluate for FCALL: it runs the function of a stored library.
func (e *evalCall) evaluateFunction(v node.View, budget time.Duration) []fsm.Command {
	r := e.r
	code, readOnly, refused := e.resolveFunction(v)
	if refused != "" {
		e.refused = refused
		return nil
	}
	ov, caller, ctx := e.prepare(v, readOnly)
	defer ov.release()
	// It shows in FUNCTION STATS from its first run to its reply (finish), across the runs
	// of a function stopped on its budget and run again outside the lock.
	if e.running == nil {
		e.running = r.s.functions.begin(e.fn, r.args)
	}
	defer func() {
		if p := recover(); p != nil {
			e.endRunning() // the command's caller recovers it, and finish does not run
			panic(p)
		}
	}()
	if e.suspended != nil {
		e.val, e.runErr = e.suspended.RunFunction(ctx, code, e.fn, e.keys, e.argv, caller)
	} else {
		var s *script.Suspended
		e.val, s, e.runErr = r.s.scripts.RunFunctionBudget(ctx, budget, code, e.fn, e.keys, e.argv, caller)
		if s != nil {
			e.suspended = s
		}
	}
	if errors.Is(e.runErr, script.ErrKilled) || errors.Is(e.runErr, script.ErrBudget) || errors.As(e.runErr, new(*node.SlotError)) {
		ov.want = nil
		return nil
	}
	return ov.cmds
}

// endRunning takes the function out of FUNCTION STATS.
func (e *evalCall) endRunning() {
	if e.running != nil {
		e.r.s.functions.end(e.running)
		e.running = nil
	}
}

// scriptSHA is script.SHA1Hex(src), remembered for the connection's last script (under the
// baton, as handler code runs): comparing the bytes costs less than hashing them, and a client
// that EVALs sends the same script each time.
func (c *conn) scriptSHA(src []byte) string {
	if c.lastSHA != "" && string(src) == c.lastScript {
		return c.lastSHA
	}
	sha := script.SHA1Hex(src)
	if len(src) <= maxRememberedScript {
		c.lastScript, c.lastSHA = string(src), sha
	}
	return sha
}

// maxRememberedScript bounds the source a connection remembers (scriptSHA).
const maxRememberedScript = 4 << 10

// finish replies from what the evaluation found and the outcome of the script's entry
// (finishFunc).
func (e *evalCall) finish(res []fsm.Result, err error) {
	r := e.r
	res, err = e.rerun(res, err)
	if e.suspended != nil {
		e.suspended.Close()
	}
	e.endRunning()
	if err != nil {
		r.replyError(err)
		return
	}
	if e.noscript {
		r.w.Error("NOSCRIPT No matching script. Please use EVAL.")
		return
	}
	if e.refused != "" {
		r.w.Error(e.refused)
		return
	}
	if fsm.Aborted(res) {
		r.w.Error(errScriptAborted)
		return
	}
	for i := range e.ov.want {
		if i >= len(res) || res[i].Status != e.ov.want[i].Status {
			// Applied, but not as predicted: a bug in the prediction, not a race, since every
			// guard held.
			r.s.log.Warn("script effects applied otherwise than predicted", "effect", i, "results", len(res))
			r.w.Error("ERR the script's effects did not apply as it saw them; read the keys before retrying")
			return
		}
	}
	if moved := new(*node.SlotError); errors.As(e.runErr, moved) {
		r.replyError(*moved) // it runs again where its keys' slot is served, nothing applied
		return
	}
	if e.runErr != nil {
		r.w.Error(e.runErr.Error())
		return
	}
	r.writeValue(e.val)
}

// scriptHelp is SCRIPT HELP's text, Redis 7.0's (DEBUG included, which raftlock lacks).
var scriptHelp = []string{
	"DEBUG (YES|SYNC|NO)",
	"    Set the debug mode for subsequent scripts executed.",
	"EXISTS <sha1> [<sha1> ...]",
	"    Return information about the existence of the scripts in the script cache.",
	"FLUSH [ASYNC|SYNC]",
	"    Flush the Lua scripts cache. Very dangerous on replicas.",
	"    When called without the optional mode argument, the behavior is determined by the",
	"    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
	"    * ASYNC: Asynchronously flush the scripts cache.",
	"    * SYNC: Synchronously flush the scripts cache.",
	"KILL",
	"    Kill the currently executing Lua script.",
	"LOAD <script>",
	"    Load a script into the scripts cache without executing it.",
}

// SCRIPT LOAD source | EXISTS sha... | FLUSH [ASYNC|SYNC] | KILL | HELP
func cmdScript(r *request) {
	sub := lower(r.args[1])
	if r.spans && !r.pinned && r.path != onScript {
		r.acrossGroups()
		return
	}
	switch {
	case sub == "load" && len(r.args) == 3:
		src := r.args[2]
		if len(src) > maxScriptBytes {
			r.w.Error("ERR script too large: raftlock scripts are at most " + itoa(maxScriptBytes) + " bytes")
			return
		}
		if err := r.s.scripts.Compile(src); err != nil {
			r.w.Error(err.Error())
			return
		}
		sha := script.SHA1Hex(src)
		refused := ""
		_, err := r.exec([][]byte{[]byte(sha)}, func(v node.View) []fsm.Command {
			refused = ""
			if _, ok := v.Script(sha); ok {
				return nil
			}
			if refused = cacheRefusal(r.s.cfg.Scripts, v, src); refused != "" {
				return nil
			}
			return []fsm.Command{{Kind: fsm.KindStoreScript, Key: []byte(sha), Owner: src}}
		})
		if err != nil {
			r.replyError(err)
			return
		}
		if refused != "" {
			r.w.Error(refused)
			return
		}
		r.w.BulkString(sha)
	case sub == "exists" && len(r.args) >= 3:
		found := make([]bool, len(r.args)-2)
		_, err := r.exec(nil, func(v node.View) []fsm.Command {
			for i, a := range r.args[2:] {
				_, found[i] = v.Script(lower(a))
			}
			return nil
		})
		if err != nil {
			r.replyError(err)
			return
		}
		r.w.Array(len(found))
		for _, f := range found {
			r.w.Int(b2i(f))
		}
	case sub == "flush" && !(len(r.args) == 2 || len(r.args) == 3 && (is(r.args[2], "async") || is(r.args[2], "sync"))):
		r.w.Error("ERR SCRIPT FLUSH only support SYNC|ASYNC option")
	case sub == "flush":
		_, err := r.exec(nil, func(v node.View) []fsm.Command {
			return []fsm.Command{{Kind: fsm.KindFlushScripts, Key: []byte("scripts")}}
		})
		if err != nil {
			r.replyError(err)
			return
		}
		r.w.SimpleString("OK")
	case sub == "kill" && len(r.args) == 2:
		// It needs no view: the script it stops holds it.
		if r.s.scripts.Kill() == 0 {
			r.w.Error("NOTBUSY No scripts in execution right now.")
			return
		}
		r.w.SimpleString("OK")
	case sub == "help" && len(r.args) == 2:
		r.writeHelp("SCRIPT", scriptHelp)
	case sub == "load" || sub == "exists" || sub == "kill" || sub == "help":
		r.w.Error("ERR wrong number of arguments for 'script|" + sub + "' command")
	default:
		r.w.Error("ERR unknown subcommand '" + string(appendSanitized(nil, r.args[1], 128)) + "'. Try SCRIPT HELP.")
	}
}
