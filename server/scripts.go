package server

import (
	"bytes"
	"errors"
	"slices"
	"strconv"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/script"
	"github.com/raftlock/raftlock/server/resp"
)

// scriptEngine runs EVAL's Lua.
type scriptEngine = *script.Engine

func newScriptEngine(cfg Config) scriptEngine {
	sc := script.DefaultConfig()
	sc.Timeout = cfg.ScriptTimeout
	sc.Logger = cfg.Logger.With("component", "script")
	return script.New(sc)
}

// maxScriptBytes bounds a script's source: scripts are replicated and kept by every node.
const maxScriptBytes = 256 << 10

// scriptRun is the state of a script being evaluated on this connection: redis.call runs the
// command's handler against the overlay, with its reply captured instead of sent.
type scriptRun struct {
	ov       *overlay
	readOnly bool
	capture  bytes.Buffer
}

// scriptCaller lets the script engine call commands on the connection running the script.
type scriptCaller struct{ c *conn }

func errValue(msg string) script.Value { return script.Value{Kind: script.KindError, Str: []byte(msg)} }

// Call runs one redis.call/redis.pcall: the same handler a client's command runs, evaluated on
// the script's overlay, its RESP2 reply decoded into a script value.
func (sc scriptCaller) Call(args [][]byte) (script.Value, error) {
	c := sc.c
	run := c.script
	cmd := lookupCommand(args[0])
	switch {
	case cmd == nil:
		return errValue("ERR Unknown Redis command called from script"), nil
	case cmd.name == "lock":
		return errValue("ERR LOCK is not allowed from scripts: its token is only known once the grant is applied; use SET key value NX PX ms"), nil
	case !cmd.leader && cmd.name != "ping" && cmd.name != "echo", slices.Contains(cmd.flags, "noscript"):
		return errValue("ERR This Redis command is not allowed from script"), nil
	case cmd.write && run.readOnly:
		return errValue("ERR Write commands are not allowed from read-only scripts."), nil
	case !cmd.arityOK(len(args)):
		return errValue("ERR Wrong number of args calling Redis command from script"), nil
	}
	if c.trackScript && !cmd.write {
		// Track the keys the script reads for its caller now, while the script still holds the
		// view: a change applied right after the script is then pushed, never missed. (A script
		// that writes a key after reading it hears of its own write unless NOLOOP, as on Redis.)
		for _, k := range cmd.keyArgs(args) {
			c.s.tracker.read(c, k)
		}
	}
	saved, savedCmd := c.w, c.cmd
	run.capture.Reset()
	c.w = resp.NewWriter(&run.capture)
	c.cmd = cmd
	cmd.run(c, args)
	c.w.Flush()
	c.w, c.cmd = saved, savedCmd
	v, rest, err := decodeValue(run.capture.Bytes())
	if err != nil || len(rest) != 0 {
		return script.Value{}, errors.New("ERR internal: undecodable reply inside a script")
	}
	return v, nil
}

// decodeValue parses one RESP2 reply written by our own writer.
func decodeValue(b []byte) (script.Value, []byte, error) {
	i := bytes.Index(b, []byte("\r\n"))
	if len(b) == 0 || i < 0 {
		return script.Value{}, nil, errors.New("short reply")
	}
	line, rest := b[1:i], b[i+2:]
	switch b[0] {
	case '+':
		return script.Value{Kind: script.KindStatus, Str: line}, rest, nil
	case '-':
		return script.Value{Kind: script.KindError, Str: line}, rest, nil
	case ':':
		n, _ := strconv.ParseInt(string(line), 10, 64)
		return script.Value{Kind: script.KindInt, Int: n}, rest, nil
	case '$':
		n, err := strconv.Atoi(string(line))
		if err != nil || n < -1 || n > len(rest) {
			return script.Value{}, nil, errors.New("bad bulk")
		}
		if n < 0 {
			return script.Value{Kind: script.KindNil}, rest, nil
		}
		return script.Value{Kind: script.KindBulk, Str: rest[:n]}, rest[n+2:], nil
	case '*':
		n, err := strconv.Atoi(string(line))
		if err != nil || n < -1 {
			return script.Value{}, nil, errors.New("bad array")
		}
		if n < 0 {
			return script.Value{Kind: script.KindNil}, rest, nil
		}
		v := script.Value{Kind: script.KindArray, Array: make([]script.Value, n)}
		for j := range v.Array {
			if v.Array[j], rest, err = decodeValue(rest); err != nil {
				return script.Value{}, nil, err
			}
		}
		return v, rest, nil
	}
	return script.Value{}, nil, errors.New("unknown reply type")
}

// writeValue writes a script's result to the client in its protocol.
func (c *conn) writeValue(v script.Value) {
	switch v.Kind {
	case script.KindNil:
		c.w.Null()
	case script.KindInt:
		c.w.Int(v.Int)
	case script.KindBulk:
		c.w.Bulk(v.Str)
	case script.KindStatus:
		c.w.SimpleString(string(v.Str))
	case script.KindError:
		c.w.Error(string(v.Str))
	case script.KindArray:
		c.w.Array(len(v.Array))
		for _, e := range v.Array {
			c.writeValue(e)
		}
	default:
		c.w.Null()
	}
}

