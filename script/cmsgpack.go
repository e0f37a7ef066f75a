package script

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	lua "github.com/yuin/gopher-lua"
)

// cmsgpack is lua-cmsgpack 0.4.0 as Redis ships it (deps/lua/src/lua_cmsgpack.c): pack,
// unpack, unpack_one, unpack_limit, with its choice of encodings (the smallest integer
// encoding for a number that is an int64, else a float if that loses nothing, else a double;
// str8/16/32 for strings; an array for a table whose keys are exactly 1..n, else a map;
// tables nested deeper than 16 as nil) and its error texts.
//
// Where it differs from Redis's: a map's keys come out in gopher-lua's table order (see
// cjson), pack's result is bounded by maxLibBytes, and pack and unpack stop at the time limit.

// msgpackMaxNesting is LUACMSGPACK_MAX_NESTING: deeper tables are packed as nil.
const msgpackMaxNesting = 16

func (m *vm) cmsgpackLib() *lua.LTable {
	L := m.L
	t := L.CreateTable(0, 8)
	t.RawSetString("pack", L.NewFunction(m.msgpackPack))
	t.RawSetString("unpack", L.NewFunction(func(L *lua.LState) int {
		return m.msgpackUnpack(L, 0, 0, L.GetTop())
	}))
	t.RawSetString("unpack_one", L.NewFunction(func(L *lua.LState) int {
		offset := optInteger(L, 2, 0)
		return m.msgpackUnpack(L, 1, offset, 1)
	}))
	t.RawSetString("unpack_limit", L.NewFunction(func(L *lua.LState) int {
		limit := checkInteger(L, 2)
		offset := optInteger(L, 3, 0)
		return m.msgpackUnpack(L, limit, offset, 1)
	}))
	t.RawSetString("_NAME", lua.LString("cmsgpack"))
	t.RawSetString("_VERSION", lua.LString("lua-cmsgpack 0.4.0"))
	t.RawSetString("_COPYRIGHT", lua.LString("Copyright (C) 2012, Salvatore Sanfilippo"))
	t.RawSetString("_DESCRIPTION", lua.LString("MessagePack C implementation for Lua"))
	return t
}

// ===== Encoding =====

type msgpackEncoder struct {
	L   *lua.LState
	m   *vm
	buf []byte
}

func (m *vm) msgpackPack(L *lua.LState) int {
	n := L.GetTop()
	if n == 0 {
		argError(L, 0, "MessagePack pack needs input.")
	}
	if n+n > luaiMaxCStack {
		argError(L, 0, "Too many arguments for MessagePack pack.")
	}
	e := &msgpackEncoder{L: L, m: m}
	for i := 1; i <= n; i++ {
		e.value(L.Get(i), 0)
	}
	m.reserve(L, len(e.buf)) // the copy the Lua string makes (memory.go)
	L.Push(lua.LString(e.buf))
	return 1
}

// value is mp_encode_lua_type.
func (e *msgpackEncoder) value(v lua.LValue, level int) {
	if len(e.buf) > maxLibBytes {
		raiseLua(e.L, "resulting string too large")
	}
	switch v := v.(type) {
	case lua.LString:
		e.bytes(string(v))
	case lua.LBool:
		if v {
			e.buf = append(e.buf, 0xc3)
		} else {
			e.buf = append(e.buf, 0xc2)
		}
	case lua.LNumber:
		e.number(float64(v))
	case *lua.LTable:
		if level == msgpackMaxNesting {
			e.buf = append(e.buf, 0xc0)
			return
		}
		e.m.tick(e.L)
		e.table(v, level)
	default:
		e.buf = append(e.buf, 0xc0)
	}
}

func (e *msgpackEncoder) bytes(s string) {
	n := len(s)
	switch {
	case n < 32:
		e.buf = append(e.buf, 0xa0|byte(n))
	case n <= 0xff:
		e.buf = append(e.buf, 0xd9, byte(n))
	case n <= 0xffff:
		e.buf = binary.BigEndian.AppendUint16(append(e.buf, 0xda), uint16(n))
	default:
		e.buf = binary.BigEndian.AppendUint32(append(e.buf, 0xdb), uint32(n))
	}
	if n >= reserveMin {
		e.m.reserve(e.L, len(e.buf)+n) // charged and grown at once: memory.go
		e.buf = slices.Grow(e.buf, n)
	}
	e.buf = append(e.buf, s...)
}

