// Package script runs raftlock's Lua scripts (EVAL, EVALSHA) as Redis 7.0 does, on gopher-lua
// (Lua 5.1, as Redis): the sandboxed VM, KEYS and ARGV, the redis.* API, Redis's conversions
// between Lua values and RESP replies, its error texts, a time limit, and the SHA1 identity of
// a script. It knows nothing of locks: every redis.call goes to a Caller that the server
// supplies, which runs the command against the leader's view and collects what to replicate.
//
// Where this differs from Redis 7.0 (compat_test.go pins each difference next to Redis's reply):
//   - A script running longer than Config.Timeout is stopped with an error (Redis keeps it
//     running, answers BUSY to everyone else, and waits for SCRIPT KILL).
//   - redis.setresp(3) is refused; set_repl, breakpoint, debug, acl_check_cmd,
//     REDIS_VERSION, gcinfo, string.dump and the bit, cjson, cmsgpack, struct and coroutine
//     libraries are absent; collectgarbage does nothing.
//   - math.random starts from the same state every run (Redis 7.0 carries it over).
//   - Calls nest 2000 deep, not 20000.
//   - gopher-lua words runtime errors its own way ("attempt to index a non-table
//     object(nil) with key 'b'" where Lua says "attempt to index local 'a' (a nil value)"),
//     reports grammar errors as "unexpected symbol" where Lua may say "'end' expected",
//     accepts goto, and prints non-integers in ".." and string.format with Go's shortest form
//     rather than %.14g (tostring is fixed). The texts this package writes itself (redis.*
//     errors, compile error prefixes, positions and the " script: <sha>, on
//     @user_script:<line>." suffix) are Redis's.
//   - Memory: the VM's stacks are bounded, string.rep is capped, loadstring and load take at
//     most 256 KiB of source (vm.go), and a run stops once the heap grew by Config.MaxMemory
//     or its reply passes Config.MaxReplyBytes. Redis bounds none of these but maxmemory.
//     gopher-lua has no allocator hook, so the heap is measured every few thousand
//     instructions, and every library call that can build a large string at once (string.rep,
//     the .. operator, table.concat, string.format, gsub, upper, lower, reverse, cjson.encode,
//     cmsgpack.pack, struct.pack) asks for the room before it allocates (memory.go). To that end the ..
//     operator is compiled as a call of a hidden function, not as gopher-lua's OP_CONCAT.
//   - Functions (FUNCTION LOAD, FCALL: function.go): a library's code runs again at the start of
//     each call, so its upvalues do not outlive a call; redis.REDIS_VERSION is absent at load.
//   - string.find, match, gmatch and gsub are raftlock's own Lua 5.1 matcher (pattern.go): it
//     counts its steps, so the time limit and SCRIPT KILL reach a pattern that backtracks for
//     hours, and it raises "pattern too complex" past 1000 nested items (Lua 5.2's rule; Lua
//     5.1 recurses on the C stack). string.format refuses widths and precisions over two
//     digits, as Lua 5.1 does.
package script