func cmdEval(c *conn, args [][]byte)      { evalGeneric(c, args, false, false) }
func cmdEvalSHA(c *conn, args [][]byte)   { evalGeneric(c, args, true, false) }
func cmdEvalRO(c *conn, args [][]byte)    { evalGeneric(c, args, false, true) }
func cmdEvalSHARO(c *conn, args [][]byte) { evalGeneric(c, args, true, true) }

// evalGeneric runs EVAL/EVALSHA(_RO) script numkeys key... arg... on the leader's view. The
// script's redis.call effects become guarded commands replicated like any other write; the
// reply goes out after they applied, and only if they applied as the script saw them.
func evalGeneric(c *conn, args [][]byte, bySHA, readOnly bool) {
	if c.script != nil {
		c.w.Error("ERR This Redis command is not allowed from script")
		return
	}
	numkeys, ok := parseInt(args[2])
	switch {
	case !ok:
		c.w.Error(errNotInt)
		return
	case numkeys < 0:
		c.w.Error("ERR Number of keys can't be negative")
		return
	case numkeys > int64(len(args)-3):
		c.w.Error("ERR Number of keys can't be greater than number of args")
		return
	}
	keys, argv := args[3:3+numkeys], args[3+numkeys:]
	var src []byte
	var sha string
	if bySHA {
		sha = lower(args[1])
	} else {
		src = args[1]
		if len(src) > maxScriptBytes {
			c.w.Error("ERR script too large: raftlock scripts are at most " + itoa(maxScriptBytes) + " bytes")
			return
		}
		sha = script.SHA1Hex(src)
	}
	var (
		val      script.Value
		runErr   error
		noscript bool
		ov       *overlay
	)
	res, err := c.exec(keys, func(v fsm.View) []fsm.Command {
		val, runErr, noscript, ov = script.Value{}, nil, false, nil
		code := src
		_, known := v.Script(sha)
		if bySHA {
			s, ok := v.Script(sha)
			if !ok {
				noscript = true
				return nil
			}
			code = []byte(s)
		}
		ov = newOverlay(v)
		c.script = &scriptRun{ov: ov, readOnly: readOnly}
		val, runErr = c.s.scripts.Run(c.ctx, code, keys, argv, scriptCaller{c})
		c.script = nil
		// As in Redis, effects made before a runtime error stay: scripts are not rolled back.
		cmds := ov.cmds
		if !known && !readOnly && runErr == nil {
			// Cache it cluster-wide, so EVALSHA works on every node and after a failover.
			cmds = append(cmds, fsm.Command{Kind: fsm.KindStoreScript, Key: []byte(sha), Owner: src})
		}
		return cmds
	})
	if err != nil {
		c.replyError(err)
		return
	}
	if noscript {
		c.w.Error("NOSCRIPT No matching script. Please use EVAL.")
		return
	}
	for i := range ov.want {
		if i >= len(res) || res[i].Status != ov.want[i].Status {
			c.w.Error("ERR the script's effects did not apply as it saw them (a concurrent change intervened); " +
				"some may have been applied: read the keys before retrying")
			return
		}
	}
	if runErr != nil {
		c.w.Error(runErr.Error())
		return
	}
	c.writeValue(val)
}

// SCRIPT LOAD source | EXISTS sha... | FLUSH [ASYNC|SYNC] | KILL
func cmdScript(c *conn, args [][]byte) {
	sub := lower(args[1])
	switch {
	case sub == "load" && len(args) == 3:
		src := args[2]
		if len(src) > maxScriptBytes {
			c.w.Error("ERR script too large: raftlock scripts are at most " + itoa(maxScriptBytes) + " bytes")
			return
		}
		if err := c.s.scripts.Compile(src); err != nil {
			c.w.Error(err.Error())
			return
		}
		sha := script.SHA1Hex(src)
		_, err := c.exec([][]byte{[]byte(sha)}, func(v fsm.View) []fsm.Command {
			if _, ok := v.Script(sha); ok {
				return nil
			}
			return []fsm.Command{{Kind: fsm.KindStoreScript, Key: []byte(sha), Owner: src}}
		})
		if err != nil {
			c.replyError(err)
			return
		}
		c.w.BulkString(sha)
	case sub == "exists" && len(args) >= 3:
		found := make([]bool, len(args)-2)
		_, err := c.exec(nil, func(v fsm.View) []fsm.Command {
			for i, a := range args[2:] {
				_, found[i] = v.Script(lower(a))
			}
			return nil
		})
		if err != nil {
			c.replyError(err)
			return
		}
		c.w.Array(len(found))
		for _, f := range found {
			c.w.Int(b2i(f))
		}
	case sub == "flush" && (len(args) == 2 || len(args) == 3 && (is(args[2], "async") || is(args[2], "sync"))):
		_, err := c.exec(nil, func(v fsm.View) []fsm.Command {
			return []fsm.Command{{Kind: fsm.KindFlushScripts, Key: []byte("scripts")}}
		})
		if err != nil {
			c.replyError(err)
			return
		}
		c.w.SimpleString("OK")
	case sub == "kill" && len(args) == 2:
		c.w.Error("NOTBUSY No scripts in execution right now.")
	case sub == "load" || sub == "exists" || sub == "flush" || sub == "kill":
		c.w.Error("ERR wrong number of arguments for 'script|" + sub + "' command")
	default:
		c.w.Error("ERR unknown subcommand '" + string(appendSanitized(nil, args[1], 128)) + "'. Try SCRIPT HELP.")
	}
}