// number is mp_encode_lua_number: an integer if the double is one that fits an int64, else a
// float if converting to float loses nothing (Inf does not), else a double.
func (e *msgpackEncoder) number(d float64) {
	if !math.IsInf(d, 0) && float64(truncInt(d)) == d {
		e.integer(truncInt(d))
		return
	}
	if f := float32(d); float64(f) == d {
		e.buf = binary.BigEndian.AppendUint32(append(e.buf, 0xca), math.Float32bits(f))
		return
	}
	e.buf = binary.BigEndian.AppendUint64(append(e.buf, 0xcb), math.Float64bits(d))
}

// integer is mp_encode_int.
func (e *msgpackEncoder) integer(n int64) {
	b := e.buf
	switch {
	case n >= 0 && n <= 127:
		b = append(b, byte(n))
	case n >= 0 && n <= 0xff:
		b = append(b, 0xcc, byte(n))
	case n >= 0 && n <= 0xffff:
		b = binary.BigEndian.AppendUint16(append(b, 0xcd), uint16(n))
	case n >= 0 && n <= 0xffffffff:
		b = binary.BigEndian.AppendUint32(append(b, 0xce), uint32(n))
	case n >= 0:
		b = binary.BigEndian.AppendUint64(append(b, 0xcf), uint64(n))
	case n >= -32:
		b = append(b, byte(int8(n)))
	case n >= -128:
		b = append(b, 0xd0, byte(n))
	case n >= -32768:
		b = binary.BigEndian.AppendUint16(append(b, 0xd1), uint16(n))
	case n >= -2147483648:
		b = binary.BigEndian.AppendUint32(append(b, 0xd2), uint32(n))
	default:
		b = binary.BigEndian.AppendUint64(append(b, 0xd3), uint64(n))
	}
	e.buf = b
}

// header appends an array's or a map's header: fix (n <= 15), 16-bit or 32-bit length.
func (e *msgpackEncoder) header(fix, b16, b32 byte, n int) {
	switch {
	case n <= 15:
		e.buf = append(e.buf, fix|byte(n))
	case n <= 0xffff:
		e.buf = binary.BigEndian.AppendUint16(append(e.buf, b16), uint16(n))
	default:
		e.buf = binary.BigEndian.AppendUint32(append(e.buf, b32), uint32(n))
	}
}

// table is mp_encode_lua_table: an array if the keys are exactly 1..n (table_is_an_array,
// where a key must also fit an int), else a map in table order.
func (e *msgpackEncoder) table(t *lua.LTable, level int) {
	count, max := 0, 0
	array := true
	for k, _ := t.Next(lua.LNil); k != lua.LNil; k, _ = t.Next(k) {
		n, ok := k.(lua.LNumber)
		if !ok || n <= 0 || math.IsInf(float64(n), 0) || float64(cInt(float64(n))) != float64(n) {
			array = false
			break
		}
		max = maxInt(max, int(n))
		count++
	}
	if array && max == count {
		e.header(0x90, 0xdc, 0xdd, count)
		for i := 1; i <= count; i++ {
			e.value(t.RawGetInt(i), level+1)
		}
		return
	}
	n := 0
	for k, _ := t.Next(lua.LNil); k != lua.LNil; k, _ = t.Next(k) {
		n++
	}
	e.header(0x80, 0xde, 0xdf, n)
	for k, v := t.Next(lua.LNil); k != lua.LNil; k, v = t.Next(k) {
		e.value(k, level+1)
		e.value(v, level+1)
	}
}

func maxInt(a, b int) int {
	if a > b {
		return a
	}
	return b
}

// ===== Decoding =====

