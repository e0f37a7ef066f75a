package script

import (
	"strings"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/ast"
)

// Memory charged where it is allocated. The periodic look at the heap (runCtx.checkMemory,
// every few thousand instructions) cannot stop a script that makes one large string per
// instruction: 20 string.rep('x', 64 MiB) in a row, or s = s .. s doubling, are a few
// instructions and gigabytes. So every library function that can build a large string in one
// call (string.rep, .., table.concat, string.format, gsub, upper, lower, reverse, and the
// results of cjson.encode, cmsgpack.pack and struct.pack) asks the run for the room first (vm.reserve): past
// the memory limit, the run stops with the memory-limit error before the allocation happens.

// reserveMin is the smallest allocation checked before it is made: smaller ones are left to
// the periodic check, which they cannot outrun by much (checkEvery instructions of them).
const reserveMin = 64 << 10

// reserve stops the run, before it allocates n bytes, if that would take it past its memory
// limit (or if the run must stop for another reason).
func (m *vm) reserve(L *lua.LState, n int) {
	if n < reserveMin {
		return
	}
	if n >= heavyBytes {
		m.notHoldingView(L)
	}
	if !m.rc.reserve(uint64(n)) {
		L.RaiseError("%s", errKilled.Error())
	}
}

// heavyBytes and heavyChunk are the string a run on a budget (RunBudget: the server's view
// lock is held) does not build, and the chunk it does not compile, in one call: copying 64 MiB
// or compiling 256 KiB of Lua takes tens to hundreds of milliseconds that no check interrupts.
// The run stops with ErrBudget instead, and runs again without the lock.
const (
	heavyBytes = 1 << 20
	heavyChunk = 4 << 10
)

// notHoldingView stops a run on a budget before work too long to do holding the view lock.
func (m *vm) notHoldingView(L *lua.LState) {
	if m.rc.budget > 0 && m.rc.done == nil {
		m.rc.overBudget()
		L.RaiseError("%s", errKilled.Error())
	}
}

// luaBuffer builds a string for a Lua library function (luaL_Buffer), charging its growth to
// the run's memory and making the run's checks as it grows.
type luaBuffer struct {
	m       *vm
	L       *lua.LState
	b       strings.Builder
	charged int
}

func (b *luaBuffer) grow(n int) {
	need := b.b.Len() + n
	if need <= b.charged {
		return
	}
	// Charge the next doubling at once: the builder grows that way.
	next := max(need, 2*b.charged, reserveMin)
	b.m.reserve(b.L, next)
	b.m.checkNow(b.L)
	b.b.Grow(next - b.b.Len()) // exactly what was charged (append would grow by 1.25 at a time)
	b.charged = next
}

func (b *luaBuffer) addByte(c byte) {
	if b.b.Len() >= b.charged {
		b.grow(1)
	}
	b.b.WriteByte(c)
}

func (b *luaBuffer) addString(s string) {
	if b.b.Len()+len(s) > b.charged {
		b.grow(len(s))
	}
	b.b.WriteString(s)
}

func (b *luaBuffer) value() lua.LString { return lua.LString(b.b.String()) }

// strRep is string.rep, bounded by maxRepBytes and charged before it allocates.
func (m *vm) strRep(L *lua.LState) int {
	s := L.CheckString(1)
	n := L.CheckInt(2)
	if n <= 0 || s == "" {
		L.Push(lua.LString(""))
		return 1
	}
	if len(s) > maxRepBytes/n {
		raiseLua(L, "resulting string too large")
	}
	m.reserve(L, len(s)*n)
	L.Push(lua.LString(strings.Repeat(s, n)))
	return 1
}

// sameSize wraps a string function whose result is as long as its first argument (upper,
// lower, reverse): the copy is charged first.
func (m *vm) sameSize(f lua.LGFunction) lua.LGFunction {
	return func(L *lua.LState) int {
		if s, ok := L.Get(1).(lua.LString); ok {
			m.reserve(L, len(s))
		}
		return f(L)
	}
}

// tableConcat wraps gopher-lua's table.concat: it adds up the result's length first (making
// the run's checks as it goes, a table can be long) and charges it.
func (m *vm) tableConcat(orig lua.LGFunction) lua.LGFunction {
	return func(L *lua.LState) int {
		tbl, ok := L.Get(1).(*lua.LTable)
		if !ok {
			return orig(L) // its own error
		}
		sep, _ := stringish(L.Get(2))
		n := tbl.Len()
		i, j := 1, n
		if v, ok := L.Get(3).(lua.LNumber); ok {
			i = int(v)
		}
		if v, ok := L.Get(4).(lua.LNumber); ok {
			j = int(v)
		}
		i, j = max(i, 1), min(j, n)
		size := 0
		for k := i; k <= j; k++ {
			if k%patternCheckEvery == 0 {
				m.checkNow(L)
			}
			s, ok := stringish(tbl.RawGetInt(k))
			if !ok {
				break // the original raises the error
			}
			size += len(s) + len(sep)
			if size > maxConcatCheck {
				break
			}
		}
		m.reserve(L, size)
		return orig(L)
	}
}

