package script

import (
	"fmt"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// Argument checks for the Go functions that stand in for Redis's C libraries (bit, cjson,
// struct, cmsgpack), with Lua 5.1's lauxlib semantics and error texts. gopher-lua's own
// checks word their errors differently ("bad argument #1 to tobit" without quotes, no
// "no value") and convert numbers to strings with Go's format instead of %.14g.

// funcName is the name luaL_argerror gives the running Go function: the field or variable its
// Lua caller called it by (bit.tobit(x) -> "tobit", local f = bit.tobit; f(x) -> "f"), or
// "?" when a Go function such as pcall called it.
func funcName(L *lua.LState) string {
	dbg, ok := L.GetStack(0)
	if !ok {
		return "?"
	}
	if _, err := L.GetInfo("n", dbg, lua.LNil); err != nil {
		return "?"
	}
	// gopher-lua names a function called by Go "(anonymous)" and one reached through an
	// expression it cannot name "<chunk:line>".
	if dbg.Name == "" || dbg.Name == "(anonymous)" || strings.HasPrefix(dbg.Name, "<") {
		return "?"
	}
	return dbg.Name
}

// argError is luaL_argerror: "bad argument #n to 'name' (msg)", with the caller's position.
func argError(L *lua.LState, n int, msg string) {
	raiseLua(L, fmt.Sprintf("bad argument #%d to '%s' (%s)", n, funcName(L), msg))
}

// typeError is luaL_typerror: argument n is not a want.
func typeError(L *lua.LState, n int, want string) {
	argError(L, n, want+" expected, got "+typeName(L, n))
}

// typeName is luaL_typename: "no value" past the last argument.
func typeName(L *lua.LState, n int) string {
	if n > L.GetTop() {
		return "no value"
	}
	return L.Get(n).Type().String()
}

// checkNumber is luaL_checknumber: a number, or a string that holds one.
func checkNumber(L *lua.LState, n int) float64 {
	f, ok := toNumber(L.Get(n))
	if !ok {
		typeError(L, n, "number")
	}
	return f
}

// checkInteger is luaL_checkinteger: checkNumber cast to lua_Integer (ptrdiff_t), which
// truncates toward zero and gives math.MinInt64 for NaN and out of range values on x86-64.
func checkInteger(L *lua.LState, n int) int64 {
	return truncInt(checkNumber(L, n))
}

// optInteger is luaL_optinteger: def when argument n is absent or nil.
func optInteger(L *lua.LState, n int, def int64) int64 {
	if L.Get(n) == lua.LNil {
		return def
	}
	return checkInteger(L, n)
}

// checkString is luaL_checklstring: a string, or a number as its %.14g text.
func checkString(L *lua.LState, n int) string {
	s, ok := stringish(L.Get(n))
	if !ok {
		typeError(L, n, "string")
	}
	return s
}

// checkOption is luaL_checkoption with no default: the index of argument n in options.
func checkOption(L *lua.LState, n int, options []string) int {
	s := checkString(L, n)
	for i, o := range options {
		if s == o {
			return i
		}
	}
	argError(L, n, "invalid option '"+s+"'")
	return 0
}

// checkStack is luaL_checkstack for functions that push many values: Lua 5.1 refuses to grow a
// C function's stack past luaiMaxCStack slots, counting its arguments.
func checkStack(L *lua.LState, used, extra int, what string) {
	if used+extra > luaiMaxCStack {
		raiseLua(L, "stack overflow ("+what+")")
	}
}

// luaiMaxCStack is Lua 5.1's LUAI_MAXCSTACK: the most stack slots a C function may use.
const luaiMaxCStack = 8000
