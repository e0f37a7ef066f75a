//go:build !scripts

package server

// Until the Lua engine lands, EVAL and SCRIPT answer a clear error.

type scriptEngine struct{}

func newScriptEngine(Config) scriptEngine { return scriptEngine{} }
func (scriptEngine) Close()               {}

type scriptRun struct {
	ov       *overlay
	readOnly bool
}

func cmdNoScripts(c *conn, args [][]byte) {
	c.w.Error("ERR raftlock does not run scripts yet: use LOCK/UNLOCK/RENEW, or SET key value NX PX ms to lock and DEL to unlock")
}

var (
	cmdEval      = cmdNoScripts
	cmdEvalSHA   = cmdNoScripts
	cmdEvalRO    = cmdNoScripts
	cmdEvalSHARO = cmdNoScripts
	cmdScript    = cmdNoScripts
)