import (
	"context"
	"errors"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Config configures an Engine. A zero field means the documented default.
type Config struct {
	// Timeout bounds one run: a script still running then is stopped, and Run returns an
	// *Error wrapping ErrTimeout. Default 5s, Redis's busy-reply-threshold.
	Timeout time.Duration
	// Pool is how many idle VMs are kept for reuse. Default GOMAXPROCS.
	Pool int
	// Cache is how many compiled scripts are kept, least recently used out first.
	// Default 1000.
	Cache int
	// MaxMemory bounds the heap one run may grow by (measured by the Go runtime every few
	// thousand instructions, and confirmed by a collection before the run is stopped with an
	// *Error wrapping ErrMemory). Default 256 MiB.
	MaxMemory int64
	// MaxReplyBytes bounds the reply a script returns (the bytes of its strings, a string
	// counted again each time the reply holds it). Default 64 MiB.
	MaxReplyBytes int64
	// Logger receives redis.log's lines. Default slog.Default().
	Logger *slog.Logger
}

// DefaultConfig returns the default configuration.
func DefaultConfig() Config {
	return Config{
		Timeout: 5 * time.Second,
		Pool:    runtime.GOMAXPROCS(0),
		Cache:   1000,
		Logger:  slog.Default(),

		MaxMemory:     256 << 20,
		MaxReplyBytes: 64 << 20,
	}
}

// Validate reports the first field that is out of range.
func (c Config) Validate() error {
	switch {
	case c.Timeout < 0:
		return errors.New("script: Config.Timeout must not be negative")
	case c.Pool < 0:
		return errors.New("script: Config.Pool must not be negative")
	case c.Cache < 0:
		return errors.New("script: Config.Cache must not be negative")
	case c.MaxMemory < 0 || c.MaxReplyBytes < 0:
		return errors.New("script: Config.MaxMemory and MaxReplyBytes must not be negative")
	}
	return nil
}

// withDefaults fills the zero (or invalid) fields of c from DefaultConfig.
func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Timeout <= 0 {
		c.Timeout = d.Timeout
	}
	if c.Pool <= 0 {
		c.Pool = d.Pool
	}
	if c.Cache <= 0 {
		c.Cache = d.Cache
	}
	if c.MaxMemory <= 0 {
		c.MaxMemory = d.MaxMemory
	}
	if c.MaxReplyBytes <= 0 {
		c.MaxReplyBytes = d.MaxReplyBytes
	}
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	return c
}

// Caller executes one Redis command from inside a script (redis.call, redis.pcall) and returns
// its reply. args[0] is the command name; args and the slices in it are the callee's to keep.
// A Redis error reply is a Value of KindError, not a Go error: redis.call raises it in the
// script, redis.pcall returns it. A Go error aborts the script, whatever it does (pcall cannot
// catch it), and Run returns an *Error that wraps it, with its text (CR and LF made spaces)
// as the reply. The reply is read before Call is called again, so it may share memory with
// the callee.
type Caller interface {
	Call(args [][]byte) (Value, error)
}

// Engine runs scripts. It is safe for concurrent use: each run takes a VM from a pool (or
// makes one), and compiled scripts are shared by all VMs.
type Engine struct {
	cfg   Config
	now   func() time.Time // the clock of the time limit; tests replace it
	cache *protoCache
	libs  *protoCache // compiled libraries (function.go)
	mu    struct {
		sync.Mutex
		closed  bool
		idle    []*vm
		running map[*vm]struct{} // the VMs running a script now, for Kill
		// kills counts Kill's calls; waiting is the Suspended runs waiting to run again.
		kills   uint64
		waiting int
	}
	// overBudgetAt is when a run on a budget was last stopped by it (UnixNano), 0 never.
	overBudgetAt atomic.Int64
	stats        struct {
		runs, failed, timeouts, aborts, compiles, hits, vms, native, overBudget atomic.Uint64
	}
}

// New returns an Engine for cfg, which should be valid (see Validate): fields out of range
// take their defaults.
func New(cfg Config) *Engine {
	cfg = cfg.withDefaults()
	e := &Engine{cfg: cfg, now: time.Now, cache: newProtoCache(cfg.Cache), libs: newProtoCache(cfg.Cache)}
	e.mu.idle = make([]*vm, 0, cfg.Pool)
	e.mu.running = make(map[*vm]struct{})
	return e
}

// Run runs src with KEYS and ARGV set from keys and argv; call executes its redis.call and
// redis.pcall (a nil call answers every command with Redis's unknown-command error). ctx
// bounds the run as well as Config.Timeout.
//
// A script that does not compile, raises an error, runs out of time or is aborted by call
// returns an *Error whose Error() is Redis's reply without its leading '-'. A script that
// returns an error table ({err=...}, redis.error_reply) returns a Value of KindError.
func (e *Engine) Run(ctx context.Context, src []byte, keys, argv [][]byte, call Caller) (Value, error) {
	e.stats.runs.Add(1)
	v, err := e.run(ctx, src, keys, argv, call)
	if err != nil {
		e.countFailure(err)
	}
	return v, err
}