// maxConcatCheck stops tableConcat's count once it passes what any run may hold: reserve
// refuses it anyway.
const maxConcatCheck = 1 << 40

// strFormat wraps gopher-lua's string.format (Go's fmt underneath, which takes any width): it
// refuses widths and precisions of more than two digits as Lua 5.1 does ("invalid format
// (width or precision too long)"), and charges a bound of the result first.
func (m *vm) strFormat(orig lua.LGFunction) lua.LGFunction {
	return func(L *lua.LState) int {
		f, ok := L.Get(1).(lua.LString)
		if !ok {
			return orig(L)
		}
		size := len(f)
		for i := 0; i < len(f); i++ {
			if f[i] != '%' {
				continue
			}
			if i++; i < len(f) && f[i] == '%' {
				continue
			}
			for i < len(f) && strings.IndexByte("-+ #0", f[i]) >= 0 {
				i++
			}
			digits := 0
			for ; i < len(f) && '0' <= f[i] && f[i] <= '9'; i++ {
				digits++
			}
			if i < len(f) && f[i] == '.' {
				i++
				prec := 0
				for ; i < len(f) && '0' <= f[i] && f[i] <= '9'; i++ {
					prec++
				}
				digits = max(digits, prec)
			}
			if digits > 2 {
				raiseLua(L, "invalid format (width or precision too long)")
			}
			size += 200 // a number, or the padding of a string, at most 99 + 99 bytes
		}
		for k := 2; k <= L.GetTop(); k++ {
			if s, ok := L.Get(k).(lua.LString); ok {
				size += 2 * len(s) // %q escapes
			}
		}
		m.reserve(L, size)
		return orig(L)
	}
}

// concatName is the global a script's .. operator calls (see concatCalls): no Lua source can
// name it, so no script can shadow it, and pairs(_G) does not list it.
const concatName = "\x00concat"

// maxConcatArgs bounds the operands of one call of the concatenation function: longer chains
// are split (gopher-lua allows 200 registers per function).
const maxConcatArgs = 64

// concat is the .. operator: gopher-lua's OP_CONCAT (stringConcat), with the result's size
// charged before it is built. The operands come in order; as in Lua, runs of strings and
// numbers are joined from the right, and a __concat metamethod handles the rest.
func (m *vm) concat(L *lua.LState) int {
	top := L.GetTop()
	rhs := L.Get(top)
	for i := top - 1; i >= 1; {
		lhs := L.Get(i)
		if !lua.LVCanConvToString(lhs) || !lua.LVCanConvToString(rhs) {
			op := L.GetMetaField(lhs, "__concat")
			if op == lua.LNil {
				op = L.GetMetaField(rhs, "__concat")
			}
			if op.Type() != lua.LTFunction {
				L.RaiseError("cannot perform concat operation between %v and %v", lhs.Type().String(), rhs.Type().String())
			}
			L.Push(op)
			L.Push(lhs)
			L.Push(rhs)
			L.Call(2, 1)
			rhs = L.Get(-1)
			L.Pop(1)
			i--
			continue
		}
		// A run of strings and numbers ending at rhs: [j, i] and rhs.
		j, size := i, len(lua.LVAsString(rhs))
		for ; j >= 1 && lua.LVCanConvToString(L.Get(j)); j-- {
			size += len(lua.LVAsString(L.Get(j)))
		}
		m.reserve(L, size)
		var b strings.Builder
		b.Grow(size)
		for k := j + 1; k <= i; k++ {
			b.WriteString(lua.LVAsString(L.Get(k)))
		}
		b.WriteString(lua.LVAsString(rhs))
		rhs = lua.LString(b.String())
		i = j
	}
	L.Push(rhs)
	return 1
}

// concatCalls rewrites every .. of a chunk into a call of the concatenation function (concat),
// which charges the result's size first: gopher-lua's OP_CONCAT allocates with no hook. A chain
// a .. b .. c becomes one call with the operands in order.
func concatCalls(stmts []ast.Stmt) {
	w := concatRewriter{}
	w.stmts(stmts)
}

type concatRewriter struct{}

