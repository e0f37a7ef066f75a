package script

import (
	"math"

	lua "github.com/yuin/gopher-lua"
)

// bitLib builds the bit table: LuaBitOp 1.0.2 as Redis ships it (deps/lua/src/lua_bit.c),
// 32-bit operations on Lua 5.1's doubles whose results are signed 32-bit numbers.
func bitLib(L *lua.LState) *lua.LTable {
	t := L.CreateTable(0, 12)
	for name, f := range map[string]lua.LGFunction{
		"tobit":   func(L *lua.LState) int { return bitRet(L, bitArg(L, 1)) },
		"bnot":    func(L *lua.LState) int { return bitRet(L, ^bitArg(L, 1)) },
		"band":    bitFold(func(a, b uint32) uint32 { return a & b }),
		"bor":     bitFold(func(a, b uint32) uint32 { return a | b }),
		"bxor":    bitFold(func(a, b uint32) uint32 { return a ^ b }),
		"lshift":  bitShift(func(b, n uint32) uint32 { return b << n }),
		"rshift":  bitShift(func(b, n uint32) uint32 { return b >> n }),
		"arshift": bitShift(func(b, n uint32) uint32 { return uint32(int32(b) >> n) }),
		"rol":     bitShift(func(b, n uint32) uint32 { return b<<n | b>>(32-n) }),
		"ror":     bitShift(func(b, n uint32) uint32 { return b<<(32-n) | b>>n }),
		"bswap": func(L *lua.LState) int {
			b := bitArg(L, 1)
			return bitRet(L, b>>24|b>>8&0xff00|(b&0xff00)<<8|b<<24)
		},
		"tohex": bitToHex,
	} {
		t.RawSetString(name, L.NewFunction(f))
	}
	return t
}

// bitArg is LuaBitOp's barg: argument n modulo 2^32, rounded to the nearest integer (ties to
// even) as the FPU does when it adds 2^52+2^51 and the low 32 bits of the double are taken.
// Numbers too large for that trick give what it gives (2^53+1 and up lose their low bits).
// A string is converted (lua_tonumber); anything else is an error, unless it converts to 0.
func bitArg(L *lua.LState, n int) uint32 {
	f, ok := toNumber(L.Get(n))
	if !ok {
		f = 0
	}
	b := uint32(math.Float64bits(f + 6755399441055744.0))
	if b == 0 && !ok {
		typeError(L, n, "number")
	}
	return b
}

func bitRet(L *lua.LState, b uint32) int {
	L.Push(lua.LNumber(int32(b)))
	return 1
}

// bitFold is band, bor and bxor: all arguments folded, converted from the last to the first
// (so the last bad argument is the one reported, as LuaBitOp does).
func bitFold(op func(a, b uint32) uint32) lua.LGFunction {
	return func(L *lua.LState) int {
		b := bitArg(L, 1)
		for i := L.GetTop(); i > 1; i-- {
			b = op(b, bitArg(L, i))
		}
		return bitRet(L, b)
	}
}

// bitShift is a shift or rotation by argument 2 modulo 32.
func bitShift(op func(b, n uint32) uint32) lua.LGFunction {
	return func(L *lua.LState) int {
		b := bitArg(L, 1)
		n := bitArg(L, 2) & 31
		return bitRet(L, op(b, n))
	}
}

// bitToHex is bit.tohex(x [, n]): the low |n| hex digits of x (n defaults to 8, at most 8),
// upper case when n is negative.
func bitToHex(L *lua.LState) int {
	b := bitArg(L, 1)
	n := int32(8)
	if L.GetTop() >= 2 {
		n = int32(bitArg(L, 2))
	}
	digits := "0123456789abcdef"
	if n == math.MinInt32 {
		n = math.MinInt32 + 1
	}
	if n < 0 {
		n, digits = -n, "0123456789ABCDEF"
	}
	n = min(n, 8)
	var buf [8]byte
	for i := n - 1; i >= 0; i-- {
		buf[i] = digits[b&15]
		b >>= 4
	}
	L.Push(lua.LString(buf[:n]))
	return 1
}