const (
	msgpackEOF    = 1 // MP_CUR_ERROR_EOF
	msgpackBadFmt = 2 // MP_CUR_ERROR_BADFMT
)

type msgpackDecoder struct {
	L   *lua.LState
	m   *vm
	s   string
	err int
	// pad counts the empty array slots maps' integer keys made, up to maxPad.
	pad, maxPad int
}

// msgpackUnpack is mp_unpack_full: up to limit values (all if limit and offset are 0) from
// offset; with a limit, the offset after them comes first (-1 at the end of the input).
// used is how many stack slots the arguments take.
func (m *vm) msgpackUnpack(L *lua.LState, limit, offset int64, used int) int {
	s := checkString(L, 1)
	switch {
	case offset < 0 || limit < 0:
		// The second number is the input's length, not the limit, as in lua_cmsgpack.c.
		raiseLua(L, fmt.Sprintf("Invalid request to unpack with offset of %d and limit of %d.", int32(offset), int32(len(s))))
	case offset > int64(len(s)):
		raiseLua(L, fmt.Sprintf("Start offset %d greater than input length %d.", int32(offset), int32(len(s))))
	}
	all := limit == 0 && offset == 0
	if all {
		limit = math.MaxInt32
	}
	d := &msgpackDecoder{L: L, m: m, s: s[offset:], maxPad: 1<<20 + 16*len(s)}
	var out []lua.LValue
	for int64(len(out)) < limit && len(d.s) > 0 {
		v := d.value(used + len(out))
		switch d.err {
		case msgpackEOF:
			raiseLua(L, "Missing bytes in input.")
		case msgpackBadFmt:
			raiseLua(L, "Bad data format in input.")
		}
		out = append(out, v)
	}
	if !all {
		checkStack(L, used+len(out), 1, "in function mp_unpack_full")
		next := lua.LNumber(len(s) - len(d.s))
		if len(d.s) == 0 {
			next = -1
		}
		L.Push(next)
	}
	for _, v := range out {
		L.Push(v)
	}
	if all {
		return len(out)
	}
	return len(out) + 1
}

// need is mp_cur_need: false (and an EOF error) if fewer than n bytes are left.
func (d *msgpackDecoder) need(n uint64) bool {
	if uint64(len(d.s)) < n {
		d.err = msgpackEOF
		return false
	}
	return true
}

func (d *msgpackDecoder) consume(n uint64) string {
	p := d.s[:n]
	d.s = d.s[n:]
	return p
}

func (d *msgpackDecoder) be(n uint64) uint64 {
	var v uint64
	for i := range n {
		v = v<<8 | uint64(d.s[1+i])
	}
	return v
}

