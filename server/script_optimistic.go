package server

import (
	"errors"
	"slices"
	"strconv"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/script"
)

// Scripts outside the view lock (DESIGN.md §4). A script is evaluated where every
// request is, holding the leader's view lock, so that what it reads and what it writes are one
// state; but then a script that loops to its time limit stalls every request of the node for
// that long. So a script holds the lock for lockedScriptBudget at most: the compare-and-delete
// release and every other short script finish within it, as before. One that does not is
// stopped there (no effects: they replicate only once a script ends) and runs again without
// the lock, on a view that takes the lock for each read and notes what it found (readLog), for
// as long as its time limit allows. Then, holding the lock again, its reads are checked: if
// each finds the same now, the run is the one it would have been had it run now, and its
// effects are proposed (each still guarded by what it saw) and its reply sent as any
// evaluation's; if not, it runs again, up to maxOutsideRuns times, and then fails with
// errScriptRaced rather than run holding the lock. For a few budgets after a script used its
// budget up, scripts do not start holding the lock at all (script.Engine.RunBudget): a
// pipeline's proposals are evaluated under one hold of the lock, and a pipeline of looping
// scripts would otherwise hold it for one budget each.
//
// Not covered: a script inside MULTI ... EXEC, which holds the view lock for the whole
// transaction (its EVALs run in it, within the transaction's time limit).

// errExecScriptTime stops the scripts of a MULTI/EXEC that ran execScriptTime in all.
var errExecScriptTime = errors.New("the scripts of a MULTI/EXEC may run " + execScriptTime.String() +
	" in all (they hold the node's view, and every other request waits); run a longer script on its own")

const (
	// execScriptTime bounds the scripts queued in one MULTI/EXEC together: they run holding the
	// view lock throughout (EXEC is atomic), so they cannot move outside it as a lone script does.
	execScriptTime = 10 * time.Millisecond
	// lockedScriptBudget is how long a script may run holding the view lock.
	lockedScriptBudget = 2 * time.Millisecond
	// maxOutsideRuns bounds how often a script runs outside the lock because what it read
	// changed before it could be checked.
	maxOutsideRuns = 3
)

var errScriptRaced = "ERR the keys the script read changed while it ran, " + strconv.Itoa(maxOutsideRuns) +
	" times in a row (a script that runs longer than " + lockedScriptBudget.String() +
	" runs without holding the node's view, and again if what it read changed): retry it"

var errScriptReadTooMuch = "ERR the script read more than " + strconv.Itoa(maxReadLog) +
	" keys (or scanned past that many) in a run longer than " + lockedScriptBudget.String() +
	": such a run is checked holding the node's view, and that check is bounded; nothing was written"

// rerun runs the script outside the view lock as long as its last evaluation asks for it (the
// run under the lock passed its budget, or what the run outside read changed), and returns the
// outcome of the last evaluation. It gives up after maxOutsideRuns runs (refused).
func (e *evalCall) rerun(res []fsm.Result, err error) ([]fsm.Result, error) {
	for err == nil && (e.slow || e.raced) {
		e.slow, e.raced = false, false
		if e.runs == maxOutsideRuns {
			e.noscript, e.refused, e.ov = false, errScriptRaced, nil
			return nil, nil
		}
		e.runs++
		if !e.runOutside() {
			return nil, nil // killed: its reply needs no view
		}
		res, err = e.r.exec(e.tableKeys, e.eval)
	}
	return res, err
}

// runOutside runs the script on a readLog, without the view lock, with its whole time limit.
// It reports whether eval must now check its reads (false: SCRIPT KILL stopped it, or it read
// too much to be checked, and it has nothing to propose).
func (e *evalCall) runOutside() bool {
	log := newReadLog(e.r.home)
	e.reads, e.cmds = nil, nil
	cmds := e.evaluate(log, 0)
	if errors.Is(e.runErr, script.ErrKilled) {
		return false
	}
	if log.overflow {
		e.noscript, e.refused = false, errScriptReadTooMuch
		return false
	}
	e.reads, e.cmds = log, slices.Clip(cmds)
	return true
}

// validated is eval for a script that ran outside the lock: its effects if every read it made
// finds the same in v, none (raced) otherwise.
func (e *evalCall) validated(v node.View) []fsm.Command {
	if e.raced = !e.reads.valid(v); e.raced {
		e.suspended.Pause() // it runs again: SCRIPT KILL must see it meanwhile
		return nil
	}
	return e.cmds
}

// precompile compiles the script before its evaluation takes the view lock, unless it is
// compiled already: compiling is out of reach of the time limit, and a 256 KiB script takes
// milliseconds. EVAL's compile error is kept for the evaluation to report (after its checks
// of the script cache, as before); EVALSHA reads the stored source first, outside the lock.
func (e *evalCall) precompile() {
	s := e.r.s.scripts
	if !e.bySHA {
		e.compileErr = s.Compile(e.src)
		return
	}
	if s.Compiled(e.sha) {
		return
	}
	var src string
	var ok bool
	e.r.home.ExecLocal(func(v node.View) { src, ok = v.Script(e.sha) })
	if ok {
		_ = s.Compile([]byte(src)) // a stored script compiled when it was stored: Run reports any error
	}
}
