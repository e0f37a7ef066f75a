package script

import (
	"math"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// Kind is the RESP2 type of a Value.
type Kind uint8

// The kinds of Value. Only RESP2 kinds exist: redis.setresp(3) is refused (see redis.setresp),
// so no RESP3 type ever reaches a script, and the RESP3 reply tables a script may return
// ({double=}, {map=}, {set=}, {big_number=}, {verbatim_string=}) are rendered the way Redis
// renders them for a RESP2 client.
const (
	KindNil    Kind = iota // null bulk string (or null array: scripts cannot tell them apart)
	KindInt                // integer: Int
	KindBulk               // bulk string: Str
	KindStatus             // simple string: Str
	KindError              // error: Str, without the leading '-' (e.g. "ERR wrong type")
	KindArray              // array: Array
)

var kindNames = [...]string{"nil", "int", "bulk", "status", "error", "array"}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "Kind(" + strconv.Itoa(int(k)) + ")"
}

// Value is a RESP reply as scripts see it (what redis.call returns) and produce it (what Run
// returns). A Value returned by Run shares no memory with the VM.
type Value struct {
	Kind  Kind
	Int   int64
	Str   []byte
	Array []Value
}

// AppendRESP2 appends v's RESP2 encoding to b. Error and status texts are written as they are;
// the Values this package returns never hold CR or LF in them.
func (v Value) AppendRESP2(b []byte) []byte {
	switch v.Kind {
	case KindInt:
		b = append(b, ':')
		b = strconv.AppendInt(b, v.Int, 10)
	case KindBulk:
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(v.Str)), 10)
		b = append(b, "\r\n"...)
		b = append(b, v.Str...)
	case KindStatus:
		b = append(b, '+')
		b = append(b, v.Str...)
	case KindError:
		b = append(b, '-')
		b = append(b, v.Str...)
	case KindArray:
		b = append(b, '*')
		b = strconv.AppendInt(b, int64(len(v.Array)), 10)
		b = append(b, "\r\n"...)
		for _, e := range v.Array {
			b = e.AppendRESP2(b)
		}
		return b
	default:
		b = append(b, "$-1"...)
	}
	return append(b, "\r\n"...)
}

// String renders v as RESP2, for logs and test failures.
func (v Value) String() string { return string(v.AppendRESP2(nil)) }

// maxReplyDepth is how deeply nested a script's reply may be: Redis converts it on the Lua
// stack and answers "reached lua stack limit" at this depth (a self-referencing table gives
// 7995 nested arrays around that error on Redis 7.0.15; measured).
const maxReplyDepth = 7995

var errStackLimit = Value{Kind: KindError, Str: []byte("ERR reached lua stack limit")}

// valueCost is what one reply value costs toValue's budget besides its string's bytes.
const valueCost = 48

// toValue converts a script's return value to a reply, with Redis's rules
// (script_lua.c luaReplyToRedisReply): a number is an integer (truncated), a string a bulk
// string, true the integer 1, false and nil a null; a table is an error if its "err" field is
// a string, a status if its "ok" field is, then the RESP3 tables, else an array of its
// elements 1..n up to the first nil.
//
// budget is the bytes the reply may still take (each value costs valueCost, a string its bytes
// too): once it is negative the conversion stops, and the caller refuses the reply.
func toValue(lv lua.LValue, depth int, budget *int64) Value {
	if *budget -= valueCost; *budget < 0 {
		return Value{}
	}
	if depth >= maxReplyDepth {
		return errStackLimit
	}
	switch v := lv.(type) {
	case lua.LNumber:
		return Value{Kind: KindInt, Int: truncInt(float64(v))}
	case lua.LString:
		if *budget -= int64(len(v)); *budget < 0 {
			return Value{}
		}
		return Value{Kind: KindBulk, Str: []byte(v)}
	case lua.LBool:
		if v {
			return Value{Kind: KindInt, Int: 1}
		}
	case *lua.LTable:
		return tableValue(v, depth, budget)
	}
	return Value{Kind: KindNil}
}

func tableValue(t *lua.LTable, depth int, budget *int64) Value {
	if s, ok := t.RawGetString("err").(lua.LString); ok {
		// addReplyErrorFormat("-%s"): trailing CR/LF trimmed, inner ones made spaces.
		return Value{Kind: KindError, Str: []byte(mapCRLF(strings.TrimRight(string(s), "\r\n")))}
	}
	if s, ok := t.RawGetString("ok").(lua.LString); ok {
		return Value{Kind: KindStatus, Str: []byte(mapCRLF(string(s)))}
	}
	if d, ok := t.RawGetString("double").(lua.LNumber); ok {
		// RESP2 addReplyDouble: a bulk string, "%.17g".
		return Value{Kind: KindBulk, Str: []byte(fmtG(float64(d), 17))}
	}
	if s, ok := t.RawGetString("big_number").(lua.LString); ok {
		return Value{Kind: KindBulk, Str: []byte(mapCRLF(string(s)))}
	}
	if vt, ok := t.RawGetString("verbatim_string").(*lua.LTable); ok {
		if _, ok := vt.RawGetString("format").(lua.LString); ok {
			if s, ok := vt.RawGetString("string").(lua.LString); ok {
				return Value{Kind: KindBulk, Str: []byte(s)}
			}
		}
	}
	if m, ok := t.RawGetString("map").(*lua.LTable); ok {
		// RESP2: a flat array of key, value, ... in table order (which differs from Redis's
		// for more than one key: Lua and gopher-lua hash differently).
		arr := []Value{}
		m.ForEach(func(k, v lua.LValue) {
			arr = append(arr, toValue(k, depth+1, budget), toValue(v, depth+1, budget))
		})
		return Value{Kind: KindArray, Array: arr}
	}
	if s, ok := t.RawGetString("set").(*lua.LTable); ok {
		arr := []Value{}
		s.ForEach(func(k, _ lua.LValue) { arr = append(arr, toValue(k, depth+1, budget)) })
		return Value{Kind: KindArray, Array: arr}
	}
	n := 0
	for t.RawGetInt(n+1) != lua.LNil {
		n++
	}
	if int64(n) > *budget/valueCost {
		*budget = -1
		return Value{}
	}
	arr := make([]Value, n)
	for i := range arr {
		if arr[i] = toValue(t.RawGetInt(i+1), depth+1, budget); *budget < 0 {
			return Value{}
		}
	}
	return Value{Kind: KindArray, Array: arr}
}

