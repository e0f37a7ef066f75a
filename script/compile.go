package script

import (
	"bytes"
	"container/list"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"sync"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/ast"
	"github.com/yuin/gopher-lua/parse"
)

// SHA1Hex returns src's identity for EVALSHA and SCRIPT LOAD: the lowercase hex SHA1 of the
// whole source, shebang line included (as redis.sha1hex computes it).
func SHA1Hex(src []byte) string {
	sum := sha1.Sum(src)
	return hex.EncodeToString(sum[:])
}

// chunkName is the name scripts are compiled under: Redis loads them as "@user_script", which
// Lua prints as "user_script" in error positions.
const chunkName = "user_script"

// Flags are the flags of a script's shebang line, Redis 7's "#!lua flags=no-writes,...".
type Flags uint8

// The shebang flags, as Redis 7.0 names them (scripts_flags_def).
const (
	FlagNoWrites Flags = 1 << iota
	FlagAllowOOM
	FlagAllowStale
	FlagNoCluster
	FlagAllowCrossSlotKeys
	// FlagShebang is set when the script has a #!lua line at all: Redis runs a script without
	// one in "EVAL compatibility mode" (it may write unless run by EVAL_RO, etc.).
	FlagShebang
)

var flagNames = []struct {
	name string
	flag Flags
}{
	{"no-writes", FlagNoWrites},
	{"allow-oom", FlagAllowOOM},
	{"allow-stale", FlagAllowStale},
	{"no-cluster", FlagNoCluster},
	{"allow-cross-slot-keys", FlagAllowCrossSlotKeys},
}

// ParseFlags reads src's shebang line, if any, with Redis 7.0's rules and error texts
// (eval.c evalExtractShebangFlags). The server decides what the flags mean (no-writes makes
// EVAL behave as EVAL_RO). Run and Compile check the shebang too and skip its line, keeping
// its line feed so that line numbers stay the user's.
func ParseFlags(src []byte) (Flags, error) {
	f, _, err := shebang(src)
	return f, err
}

// shebang returns the flags and the length of the shebang line (without its line feed).
func shebang(src []byte) (Flags, int, error) {
	if !bytes.HasPrefix(src, []byte("#!")) {
		return 0, 0, nil
	}
	end := bytes.IndexByte(src, '\n')
	if end < 0 {
		return 0, 0, shebangError("Invalid script shebang")
	}
	parts := strings.Fields(string(src[:end]))
	if parts[0] != "#!lua" {
		return 0, 0, shebangError("Unexpected engine in script shebang: " + parts[0])
	}
	flags := FlagShebang
	for _, p := range parts[1:] {
		list, ok := strings.CutPrefix(p, "flags=")
		if !ok {
			return 0, 0, shebangError("Unknown lua shebang option: " + p)
		}
		if list == "" {
			continue
		}
	next:
		for name := range strings.SplitSeq(list, ",") {
			for _, f := range flagNames {
				if f.name == name {
					flags |= f.flag
					continue next
				}
			}
			return 0, 0, shebangError("Unexpected flag in script shebang: " + name)
		}
	}
	return flags, end, nil
}

func shebangError(msg string) *Error { return &Error{Msg: "ERR " + msg, Err: ErrCompile} }

// compile compiles a script's source (after its shebang line) into a prototype that every VM
// can run: gopher-lua prototypes are immutable once compiled.
func compile(src []byte) (*lua.FunctionProto, error) {
	_, n, err := shebang(src)
	if err != nil {
		return nil, err
	}
	proto, msg := compileChunk(src[n:], chunkName)
	if msg != "" {
		return nil, &Error{Msg: mapCRLF("ERR Error compiling script (new function): " + msg), Err: ErrCompile}
	}
	return proto, nil
}