func (w concatRewriter) stmts(stmts []ast.Stmt) {
	for _, s := range stmts {
		w.stmt(s)
	}
}

func (w concatRewriter) exprs(exprs []ast.Expr) {
	for i := range exprs {
		exprs[i] = w.expr(exprs[i])
	}
}

func (w concatRewriter) stmt(s ast.Stmt) {
	switch s := s.(type) {
	case *ast.AssignStmt:
		w.exprs(s.Lhs)
		w.exprs(s.Rhs)
	case *ast.LocalAssignStmt:
		w.exprs(s.Exprs)
	case *ast.FuncCallStmt:
		s.Expr = w.expr(s.Expr)
	case *ast.DoBlockStmt:
		w.stmts(s.Stmts)
	case *ast.WhileStmt:
		s.Condition = w.expr(s.Condition)
		w.stmts(s.Stmts)
	case *ast.RepeatStmt:
		w.stmts(s.Stmts)
		s.Condition = w.expr(s.Condition)
	case *ast.IfStmt:
		s.Condition = w.expr(s.Condition)
		w.stmts(s.Then)
		w.stmts(s.Else)
	case *ast.NumberForStmt:
		s.Init, s.Limit, s.Step = w.expr(s.Init), w.expr(s.Limit), w.expr(s.Step)
		w.stmts(s.Stmts)
	case *ast.GenericForStmt:
		w.exprs(s.Exprs)
		w.stmts(s.Stmts)
	case *ast.FuncDefStmt:
		s.Func = w.expr(s.Func).(*ast.FunctionExpr)
		if s.Name != nil {
			s.Name.Func, s.Name.Receiver = w.expr(s.Name.Func), w.expr(s.Name.Receiver)
		}
	case *ast.ReturnStmt:
		w.exprs(s.Exprs)
	}
}

func (w concatRewriter) expr(e ast.Expr) ast.Expr {
	switch x := e.(type) {
	case nil:
		return nil
	case *ast.AttrGetExpr:
		x.Object, x.Key = w.expr(x.Object), w.expr(x.Key)
	case *ast.TableExpr:
		for _, f := range x.Fields {
			f.Key, f.Value = w.expr(f.Key), w.expr(f.Value)
		}
	case *ast.FuncCallExpr:
		x.Func, x.Receiver = w.expr(x.Func), w.expr(x.Receiver)
		w.exprs(x.Args)
	case *ast.LogicalOpExpr:
		x.Lhs, x.Rhs = w.expr(x.Lhs), w.expr(x.Rhs)
	case *ast.RelationalOpExpr:
		x.Lhs, x.Rhs = w.expr(x.Lhs), w.expr(x.Rhs)
	case *ast.ArithmeticOpExpr:
		x.Lhs, x.Rhs = w.expr(x.Lhs), w.expr(x.Rhs)
	case *ast.UnaryMinusOpExpr:
		x.Expr = w.expr(x.Expr)
	case *ast.UnaryNotOpExpr:
		x.Expr = w.expr(x.Expr)
	case *ast.UnaryLenOpExpr:
		x.Expr = w.expr(x.Expr)
	case *ast.FunctionExpr:
		w.stmts(x.Stmts)
	case *ast.StringConcatOpExpr:
		var operands []ast.Expr
		var cur ast.Expr = x
		for {
			c, ok := cur.(*ast.StringConcatOpExpr)
			if !ok {
				break
			}
			operands = append(operands, w.expr(c.Lhs))
			cur = c.Rhs
		}
		operands = append(operands, w.expr(cur))
		for _, o := range operands {
			// An operand of .. is one value, as if in parentheses: the last argument of a
			// call would otherwise pass every value a call or ... gives.
			switch o := o.(type) {
			case *ast.FuncCallExpr:
				o.AdjustRet = true
			case *ast.Comma3Expr:
				o.AdjustRet = true
			}
		}
		return concatCall(operands, x.Line(), x.LastLine())
	}
	return e
}

// concatCall is the call that concatenates operands, split every maxConcatArgs: the last
// argument of a call is the call for the rest, so the rest is joined first, as .. does.
func concatCall(operands []ast.Expr, line, lastLine int) ast.Expr {
	args := operands
	if len(operands) > maxConcatArgs {
		args = append(operands[:maxConcatArgs-1:maxConcatArgs-1], concatCall(operands[maxConcatArgs-1:], line, lastLine))
	}
	fn := &ast.IdentExpr{Value: concatName}
	fn.SetLine(line)
	fn.SetLastLine(lastLine)
	call := &ast.FuncCallExpr{Func: fn, Args: args, AdjustRet: true}
	call.SetLine(line)
	call.SetLastLine(lastLine)
	return call
}