// RunBudget is Run, stopped with an *Error wrapping ErrBudget once it has run for budget
// (when that is shorter than Config.Timeout): the server runs a script holding its view lock
// for that long at most, then again without it (server/script_optimistic.go). A run stopped
// so has no effects to keep and is not counted as failed; its VM is not reused. For
// budgetCooldown budgets after a run was stopped so, RunBudget returns that error at once
// without running anything (but a script's Go form, native.go, which is quick, still runs).
//
// With ErrBudget comes the Suspended run, to run the script again: until it runs again (or is
// closed) it counts as a running script for Kill, and a Kill meanwhile stops that run at once.
// A Kill during the run itself makes it fail with ErrKilled, even if its budget stopped it.
func (e *Engine) RunBudget(ctx context.Context, budget time.Duration, src []byte, keys, argv [][]byte, call Caller) (Value, *Suspended, error) {
	var s *Suspended
	v, err := e.runBudget(ctx, budget, src, keys, argv, call, nil, &s, nil)
	if errors.Is(err, ErrBudget) {
		e.stats.overBudget.Add(1)
		return v, s, err
	}
	e.count(err)
	return v, nil, err
}

// Suspended is a script run that RunBudget stopped, waiting to run again without a budget.
type Suspended struct {
	e *Engine
	// epoch is Engine.mu.kills when it began waiting; waiting says it is counted in
	// Engine.mu.waiting. Both under Engine.mu.
	epoch   uint64
	waiting bool
}

// Run runs the script again (as Engine.Run), unless Kill was called since it began waiting:
// then it fails at once with an *Error wrapping ErrKilled. It stops waiting as it starts.
func (s *Suspended) Run(ctx context.Context, src []byte, keys, argv [][]byte, call Caller) (Value, error) {
	v, err := s.e.runBudget(ctx, 0, src, keys, argv, call, s, nil, nil)
	s.e.count(err)
	return v, err
}

// Pause makes the script wait again (the server found that the run's reads changed before it
// could check them): Kill counts it, and stops its next Run, from now on.
func (s *Suspended) Pause() {
	e := s.e
	e.mu.Lock()
	defer e.mu.Unlock()
	s.waitLocked()
}

// Close ends the wait for good: the script no longer counts for Kill. Close is idempotent.
func (s *Suspended) Close() {
	e := s.e
	e.mu.Lock()
	defer e.mu.Unlock()
	s.stopWaitingLocked()
}

func (s *Suspended) waitLocked() {
	if !s.waiting {
		s.waiting, s.epoch = true, s.e.mu.kills
		s.e.mu.waiting++
	}
}

func (s *Suspended) stopWaitingLocked() {
	if s.waiting {
		s.waiting = false
		s.e.mu.waiting--
	}
}

// count adds a run's outcome to the counters.
func (e *Engine) count(err error) {
	e.stats.runs.Add(1)
	if err != nil {
		e.countFailure(err)
	}
}

func (e *Engine) countFailure(err error) {
	e.stats.failed.Add(1)
	switch {
	case errors.Is(err, ErrTimeout):
		e.stats.timeouts.Add(1)
	case errors.Unwrap(err) != nil && !errors.Is(err, ErrCompile) && !errors.Is(err, ErrClosed):
		e.stats.aborts.Add(1)
	}
}

func (e *Engine) run(ctx context.Context, src []byte, keys, argv [][]byte, call Caller) (Value, error) {
	return e.runBudget(ctx, 0, src, keys, argv, call, nil, nil, nil)
}