// compileChunk compiles body, returning any error as Lua 5.1 words it, with display as the
// chunk's printed name ("user_script:1: unexpected symbol near '<eof>'").
func compileChunk(body []byte, display string) (*lua.FunctionProto, string) {
	chunk, err := parse.Parse(bytes.NewReader(body), display)
	if err != nil {
		return nil, parseErrorText(err, body, display)
	}
	if line, deep := tooDeep(chunk); deep {
		return nil, display + ":" + strconv.Itoa(line) + ": chunk has too many syntax levels"
	}
	concatCalls(chunk)
	proto, err := lua.Compile(chunk, display)
	if err != nil {
		var ce *lua.CompileError
		if errors.As(err, &ce) {
			return nil, display + ":" + strconv.Itoa(ce.Line) + ": " + ce.Message
		}
		return nil, display + ": " + err.Error()
	}
	// A chunk is a vararg function, for which gopher-lua builds Lua 5.0's "arg" table on
	// every call, though a chunk has no local of that name to reach it (Lua 5.1 neither):
	// half the cost of a short run, for nothing.
	proto.IsVarArg &^= lua.VarArgNeedsArg
	return proto, ""
}

// parseMessages maps gopher-lua's parse errors onto Lua 5.1's words. Its grammar reports
// every grammar error as "syntax error", where Lua names what it expected ("'end' expected");
// those all become Lua's most common message, "unexpected symbol".
var parseMessages = map[string]string{
	"syntax error":                  "unexpected symbol",
	"unterminated string":           "unfinished string",
	"unterminated multiline string": "unfinished long string",
	"invalid multiline comment":     "unfinished long comment",
	"invalid multiline string":      "invalid long string delimiter",
	"illegal hexadecimal number":    "malformed number",
	"Invalid token":                 "unexpected symbol",
	"Invalid '~' token":             "unexpected symbol",
}

func parseErrorText(err error, body []byte, display string) string {
	var pe *parse.Error
	if !errors.As(err, &pe) {
		return display + ": " + strings.TrimSpace(err.Error())
	}
	msg := pe.Message
	if m, ok := parseMessages[msg]; ok {
		msg = m
	}
	line, near := pe.Pos.Line, "'"+pe.Token+"'"
	if line == parse.EOF {
		// Lua reports the line it reached: the last one.
		line, near = bytes.Count(body, []byte("\n"))+1, "'<eof>'"
	}
	return display + ":" + strconv.Itoa(line) + ": " + msg + " near " + near
}

// maxSyntaxLevels is Lua 5.1's LUAI_MAXCCALLS: how deeply blocks and expressions may nest
// ("chunk has too many syntax levels", which Redis 7.0.15 answers at about 200 nested
// parentheses, tables or ifs). gopher-lua has no such limit, and compiles deep nests in
// quadratic time: a 256 KiB script of nested ifs takes seconds.
const maxSyntaxLevels = 200

// tooDeep reports whether chunk nests blocks, functions, tables or calls deeper than
// maxSyntaxLevels, and the line where it does. Operator chains (a..b..c, 1+2+3) do not count:
// Lua parses a long left-associative chain without nesting, and gopher-lua compiles them fast.
func tooDeep(chunk []ast.Stmt) (int, bool) {
	d := depthCheck{}
	d.stmts(chunk, 0)
	return d.line, d.deep
}

type depthCheck struct {
	deep bool
	line int
}

func (d *depthCheck) over(level int, line int) bool {
	if d.deep {
		return true
	}
	if level > maxSyntaxLevels {
		d.deep, d.line = true, line
	}
	return d.deep
}

func (d *depthCheck) stmts(stmts []ast.Stmt, level int) {
	for _, s := range stmts {
		if d.over(level, s.Line()) {
			return
		}
		d.stmt(s, level)
	}
}

func (d *depthCheck) exprs(exprs []ast.Expr, level int) {
	for _, e := range exprs {
		d.expr(e, level)
	}
}