// toLua converts a command's reply for the script (script_lua.c redisProtocolToLuaType):
// integer -> number, bulk -> string, null -> false, status -> {ok=...}, error -> {err=...},
// array -> table (a null element becomes false, so the array keeps its length).
func toLua(L *lua.LState, v Value) lua.LValue {
	switch v.Kind {
	case KindInt:
		return lua.LNumber(v.Int)
	case KindBulk:
		return lua.LString(v.Str)
	case KindStatus:
		t := L.CreateTable(0, 1)
		t.RawSetString("ok", lua.LString(v.Str))
		return t
	case KindError:
		t := errTable(L, "-"+string(v.Str))
		// Redis marks command errors so a script re-raising them does not count them twice in
		// its error stats; scripts can see the field, so it is kept.
		t.RawSetString("ignore_error_stats_update", lua.LTrue)
		return t
	case KindArray:
		t := L.CreateTable(len(v.Array), 0)
		for i, e := range v.Array {
			t.RawSetInt(i+1, toLua(L, e))
		}
		return t
	}
	return lua.LFalse
}

// errTable returns Redis's error table {err="CODE message"} for s (luaPushErrorBuff): "-CODE
// message" keeps its code, anything else gets the code ERR; CR/LF around the message go.
func errTable(L *lua.LState, s string) *lua.LTable {
	t := L.CreateTable(0, 2)
	t.RawSetString("err", lua.LString(errorText(s)))
	return t
}

func errorText(s string) string {
	code := "ERR"
	if rest, ok := strings.CutPrefix(s, "-"); ok {
		s = rest
		if c, msg, ok := strings.Cut(rest, " "); ok {
			code, s = c, msg
		}
	}
	return code + " " + strings.Trim(s, "\r\n")
}

// mapCRLF replaces CR and LF with spaces, as Redis does before writing an error or status.
func mapCRLF(s string) string {
	if strings.IndexAny(s, "\r\n") < 0 {
		return s
	}
	return strings.Map(func(r rune) rune {
		if r == '\r' || r == '\n' {
			return ' '
		}
		return r
	}, s)
}

// truncInt converts a Lua number to an integer reply as Redis's (long long) cast does on
// x86-64: truncation toward zero, and the "integer indefinite" value math.MinInt64 for NaN and
// anything out of range (Redis 7.0.15 answers :-9223372036854775808 to return 1/0 and 2^63).
func truncInt(f float64) int64 {
	if f != f || f >= 1<<63 || f < -(1<<63) {
		return math.MinInt64
	}
	return int64(f)
}

// fmtG formats f like C's printf("%.<prec>g"): Lua prints numbers with %.14g, Redis passes
// numbers to commands and doubles to RESP2 clients with %.17g.
func fmtG(f float64, prec int) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		if math.Signbit(f) {
			return "-nan"
		}
		return "nan"
	}
	return strconv.FormatFloat(f, 'g', prec, 64)
}

// luaString is Lua's tostring for the values Redis turns into text (lua_tostring, %.14g for
// numbers), and gopher-lua's rendering for the rest ("table: 0x...").
func luaString(v lua.LValue) string {
	switch v := v.(type) {
	case lua.LString:
		return string(v)
	case lua.LNumber:
		return fmtG(float64(v), 14)
	}
	return v.String()
}

// stringish reports whether v is a string or a number (lua_isstring) and its text.
func stringish(v lua.LValue) (string, bool) {
	switch v := v.(type) {
	case lua.LString:
		return string(v), true
	case lua.LNumber:
		return fmtG(float64(v), 14), true
	}
	return "", false
}

// toNumber is lua_tonumber: a number, or a string holding one.
func toNumber(v lua.LValue) (float64, bool) {
	switch v := v.(type) {
	case lua.LNumber:
		return float64(v), true
	case lua.LString:
		s := strings.TrimSpace(string(v))
		if h, ok := strings.CutPrefix(strings.ToLower(s), "0x"); ok {
			n, err := strconv.ParseUint(h, 16, 64)
			return float64(n), err == nil
		}
		f, err := strconv.ParseFloat(s, 64)
		return f, err == nil
	}
	return 0, false
}