// runBudget runs src, within budget when not zero. s is the Suspended run it resumes, if any:
// its wait ends as the run starts, and the run is refused if Kill was called since the wait
// began. A run stopped by its budget starts waiting (s, or a new one in *out). With fn, src is
// a library, which the run loads and whose function fn names it calls (function.go).
func (e *Engine) runBudget(ctx context.Context, budget time.Duration, src []byte, keys, argv [][]byte, call Caller, s *Suspended, out **Suspended, fn *fnRun) (Value, error) {
	wait := func() { // under e.mu
		if s == nil && out != nil {
			s = &Suspended{e: e}
			*out = s
		}
		if s != nil {
			s.waitLocked()
		}
	}
	var script *cached
	var err error
	if fn != nil {
		script, err = e.loadLibrary(src)
	} else {
		script, err = e.load(src)
	}
	if err != nil {
		return Value{}, err
	}
	if err := ctx.Err(); err != nil {
		return Value{}, &Error{Msg: "ERR Script killed: " + err.Error(), Err: err}
	}
	if script.native != nil && !e.isClosed() {
		if v, ok, err := script.native(call, keys, argv); ok {
			e.stats.native.Add(1)
			return v, err
		}
	}
	if budget > 0 && budget < e.cfg.Timeout {
		// Right after a run on a budget was stopped by it, runs on a budget do not start:
		// the server evaluates a pipeline's scripts under one hold of its lock, and 64
		// looping ones would hold it for 64 budgets.
		if last := e.overBudgetAt.Load(); last != 0 && e.now().UnixNano()-last < int64(budgetCooldown*budget) {
			e.mu.Lock()
			wait()
			e.mu.Unlock()
			return Value{}, errSkippedBudget
		}
	}
	m, err := e.acquire()
	if err != nil {
		return Value{}, err
	}
	m.killed.Store(false)
	e.mu.Lock()
	if s != nil && s.waiting {
		// It stops waiting and starts running in one step: Kill counts it either way.
		s.stopWaitingLocked()
		if e.mu.kills != s.epoch {
			e.mu.Unlock()
			e.release(m, true)
			return Value{}, errKilledWaiting
		}
	}
	e.mu.running[m] = struct{}{}
	e.mu.Unlock()
	m.fn = fn
	v, err := m.run(ctx, script.proto, script.sha, keys, argv, call, budget)
	m.fn = nil
	if errors.Is(err, ErrBudget) {
		e.overBudgetAt.Store(e.now().UnixNano())
	}
	e.mu.Lock()
	delete(e.mu.running, m)
	if errors.Is(err, ErrBudget) {
		if m.killed.Load() {
			err = errKilledWaiting // SCRIPT KILL came during the run: it is killed, not resumed
		} else {
			wait()
		}
	}
	e.mu.Unlock()
	// A stopped run unwound cleanly, but it is rare: start the next one on a fresh VM.
	e.release(m, m.rc.stop == nil && !m.broken)
	return v, err
}

// Kill stops every script running now (SCRIPT KILL): each fails with an *Error wrapping
// ErrKilled within a few thousand instructions. It reports how many it stopped.
func (e *Engine) Kill() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.mu.kills++
	for m := range e.mu.running {
		m.killed.Store(true)
	}
	return len(e.mu.running) + e.mu.waiting
}

// Running is the number of scripts running now.
func (e *Engine) Running() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.mu.running)
}

// Compile compiles src and keeps it for Run, as SCRIPT LOAD does. Its error is an *Error with
// Redis's text ("ERR Error compiling script (new function): user_script:1: ...").
func (e *Engine) Compile(src []byte) error {
	if e.isClosed() {
		return errEngineClosed
	}
	_, err := e.load(src)
	return err
}

// budgetCooldown is how many budgets long, after a run on a budget was stopped by it, runs on
// a budget are refused at once (RunBudget).
const budgetCooldown = 5