// value is mp_decode_to_lua_type; used counts the Lua stack slots lua_cmsgpack.c would have
// filled, for the limit on them.
func (d *msgpackDecoder) value(used int) lua.LValue {
	if !d.need(1) {
		return nil
	}
	checkStack(d.L, used, 1, "too many return values at once; use unpack_one or unpack_limit instead.")
	c := d.s[0]
	fixed := func(n uint64) uint64 { // a value of n bytes after the type byte
		if !d.need(1 + n) {
			return 0
		}
		v := d.be(n)
		d.consume(1 + n)
		return v
	}
	str := func(lenBytes uint64) lua.LValue {
		if !d.need(1 + lenBytes) {
			return nil
		}
		n := d.be(lenBytes)
		d.consume(1 + lenBytes)
		if !d.need(n) {
			return nil
		}
		return lua.LString(d.consume(n))
	}
	container := func(lenBytes uint64, hash bool) lua.LValue {
		if !d.need(1 + lenBytes) {
			return nil
		}
		n := d.be(lenBytes)
		d.consume(1 + lenBytes)
		if hash {
			return d.hash(n, used)
		}
		return d.array(n, used)
	}
	switch c {
	case 0xcc:
		return lua.LNumber(fixed(1))
	case 0xd0:
		return lua.LNumber(int8(fixed(1)))
	case 0xcd:
		return lua.LNumber(fixed(2))
	case 0xd1:
		return lua.LNumber(int16(fixed(2)))
	case 0xce:
		return lua.LNumber(fixed(4))
	case 0xd2:
		return lua.LNumber(int32(fixed(4)))
	case 0xcf, 0xd3:
		// lua_pushinteger of a uint64 and lua_pushnumber of an int64: the same number.
		return lua.LNumber(int64(fixed(8)))
	case 0xc0:
		d.consume(1)
		return lua.LNil
	case 0xc3:
		d.consume(1)
		return lua.LTrue
	case 0xc2:
		d.consume(1)
		return lua.LFalse
	case 0xca:
		return lua.LNumber(math.Float32frombits(uint32(fixed(4))))
	case 0xcb:
		return lua.LNumber(math.Float64frombits(fixed(8)))
	case 0xd9:
		return str(1)
	case 0xda:
		return str(2)
	case 0xdb:
		return str(4)
	case 0xdc:
		return container(2, false)
	case 0xdd:
		return container(4, false)
	case 0xde:
		return container(2, true)
	case 0xdf:
		return container(4, true)
	}
	switch {
	case c&0x80 == 0:
		d.consume(1)
		return lua.LNumber(c)
	case c&0xe0 == 0xe0:
		d.consume(1)
		return lua.LNumber(int8(c))
	case c&0xe0 == 0xa0:
		n := uint64(c & 0x1f)
		if !d.need(1 + n) {
			return nil
		}
		return lua.LString(d.consume(1 + n)[1:])
	case c&0xf0 == 0x90:
		d.consume(1)
		return d.array(uint64(c&0xf), used)
	case c&0xf0 == 0x80:
		d.consume(1)
		return d.hash(uint64(c&0xf), used)
	}
	d.err = msgpackBadFmt
	return nil
}

// array is mp_decode_to_lua_array. Its length is not trusted for allocation: every element
// takes at least a byte, so the input bounds what is built.
func (d *msgpackDecoder) array(n uint64, used int) lua.LValue {
	d.m.tick(d.L)
	t := d.L.CreateTable(int(min(n, uint64(len(d.s)), 1024)), 0)
	checkStack(d.L, used+1, 1, "in function mp_decode_to_lua_array")
	for i := uint64(1); i <= n; i++ {
		v := d.value(used + 2)
		if d.err != 0 {
			return nil
		}
		if v != lua.LNil {
			t.RawSetInt(int(i), v)
		}
	}
	return t
}

// hash is mp_decode_to_lua_hash.
func (d *msgpackDecoder) hash(n uint64, used int) lua.LValue {
	d.m.tick(d.L)
	t := d.L.NewTable()
	alen := 0 // the length of t's array part: gopher-lua keeps every key 1..2^26 there
	for range n {
		k := d.value(used + 1)
		if d.err != 0 {
			return nil
		}
		v := d.value(used + 2)
		if d.err != 0 {
			return nil
		}
		// lua_settable's errors: raised without a position, as luaG_runerror raises them
		// from a C function.
		switch k := k.(type) {
		case *lua.LNilType:
			d.L.Error(lua.LString("table index is nil"), 0)
		case lua.LNumber:
			if k != k {
				d.L.Error(lua.LString("table index is NaN"), 0)
			}
			if i, ok := arrayKey(k); ok && v != lua.LNil && i > alen {
				// Setting key i fills the array part up to i: a few bytes of input must not
				// cost gigabytes ({[60000000]=1} is 7 bytes).
				d.pad += i - 1 - alen
				if d.pad > d.maxPad {
					raiseLua(d.L, "Integer keys in input too sparse to decode.")
				}
				alen = i
			}
		}
		if v != lua.LNil || t.RawGet(k) != lua.LNil {
			t.RawSet(k, v)
		}
	}
	return t
}

// arrayKey reports whether gopher-lua keeps key k in a table's array part, and its index.
func arrayKey(k lua.LNumber) (int, bool) {
	f := float64(k)
	if f >= 1 && f < float64(lua.MaxArrayIndex) && f == math.Trunc(f) {
		return int(f), true
	}
	return 0, false
}