func (d *depthCheck) stmt(s ast.Stmt, level int) {
	switch s := s.(type) {
	case *ast.AssignStmt:
		d.exprs(s.Lhs, level)
		d.exprs(s.Rhs, level)
	case *ast.LocalAssignStmt:
		d.exprs(s.Exprs, level)
	case *ast.FuncCallStmt:
		d.expr(s.Expr, level)
	case *ast.DoBlockStmt:
		d.stmts(s.Stmts, level+1)
	case *ast.WhileStmt:
		d.expr(s.Condition, level)
		d.stmts(s.Stmts, level+1)
	case *ast.RepeatStmt:
		d.stmts(s.Stmts, level+1)
		d.expr(s.Condition, level)
	case *ast.IfStmt:
		// An elseif chain is one level deep, however long: gopher-lua nests it as else { if }.
		for s != nil {
			d.expr(s.Condition, level)
			d.stmts(s.Then, level+1)
			if len(s.Else) == 1 {
				if next, ok := s.Else[0].(*ast.IfStmt); ok {
					s = next
					continue
				}
			}
			d.stmts(s.Else, level+1)
			s = nil
		}
	case *ast.NumberForStmt:
		d.expr(s.Init, level)
		d.expr(s.Limit, level)
		d.expr(s.Step, level)
		d.stmts(s.Stmts, level+1)
	case *ast.GenericForStmt:
		d.exprs(s.Exprs, level)
		d.stmts(s.Stmts, level+1)
	case *ast.FuncDefStmt:
		d.expr(s.Func, level)
	case *ast.ReturnStmt:
		d.exprs(s.Exprs, level)
	}
}

func (d *depthCheck) expr(e ast.Expr, level int) {
	// Operator chains are followed in a loop, at the same level, so that a long one costs no
	// recursion here.
	for e != nil {
		if d.over(level, e.Line()) {
			return
		}
		switch x := e.(type) {
		case *ast.AttrGetExpr:
			d.expr(x.Key, level+1)
			e = x.Object
		case *ast.TableExpr:
			for _, f := range x.Fields {
				d.expr(f.Key, level+1)
				d.expr(f.Value, level+1)
			}
			return
		case *ast.FuncCallExpr:
			d.exprs(x.Args, level+1)
			d.expr(x.Receiver, level+1)
			e = x.Func
			level++
		case *ast.LogicalOpExpr:
			d.expr(x.Rhs, level)
			e = x.Lhs
		case *ast.RelationalOpExpr:
			d.expr(x.Rhs, level)
			e = x.Lhs
		case *ast.StringConcatOpExpr:
			d.expr(x.Lhs, level)
			e = x.Rhs
		case *ast.ArithmeticOpExpr:
			d.expr(x.Rhs, level)
			e = x.Lhs
		case *ast.UnaryMinusOpExpr:
			e = x.Expr
		case *ast.UnaryNotOpExpr:
			e = x.Expr
		case *ast.UnaryLenOpExpr:
			e = x.Expr
		case *ast.FunctionExpr:
			d.stmts(x.Stmts, level+1)
			return
		default:
			return
		}
	}
}

// protoCache keeps compiled scripts, least recently used out first. It is keyed by the source
// itself rather than by its SHA1: a lookup then costs a map access instead of hashing the
// source, a sizeable part of a short run's time, and the SHA1 is kept with the prototype.
type protoCache struct {
	max int
	mu  struct {
		sync.Mutex
		lru   *list.List // of *cached, most recent first
		bySrc map[string]*list.Element
		bySHA map[string]*list.Element
	}
}

type cached struct {
	src   string
	sha   string
	proto *lua.FunctionProto
	// native is the script's Go form, nil for most (native.go).
	native nativeForm
}

func newProtoCache(max int) *protoCache {
	c := &protoCache{max: max}
	c.mu.lru = list.New()
	c.mu.bySrc = make(map[string]*list.Element)
	c.mu.bySHA = make(map[string]*list.Element)
	return c
}

func (c *protoCache) get(src []byte) (*cached, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.mu.bySrc[string(src)]
	if !ok {
		return nil, false
	}
	c.mu.lru.MoveToFront(el)
	return el.Value.(*cached), true
}

func (c *protoCache) put(s *cached) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, ok := c.mu.bySrc[s.src]; ok {
		c.mu.lru.MoveToFront(el)
		return
	}
	el := c.mu.lru.PushFront(s)
	c.mu.bySrc[s.src], c.mu.bySHA[s.sha] = el, el
	for c.mu.lru.Len() > c.max {
		old := c.mu.lru.Remove(c.mu.lru.Back()).(*cached)
		delete(c.mu.bySrc, old.src)
		delete(c.mu.bySHA, old.sha)
	}
}

// hasSHA reports whether the script of this SHA1 is compiled and kept.
func (c *protoCache) hasSHA(sha string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.mu.bySHA[sha]
	return ok
}

func (c *protoCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.lru.Len()
}
