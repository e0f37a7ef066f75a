package script

import (
	"encoding/binary"
	"fmt"
	"math"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// structLib builds the struct table: Roberto Ierusalimschy's struct library as Redis ships it
// (deps/lua/src/lua_struct.c, on x86-64: long and size_t are 8 bytes, the native order is
// little endian, the largest alignment 8). Formats: > < (big, little endian), !n (alignment),
// space; b B h H l L T i[n] I[n] (integers, n up to 32 bytes), f d, c[n] (n bytes; c0: the
// whole string when packing, the previous value's length when unpacking), s (zero-terminated),
// x (a zero byte). There is no '=' and no 'z', as in Redis.
func (m *vm) structLib() *lua.LTable {
	L := m.L
	t := L.CreateTable(0, 3)
	t.RawSetString("pack", L.NewFunction(func(L *lua.LState) int { return structPack(L, m) }))
	t.RawSetString("unpack", L.NewFunction(structUnpack))
	t.RawSetString("size", L.NewFunction(structSize))
	return t
}

const (
	structMaxIntSize = 32 // MAXINTSIZE
	structMaxAlign   = 8  // MAXALIGN on x86-64
)

type structHeader struct {
	big   bool
	align uint64
}

// structFormat walks a format string as lua_struct.c does. The format ends at its first NUL
// byte: lua_struct.c reads it as a C string.
type structFormat struct {
	L   *lua.LState
	fmt string
	i   int
	h   structHeader
}

func newStructFormat(L *lua.LState) *structFormat {
	f := checkString(L, 1)
	if n := strings.IndexByte(f, 0); n >= 0 {
		f = f[:n]
	}
	return &structFormat{L: L, fmt: f, h: structHeader{align: 1}}
}

func (f *structFormat) more() bool { return f.i < len(f.fmt) }

func (f *structFormat) next() byte {
	c := f.fmt[f.i]
	f.i++
	return c
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// num is getnum: the decimal number at the cursor, or df if there is none.
func (f *structFormat) num(df int) int {
	if !f.more() || !isDigit(f.fmt[f.i]) {
		return df
	}
	a := 0
	for f.more() && isDigit(f.fmt[f.i]) {
		d := int(f.fmt[f.i] - '0')
		if a > math.MaxInt32/10 || a*10 > math.MaxInt32-d {
			raiseLua(f.L, "integral size overflow")
		}
		a = a*10 + d
		f.i++
	}
	return a
}

// size is optsize: the size of the option just read (0 for options without one).
func (f *structFormat) size(opt byte) uint64 {
	switch opt {
	case 'B', 'b':
		return 1
	case 'H', 'h':
		return 2
	case 'L', 'l', 'T', 'd':
		return 8
	case 'f':
		return 4
	case 'x':
		return 1
	case 'c':
		return uint64(f.num(1))
	case 'i', 'I':
		sz := f.num(4)
		if sz > structMaxIntSize {
			raiseLua(f.L, fmt.Sprintf("integral size %d is larger than limit of %d", sz, structMaxIntSize))
		}
		return uint64(sz)
	}
	return 0
}

// toAlign is gettoalign: the padding before an option of size at offset n (size_t
// arithmetic, so a size that is not a power of 2 pads as lua_struct.c pads it).
func (f *structFormat) toAlign(n uint64, opt byte, size uint64) uint64 {
	if size == 0 || opt == 'c' {
		return 0
	}
	size = min(size, f.h.align)
	return (size - (n & (size - 1))) & (size - 1)
}

// control is controloptions: the options that set the byte order and alignment.
func (f *structFormat) control(opt byte) {
	switch opt {
	case ' ':
	case '>':
		f.h.big = true
	case '<':
		f.h.big = false
	case '!':
		a := f.num(structMaxAlign)
		if a <= 0 || a&(a-1) != 0 {
			raiseLua(f.L, fmt.Sprintf("alignment %d is not a power of 2", a))
		}
		f.h.align = uint64(a)
	default:
		argError(f.L, 1, "invalid format option '"+string([]byte{opt})+"'")
	}
}

// cUlong is C's (unsigned long) conversion of a double as gcc compiles it for x86-64:
// truncation, values of 2^63 and up through the signed conversion of d-2^63, and
// 0x8000000000000000 where the signed conversion is out of range (NaN, negative numbers
// below -2^63); so 2^64 and up give 0.
func cUlong(d float64) uint64 {
	if d < 1<<63 || d != d {
		return uint64(truncInt(d))
	}
	return uint64(truncInt(d-(1<<63))) ^ 1<<63
}

// structInteger is putinteger's conversion: negative numbers through long, others through
// unsigned long.
func structInteger(n float64) uint64 {
	if n < 0 {
		return uint64(truncInt(n))
	}
	return cUlong(n)
}

func structPack(L *lua.LState, m *vm) int {
	f := newStructFormat(L)
	arg := 2
	// b_pack's mark between the arguments and its buffer: a missing argument is the nil
	// after the last one ("number expected, got nil"), then no value.
	L.Push(lua.LNil)
	var b []byte
	var total uint64
	for f.more() {
		opt := f.next()
		size := f.size(opt)
		pad := f.toAlign(total, opt, size)
		total += pad
		for range pad {
			b = append(b, 0)
		}
		switch opt {
		case 'b', 'B', 'h', 'H', 'l', 'L', 'T', 'i', 'I':
			v := structInteger(checkNumber(L, arg))
			arg++
			start := len(b)
			for range size {
				b = append(b, byte(v))
				v >>= 8
			}
			if f.h.big {
				reverse(b[start:])
			}
		case 'x':
			b = append(b, 0)
		case 'f':
			v := float32(checkNumber(L, arg))
			arg++
			b = appendFloat(b, uint64(math.Float32bits(v)), 4, f.h.big)
		case 'd':
			v := checkNumber(L, arg)
			arg++
			b = appendFloat(b, math.Float64bits(v), 8, f.h.big)
		case 'c', 's':
			s := checkString(L, arg)
			arg++
			if size == 0 {
				size = uint64(len(s))
			}
			if uint64(len(s)) < size {
				// The argument after the string, as lua_struct.c numbers it.
				argError(L, arg, "string too short")
			}
			if uint64(len(b))+size > maxLibBytes {
				raiseLua(L, "resulting string too large")
			}
			m.reserve(L, len(b)+int(size)) // the buffer may grow to that (memory.go)
			b = append(b, s[:size]...)
			if opt == 's' {
				b = append(b, 0)
				size++
			}
		default:
			f.control(opt)
		}
		total += size
	}
	m.reserve(L, len(b)) // the copy the Lua string makes
	L.Push(lua.LString(b))
	return 1
}

func reverse(b []byte) {
	for i, j := 0, len(b)-1; i < j; i, j = i+1, j-1 {
		b[i], b[j] = b[j], b[i]
	}
}

func appendFloat(b []byte, bits uint64, size int, big bool) []byte {
	var buf [8]byte
	binary.LittleEndian.PutUint64(buf[:], bits)
	start := len(b)
	b = append(b, buf[:size]...)
	if big {
		reverse(b[start:])
	}
	return b
}

// structInt is getinteger: size bytes as an integer, sign-extended for signed formats (with
// the shift lua_struct.c does, which x86-64 takes modulo 64 for sizes over 8).
func structInt(p string, big, signed bool, size uint64) float64 {
	var l uint64
	for i := range size {
		if big {
			l = l<<8 | uint64(p[i])
		} else {
			l = l<<8 | uint64(p[size-1-i])
		}
	}
	if !signed {
		return float64(l)
	}
	mask := ^uint64(0) << ((size*8 - 1) & 63)
	if l&mask != 0 {
		l |= mask
	}
	return float64(int64(l))
}

func structUnpack(L *lua.LState) int {
	f := newStructFormat(L)
	data := checkString(L, 2)
	ld := uint64(len(data))
	pos := uint64(optInteger(L, 3, 1)) // size_t: a negative offset is a huge one
	if pos == 0 {
		argError(L, 3, "offset must be 1 or greater")
	}
	pos--
	used := L.GetTop()
	var out []lua.LValue
	for f.more() {
		opt := f.next()
		size := f.size(opt)
		pos += f.toAlign(pos, opt, size)
		if size > ld || pos > ld-size {
			argError(L, 2, "data string too short")
		}
		checkStack(L, used+len(out), 2, "too many results")
		switch opt {
		case 'b', 'B', 'h', 'H', 'l', 'L', 'T', 'i', 'I':
			signed := 'a' <= opt && opt <= 'z'
			out = append(out, lua.LNumber(structInt(data[pos:], f.h.big, signed, size)))
		case 'x':
		case 'f':
			bits := readBits(data[pos:pos+4], f.h.big)
			out = append(out, lua.LNumber(math.Float32frombits(uint32(bits))))
		case 'd':
			bits := readBits(data[pos:pos+8], f.h.big)
			out = append(out, lua.LNumber(math.Float64frombits(bits)))
		case 'c':
			if size == 0 {
				var prev float64
				ok := false
				if len(out) > 0 {
					prev, ok = toNumber(out[len(out)-1])
				}
				if !ok {
					raiseLua(L, "format 'c0' needs a previous size")
				}
				size = cUlong(prev)
				out = out[:len(out)-1]
				if size > ld || pos > ld-size {
					argError(L, 2, "data string too short")
				}
			}
			out = append(out, lua.LString(data[pos:pos+size]))
		case 's':
			e := strings.IndexByte(data[pos:], 0)
			if e < 0 {
				raiseLua(L, "unfinished string in data")
			}
			size = uint64(e) + 1
			out = append(out, lua.LString(data[pos:pos+uint64(e)]))
		default:
			f.control(opt)
		}
		pos += size
	}
	for _, v := range out {
		L.Push(v)
	}
	L.Push(lua.LNumber(int64(pos + 1)))
	return len(out) + 1
}

func readBits(p string, big bool) uint64 {
	var buf [8]byte
	copy(buf[:], p)
	if big {
		reverse(buf[:len(p)])
	}
	return binary.LittleEndian.Uint64(buf[:])
}

func isAlnum(c byte) bool { return isDigit(c) || 'a' <= c|0x20 && c|0x20 <= 'z' }

func structSize(L *lua.LState) int {
	f := newStructFormat(L)
	var pos uint64
	for f.more() {
		opt := f.next()
		size := f.size(opt)
		pos += f.toAlign(pos, opt, size)
		switch {
		case opt == 's':
			argError(L, 1, "option 's' has no fixed size")
		case opt == 'c' && size == 0:
			argError(L, 1, "option 'c0' has no fixed size")
		}
		// Letters and digits that are not options count for nothing, as in lua_struct.c.
		if !isAlnum(opt) {
			f.control(opt)
		}
		pos += size
	}
	L.Push(lua.LNumber(int64(pos)))
	return 1
}