// errKilledWaiting is the error of a Suspended run that Kill stopped before it started (or,
// holding the view, as its budget ran out).
var errKilledWaiting = &Error{Msg: "ERR Script killed by user with SCRIPT KILL...", Err: ErrKilled}

// errSkippedBudget is RunBudget's answer during budgetCooldown.
var errSkippedBudget = &Error{Msg: "ERR Script stopped: another script ran past its budget just now", Err: ErrBudget}

// Compiled reports whether the script whose SHA1 hex digest is sha is compiled and kept, so
// that running it compiles nothing: the server compiles a script it does not find before it
// takes its view lock (compiling cannot be stopped by the time limit).
func (e *Engine) Compiled(sha string) bool { return e.cache.hasSHA(sha) }

// load returns src compiled, from the cache or compiled now.
func (e *Engine) load(src []byte) (*cached, error) {
	if c, ok := e.cache.get(src); ok {
		e.stats.hits.Add(1)
		return c, nil
	}
	proto, err := compile(src)
	if err != nil {
		return nil, err
	}
	e.stats.compiles.Add(1)
	c := &cached{src: string(src), sha: SHA1Hex(src), proto: proto, native: nativeFormOf(src)}
	e.cache.put(c)
	return c, nil
}

func (e *Engine) isClosed() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.mu.closed
}

func (e *Engine) acquire() (*vm, error) {
	e.mu.Lock()
	if e.mu.closed {
		e.mu.Unlock()
		return nil, errEngineClosed
	}
	if n := len(e.mu.idle); n > 0 {
		m := e.mu.idle[n-1]
		e.mu.idle = e.mu.idle[:n-1]
		e.mu.Unlock()
		return m, nil
	}
	e.mu.Unlock()
	e.stats.vms.Add(1)
	return newVM(e), nil
}

func (e *Engine) release(m *vm, reuse bool) {
	e.mu.Lock()
	if reuse && !e.mu.closed && len(e.mu.idle) < e.cfg.Pool {
		e.mu.idle = append(e.mu.idle, m)
		m = nil
	}
	e.mu.Unlock()
	if m != nil {
		m.L.Close()
	}
}

// Close releases the idle VMs. Runs in progress finish; later ones fail with ErrClosed.
// Close is idempotent.
func (e *Engine) Close() {
	e.mu.Lock()
	idle := e.mu.idle
	e.mu.idle, e.mu.closed = nil, true
	e.mu.Unlock()
	for _, m := range idle {
		m.L.Close()
	}
}

// Stats is a snapshot of an Engine's counters.
type Stats struct {
	Runs     uint64 // Run calls
	Native   uint64 // runs that a script's Go form answered, without a VM (native.go)
	Failed   uint64 // runs that returned an *Error (a compile error, a raised error, a stop)
	Timeouts uint64 // runs stopped by Config.Timeout
	Aborts   uint64 // runs stopped by their ctx or their Caller
	Compiles uint64 // scripts compiled (each compiled script not found in the cache)
	Hits     uint64 // scripts found compiled in the cache
	Cached   int    // compiled scripts in the cache
	VMs      uint64 // VMs created
	IdleVMs  int    // VMs waiting in the pool
	// OverBudget counts runs stopped by RunBudget's budget (not in Runs: they run again).
	OverBudget uint64
}

// Stats returns a snapshot of e's counters.
func (e *Engine) Stats() Stats {
	e.mu.Lock()
	idle := len(e.mu.idle)
	e.mu.Unlock()
	return Stats{
		Runs:     e.stats.runs.Load(),
		Native:   e.stats.native.Load(),
		Failed:   e.stats.failed.Load(),
		Timeouts: e.stats.timeouts.Load(),
		Aborts:   e.stats.aborts.Load(),
		Compiles: e.stats.compiles.Load(),
		Hits:     e.stats.hits.Load(),
		Cached:   e.cache.len(),
		VMs:      e.stats.vms.Load(),
		IdleVMs:  idle,

		OverBudget: e.stats.overBudget.Load(),
	}
}
