package script

import "errors"

// Error is a run or compilation that failed: the script did not compile, raised an error, ran
// past its time limit, or was aborted by its Caller. Error() is the reply Redis would send,
// without the leading '-': e.g. "ERR user_script:1: Script attempted to access nonexistent
// global variable 'x' script: <sha>, on @user_script:1.".
//
// A script that returns an error table ({err=...}, redis.error_reply) has not failed: Run
// returns that as a Value of KindError, as Redis does.
type Error struct {
	// Msg is the reply text, with no CR or LF in it.
	Msg string
	// Err is the cause, for errors.Is and errors.As: ErrCompile, ErrTimeout, ErrClosed, the
	// ctx's error, or the error a Caller returned. Nil when the script itself raised the error.
	Err error
}

func (e *Error) Error() string { return e.Msg }

func (e *Error) Unwrap() error { return e.Err }

var (
	// ErrCompile is the cause of an Error for a script that does not compile (or whose
	// shebang line is invalid).
	ErrCompile = errors.New("script: compile error")
	// ErrTimeout is the cause of an Error for a script stopped because it ran longer than
	// Config.Timeout.
	ErrTimeout = errors.New("script: time limit exceeded")
	// ErrClosed is the cause of the Error that Run and Compile return after Close.
	ErrClosed = errors.New("script: engine closed")
	// ErrKilled is the cause of an Error for a script stopped by Engine.Kill (SCRIPT KILL).
	ErrKilled = errors.New("script: killed")
	// ErrBudget is the cause of an Error for a run stopped by the budget RunBudget gave it.
	ErrBudget = errors.New("script: budget exceeded")
	// ErrMemory is the cause of an Error for a script stopped because it held more than
	// Config.MaxMemory, or built a reply larger than Config.MaxReplyBytes.
	ErrMemory = errors.New("script: memory limit exceeded")
)

// errEngineClosed is what Run and Compile return after Close.
var errEngineClosed = &Error{Msg: "ERR the script engine is closed: the server is shutting down", Err: ErrClosed}

// errKilled is the error a stopped script sees if it catches the stop with pcall: the reply
// is built from the stop's cause instead (see runCtx).
var errKilled = errors.New("Script killed")
