package script

import (
	"fmt"
	"math"
	"slices"
	"strconv"

	lua "github.com/yuin/gopher-lua"
)

// cjson is Lua CJSON 2.1.0 as Redis 7 ships it (deps/lua/src/lua_cjson.c): encode, decode,
// null, new, and the settings functions, with its defaults, number formats and error texts.
//
// Where it differs from Redis's:
//   - An object's keys come out in gopher-lua's table order (the order they were first set),
//     Redis's in Lua 5.1's hash order: objects of more than one key may list them differently.
//   - Settings (cjson.encode_max_depth(5), ...) last for the run that made them: Redis keeps
//     them for every later script, so a script could change how the next one encodes.
//   - encode's result is bounded by maxLibBytes, and decode and encode stop at the time limit.
//   - encode_keep_buffer only records its setting: there is no C buffer to keep.

// cjsonConfig is one cjson table's settings (json_config_t).
type cjsonConfig struct {
	sparseConvert  bool
	sparseRatio    int32
	sparseSafe     int32
	encodeMaxDepth int32
	decodeMaxDepth int32
	encodeInvalid  int // 0 off (error), 1 on (inf, nan), 2 null
	precision      int32
	keepBuffer     bool
	decodeInvalid  bool
}

// defaultCJSON is lua_cjson.c's DEFAULT_* settings.
func defaultCJSON() cjsonConfig {
	return cjsonConfig{
		sparseRatio:    2,
		sparseSafe:     10,
		encodeMaxDepth: 1000,
		decodeMaxDepth: 1000,
		precision:      14,
		keepBuffer:     true,
		decodeInvalid:  true,
	}
}

// cjsonNull is the Value of cjson.null, Lua CJSON's NULL light userdata: the one value, per
// VM, that decode gives for JSON's null and encode writes as null.
type cjsonNull struct{}

func isCJSONNull(v lua.LValue) bool {
	ud, ok := v.(*lua.LUserData)
	if !ok {
		return false
	}
	_, ok = ud.Value.(cjsonNull)
	return ok
}

// cjsonLib builds a cjson table whose functions read and change cfg (lua_cjson_new).
func (m *vm) cjsonLib(cfg *cjsonConfig) *lua.LTable {
	L := m.L
	t := L.CreateTable(0, 13)
	for name, f := range map[string]lua.LGFunction{
		"encode": func(L *lua.LState) int { return m.jsonEncode(L, cfg) },
		"decode": func(L *lua.LState) int { return m.jsonDecode(L, cfg) },
		"encode_sparse_array": func(L *lua.LState) int {
			jsonArgs(L, 3)
			enumOption(L, 1, &cfg.sparseConvert)
			intOption(L, 2, &cfg.sparseRatio, 0, math.MaxInt32)
			intOption(L, 3, &cfg.sparseSafe, 0, math.MaxInt32)
			return 3
		},
		"encode_max_depth": func(L *lua.LState) int {
			jsonArgs(L, 1)
			intOption(L, 1, &cfg.encodeMaxDepth, 1, math.MaxInt32)
			return 1
		},
		"decode_max_depth": func(L *lua.LState) int {
			jsonArgs(L, 1)
			intOption(L, 1, &cfg.decodeMaxDepth, 1, math.MaxInt32)
			return 1
		},
		"encode_number_precision": func(L *lua.LState) int {
			jsonArgs(L, 1)
			intOption(L, 1, &cfg.precision, 1, 14)
			return 1
		},
		"encode_keep_buffer": func(L *lua.LState) int {
			jsonArgs(L, 1)
			enumOption(L, 1, &cfg.keepBuffer)
			return 1
		},
		"encode_invalid_numbers": func(L *lua.LState) int {
			jsonArgs(L, 1)
			options := []string{"off", "on", "null"}
			switch v := L.Get(1).(type) {
			case *lua.LNilType:
			case lua.LBool:
				cfg.encodeInvalid = 0
				if v {
					cfg.encodeInvalid = 1
				}
			default:
				cfg.encodeInvalid = checkOption(L, 1, options)
			}
			if cfg.encodeInvalid == 2 {
				L.Push(lua.LString(options[2]))
			} else {
				L.Push(lua.LBool(cfg.encodeInvalid == 1))
			}
			return 1
		},
		"decode_invalid_numbers": func(L *lua.LState) int {
			jsonArgs(L, 1)
			enumOption(L, 1, &cfg.decodeInvalid)
			return 1
		},
		"new": func(L *lua.LState) int {
			c := defaultCJSON()
			L.Push(m.cjsonLib(&c))
			return 1
		},
	} {
		t.RawSetString(name, L.NewFunction(f))
	}
	t.RawSetString("null", m.null)
	t.RawSetString("_NAME", lua.LString("cjson"))
	t.RawSetString("_VERSION", lua.LString("2.1.0"))
	return t
}

// jsonArgs is json_arg_init: at most n arguments, padded with nils to n (so what the
// function pushes comes after them).
func jsonArgs(L *lua.LState, n int) {
	if L.GetTop() > n {
		argError(L, n+1, "found too many arguments")
	}
	for L.GetTop() < n {
		L.Push(lua.LNil)
	}
}

// intOption is json_integer_option: argument n, unless nil, must be an integer in [lo, hi]
// (the error names argument #1 whichever n is, as lua_cjson.c does); pushes the setting.
func intOption(L *lua.LState, n int, setting *int32, lo, hi int32) {
	if L.Get(n) != lua.LNil {
		v := int32(checkInteger(L, n)) // lua_Integer to int, as the C assignment truncates
		if v < lo || v > hi {
			argError(L, 1, fmt.Sprintf("expected integer between %d and %d", lo, hi))
		}
		*setting = v
	}
	L.Push(lua.LNumber(*setting))
}

// enumOption is json_enum_option for an on/off setting: argument n, unless nil, is a
// boolean, "on" or "off"; pushes the setting as a boolean.
func enumOption(L *lua.LState, n int, setting *bool) {
	switch v := L.Get(n).(type) {
	case *lua.LNilType:
	case lua.LBool:
		*setting = bool(v)
	default:
		*setting = checkOption(L, n, []string{"off", "on"}) == 1
	}
	L.Push(lua.LBool(*setting))
}

// ===== Encoding =====

// jsonEscapes is char2escape: how encode writes each byte that is not written as itself.
var jsonEscapes = func() [256]string {
	var e [256]string
	const hex = "0123456789abcdef"
	for c := range 0x20 {
		e[c] = `\u00` + string(hex[c>>4]) + string(hex[c&15])
	}
	e['\b'], e['\t'], e['\n'], e['\f'], e['\r'] = `\b`, `\t`, `\n`, `\f`, `\r`
	e['"'], e['\\'], e['/'], e[0x7f] = `\"`, `\\`, `\/`, `\u007f`
	return e
}()

type jsonEncoder struct {
	L   *lua.LState
	m   *vm
	cfg *cjsonConfig
	buf []byte
}

func (m *vm) jsonEncode(L *lua.LState, cfg *cjsonConfig) int {
	if L.GetTop() != 1 {
		argError(L, 1, "expected 1 argument")
	}
	e := &jsonEncoder{L: L, m: m, cfg: cfg}
	e.value(L.Get(1), 0, 1)
	m.reserve(L, len(e.buf)) // the copy the Lua string makes (memory.go)
	L.Push(lua.LString(e.buf))
	return 1
}

func (e *jsonEncoder) fail(v lua.LValue, reason string) {
	raiseLua(e.L, "Cannot serialise "+v.Type().String()+": "+reason)
}

// value is json_append_data. slots counts the Lua stack slots lua_cjson.c would be using, for
// its lua_checkstack limit.
func (e *jsonEncoder) value(v lua.LValue, depth, slots int) {
	if len(e.buf) > maxLibBytes {
		raiseLua(e.L, fmt.Sprintf("Cannot serialise, result larger than %d bytes", maxLibBytes))
	}
	switch v := v.(type) {
	case lua.LString:
		e.str(string(v))
	case lua.LNumber:
		e.number(float64(v))
	case lua.LBool:
		if v {
			e.buf = append(e.buf, "true"...)
		} else {
			e.buf = append(e.buf, "false"...)
		}
	case *lua.LNilType:
		e.buf = append(e.buf, "null"...)
	case *lua.LTable:
		e.m.tick(e.L)
		depth++
		if depth > int(e.cfg.encodeMaxDepth) || slots+3 > luaiMaxCStack {
			raiseLua(e.L, fmt.Sprintf("Cannot serialise, excessive nesting (%d)", depth))
		}
		if n := e.arrayLength(v); n > 0 {
			e.array(v, n, depth, slots)
		} else {
			e.object(v, depth, slots)
		}
	default:
		if isCJSONNull(v) {
			e.buf = append(e.buf, "null"...)
			return
		}
		e.fail(v, "type not supported")
	}
}

func (e *jsonEncoder) str(s string) {
	if len(s) >= reserveMin {
		// Charged and grown at once (append would grow by a quarter at a time): memory.go.
		e.m.reserve(e.L, len(e.buf)+len(s)+2)
		e.buf = slices.Grow(e.buf, len(s)+2)
	}
	e.buf = append(e.buf, '"')
	for i := 0; i < len(s); i++ {
		if esc := jsonEscapes[s[i]]; esc != "" {
			e.buf = append(e.buf, esc...)
		} else {
			e.buf = append(e.buf, s[i])
		}
	}
	e.buf = append(e.buf, '"')
}

// number is json_append_number: "%.14g" (encode_number_precision), and NaN and Inf as
// encode_invalid_numbers says.
func (e *jsonEncoder) number(f float64) {
	invalid := math.IsInf(f, 0) || math.IsNaN(f)
	switch e.cfg.encodeInvalid {
	case 0:
		if invalid {
			e.fail(lua.LNumber(f), "must not be NaN or Inf")
		}
	case 1:
		if math.IsNaN(f) {
			e.buf = append(e.buf, "nan"...)
			return
		}
	default:
		if invalid {
			e.buf = append(e.buf, "null"...)
			return
		}
	}
	e.buf = append(e.buf, fmtG(f, int(e.cfg.precision))...)
}

// arrayLength is lua_array_length: the largest key if every key is a positive integer and
// the array is not too sparse, else -1 (an object), or an error for a sparse array.
func (e *jsonEncoder) arrayLength(t *lua.LTable) int32 {
	var max, items int32
	for k, _ := t.Next(lua.LNil); k != lua.LNil; k, _ = t.Next(k) {
		n, ok := k.(lua.LNumber)
		if !ok || n == 0 || math.Floor(float64(n)) != float64(n) || n < 1 {
			return -1
		}
		if float64(n) > float64(max) {
			max = cInt(float64(n))
		}
		items++
	}
	// In int, as lua_cjson.c computes it: a key of 2^31 or more makes max negative (and the
	// table an object), and items*ratio can wrap.
	if e.cfg.sparseRatio > 0 && max > items*e.cfg.sparseRatio && max > e.cfg.sparseSafe {
		if !e.cfg.sparseConvert {
			e.fail(t, "excessively sparse array")
		}
		return -1
	}
	return max
}

// cInt is C's (int) conversion of a double on x86-64: truncation, and INT_MIN out of range.
func cInt(f float64) int32 {
	if f != f || f >= 1<<31 || f <= -(1<<31)-1 {
		return math.MinInt32
	}
	return int32(f)
}

func (e *jsonEncoder) array(t *lua.LTable, n int32, depth, slots int) {
	e.buf = append(e.buf, '[')
	for i := 1; i <= int(n); i++ {
		if i > 1 {
			e.buf = append(e.buf, ',')
		}
		e.value(t.RawGetInt(i), depth, slots+1)
	}
	e.buf = append(e.buf, ']')
}

func (e *jsonEncoder) object(t *lua.LTable, depth, slots int) {
	e.buf = append(e.buf, '{')
	first := true
	for k, v := t.Next(lua.LNil); k != lua.LNil; k, v = t.Next(k) {
		if !first {
			e.buf = append(e.buf, ',')
		}
		first = false
		switch k := k.(type) {
		case lua.LNumber:
			e.buf = append(e.buf, '"')
			e.number(float64(k))
			e.buf = append(e.buf, '"', ':')
		case lua.LString:
			e.str(string(k))
			e.buf = append(e.buf, ':')
		default:
			e.fail(k, "table key must be a number or string")
		}
		e.value(v, depth, slots+2)
	}
	e.buf = append(e.buf, '}')
}

// ===== Decoding =====

type jsonTokenType int

const (
	tObjBegin jsonTokenType = iota
	tObjEnd
	tArrBegin
	tArrEnd
	tString
	tNumber
	tBoolean
	tNull
	tColon
	tComma
	tEnd
	tWhitespace
	tError
	tUnknown
)

// jsonTokenNames are the names decode's errors give the tokens it found.
var jsonTokenNames = [...]string{"T_OBJ_BEGIN", "T_OBJ_END", "T_ARR_BEGIN", "T_ARR_END", "T_STRING",
	"T_NUMBER", "T_BOOLEAN", "T_NULL", "T_COLON", "T_COMMA", "T_END", "T_WHITESPACE", "T_ERROR", "T_UNKNOWN"}

// jsonChars is ch2token: what each byte starts.
var jsonChars = func() [256]jsonTokenType {
	var c [256]jsonTokenType
	for i := range c {
		c[i] = tError
	}
	c['{'], c['}'], c['['], c[']'], c[','], c[':'], c[0] = tObjBegin, tObjEnd, tArrBegin, tArrEnd, tComma, tColon, tEnd
	c[' '], c['\t'], c['\n'], c['\r'] = tWhitespace, tWhitespace, tWhitespace, tWhitespace
	for _, ch := range "fiInNt\"+-0123456789" {
		c[ch] = tUnknown
	}
	return c
}()

// jsonUnescapes is escape2char: what a backslash and each byte stand for (0: an error).
var jsonUnescapes = func() [256]byte {
	var e [256]byte
	e['"'], e['\\'], e['/'], e['b'], e['t'], e['n'], e['f'], e['r'], e['u'] = '"', '\\', '/', '\b', '\t', '\n', '\f', '\r', 'u'
	return e
}()

type jsonToken struct {
	typ   jsonTokenType
	index int    // where the token starts (for an error token: where the error is)
	err   string // for tError
	str   []byte
	num   float64
	b     bool
}

type jsonDecoder struct {
	L     *lua.LState
	m     *vm
	cfg   *cjsonConfig
	data  string
	pos   int
	depth int
}

// at is the byte at i, or 0 past the end: lua_cjson.c reads a NUL-terminated string, so a NUL
// byte also ends the input.
func (d *jsonDecoder) at(i int) byte {
	if i < len(d.data) {
		return d.data[i]
	}
	return 0
}

// hasPrefix is strncmp(data+pos, s, len(s)) == 0.
func (d *jsonDecoder) hasPrefix(pos int, s string) bool {
	for i := 0; i < len(s); i++ {
		if d.at(pos+i) != s[i] {
			return false
		}
	}
	return true
}

// hasPrefixFold is strncasecmp(data+pos, s, len(s)) == 0 for a lower-case s.
func (d *jsonDecoder) hasPrefixFold(pos int, s string) bool {
	for i := 0; i < len(s); i++ {
		if c := d.at(pos + i); c != s[i] && c|0x20 != s[i] {
			return false
		}
	}
	return true
}

func (m *vm) jsonDecode(L *lua.LState, cfg *cjsonConfig) int {
	if L.GetTop() != 1 {
		argError(L, 1, "expected 1 argument")
	}
	d := &jsonDecoder{L: L, m: m, cfg: cfg, data: checkString(L, 1)}
	if len(d.data) >= 2 && (d.data[0] == 0 || d.data[1] == 0) {
		raiseLua(L, "JSON parser does not support UTF-16 or UTF-32")
	}
	var tok jsonToken
	d.next(&tok)
	v := d.value(&tok, 1)
	d.next(&tok)
	if tok.typ != tEnd {
		d.fail("the end", &tok)
	}
	L.Push(v)
	return 1
}

func (d *jsonDecoder) fail(want string, tok *jsonToken) {
	found := tok.err
	if tok.typ != tError {
		found = jsonTokenNames[tok.typ]
	}
	raiseLua(d.L, fmt.Sprintf("Expected %s but found %s at character %d", want, found, tok.index+1))
}

func (d *jsonDecoder) tokenError(tok *jsonToken, msg string) {
	tok.typ, tok.index, tok.err = tError, d.pos, msg
}

// next is json_next_token.
func (d *jsonDecoder) next(tok *jsonToken) {
	for jsonChars[d.at(d.pos)] == tWhitespace {
		d.pos++
	}
	ch := d.at(d.pos)
	tok.typ, tok.index = jsonChars[ch], d.pos
	switch tok.typ {
	case tError:
		d.tokenError(tok, "invalid token")
		return
	case tEnd:
		return
	case tUnknown:
	default:
		d.pos++
		return
	}
	switch {
	case ch == '"':
		d.string(tok)
	case ch == '-' || '0' <= ch && ch <= '9':
		if !d.cfg.decodeInvalid && d.invalidNumber() {
			d.tokenError(tok, "invalid number")
			return
		}
		d.number(tok)
	case d.hasPrefix(d.pos, "true"):
		tok.typ, tok.b = tBoolean, true
		d.pos += 4
	case d.hasPrefix(d.pos, "false"):
		tok.typ, tok.b = tBoolean, false
		d.pos += 5
	case d.hasPrefix(d.pos, "null"):
		tok.typ = tNull
		d.pos += 4
	case d.cfg.decodeInvalid && d.invalidNumber():
		d.number(tok)
	default:
		d.tokenError(tok, "invalid token")
	}
}

// invalidNumber is json_is_invalid_number: a number strtod reads but JSON does not allow
// (a leading +, 0x, leading zeros, inf, nan).
func (d *jsonDecoder) invalidNumber() bool {
	p := d.pos
	if d.at(p) == '+' {
		return true
	}
	if d.at(p) == '-' {
		p++
	}
	if c := d.at(p); c == '0' {
		c2 := d.at(p + 1)
		return c2|0x20 == 'x' || '0' <= c2 && c2 <= '9'
	} else if c <= '9' {
		return false
	}
	return d.hasPrefixFold(p, "inf") || d.hasPrefixFold(p, "nan")
}

func (d *jsonDecoder) number(tok *jsonToken) {
	f, end := strtod(d.data, d.pos)
	if end == d.pos {
		d.tokenError(tok, "invalid number")
		return
	}
	tok.typ, tok.num = tNumber, f
	d.pos = end
}

func (d *jsonDecoder) string(tok *jsonToken) {
	d.pos++ // the opening quote
	var s []byte
	for {
		ch := d.at(d.pos)
		if ch == '"' {
			break
		}
		if ch == 0 {
			d.tokenError(tok, "unexpected end of string")
			return
		}
		if ch == '\\' {
			ch = jsonUnescapes[d.at(d.pos+1)]
			if ch == 'u' {
				var ok bool
				if s, ok = d.unicodeEscape(s); !ok {
					d.tokenError(tok, "invalid unicode escape code")
					return
				}
				continue
			}
			if ch == 0 {
				d.tokenError(tok, "invalid escape code")
				return
			}
			d.pos++
		}
		s = append(s, ch)
		d.pos++
	}
	d.pos++ // the closing quote
	tok.typ, tok.str = tString, s
}

func (d *jsonDecoder) hex4(p int) int {
	n := 0
	for i := range 4 {
		c := d.at(p + i)
		var v int
		switch {
		case '0' <= c && c <= '9':
			v = int(c - '0')
		case 'a' <= c|0x20 && c|0x20 <= 'f':
			v = int(c|0x20-'a') + 10
		default:
			return -1
		}
		n = n<<4 | v
	}
	return n
}

// unicodeEscape is json_append_unicode_escape: \uXXXX (or a surrogate pair of them) at pos,
// appended to s as UTF-8.
func (d *jsonDecoder) unicodeEscape(s []byte) ([]byte, bool) {
	cp := d.hex4(d.pos + 2)
	if cp < 0 {
		return s, false
	}
	n := 6
	if cp&0xF800 == 0xD800 {
		if cp&0x400 != 0 || d.at(d.pos+6) != '\\' || d.at(d.pos+7) != 'u' {
			return s, false
		}
		low := d.hex4(d.pos + 8)
		if low < 0 || low&0xFC00 != 0xDC00 {
			return s, false
		}
		cp = ((cp&0x3FF)<<10 | low&0x3FF) + 0x10000
		n = 12
	}
	switch {
	case cp <= 0x7F:
		s = append(s, byte(cp))
	case cp <= 0x7FF:
		s = append(s, byte(cp>>6|0xC0), byte(cp&0x3F|0x80))
	case cp <= 0xFFFF:
		s = append(s, byte(cp>>12|0xE0), byte(cp>>6&0x3F|0x80), byte(cp&0x3F|0x80))
	default:
		s = append(s, byte(cp>>18|0xF0), byte(cp>>12&0x3F|0x80), byte(cp>>6&0x3F|0x80), byte(cp&0x3F|0x80))
	}
	d.pos += n
	return s, true
}

// value is json_process_value; slots counts the Lua stack slots in use (see descend).
func (d *jsonDecoder) value(tok *jsonToken, slots int) lua.LValue {
	switch tok.typ {
	case tString:
		return lua.LString(tok.str)
	case tNumber:
		return lua.LNumber(tok.num)
	case tBoolean:
		return lua.LBool(tok.b)
	case tNull:
		return d.m.null
	case tObjBegin:
		return d.object(slots)
	case tArrBegin:
		return d.array(slots)
	}
	d.fail("value", tok)
	return nil
}

// descend is json_decode_descend: decode_max_depth, and Lua's limit on a C function's stack.
func (d *jsonDecoder) descend(slots, need int) {
	d.m.tick(d.L)
	d.depth++
	if d.depth <= int(d.cfg.decodeMaxDepth) && slots+need <= luaiMaxCStack {
		return
	}
	raiseLua(d.L, fmt.Sprintf("Found too many nested data structures (%d) at character %d", d.depth, d.pos))
}

func (d *jsonDecoder) object(slots int) lua.LValue {
	d.descend(slots, 3)
	t := d.L.NewTable()
	var tok jsonToken
	d.next(&tok)
	if tok.typ == tObjEnd {
		d.depth--
		return t
	}
	for {
		if tok.typ != tString {
			d.fail("object key string", &tok)
		}
		key := lua.LString(tok.str)
		if d.next(&tok); tok.typ != tColon {
			d.fail("colon", &tok)
		}
		d.next(&tok)
		t.RawSet(key, d.value(&tok, slots+2))
		if d.next(&tok); tok.typ == tObjEnd {
			d.depth--
			return t
		}
		if tok.typ != tComma {
			d.fail("comma or object end", &tok)
		}
		d.next(&tok)
	}
}

func (d *jsonDecoder) array(slots int) lua.LValue {
	d.descend(slots, 2)
	t := d.L.NewTable()
	var tok jsonToken
	d.next(&tok)
	if tok.typ == tArrEnd {
		d.depth--
		return t
	}
	for i := 1; ; i++ {
		t.RawSetInt(i, d.value(&tok, slots+1))
		if d.next(&tok); tok.typ == tArrEnd {
			d.depth--
			return t
		}
		if tok.typ != tComma {
			d.fail("comma or array end", &tok)
		}
		d.next(&tok)
	}
}

// strtod is glibc's strtod on s from pos: the number at the start (decimal, hexadecimal,
// inf, infinity, nan, nan(...)) and where it ends; end == pos when there is none. A NUL byte
// ends s, as in C.
func strtod(s string, pos int) (float64, int) {
	at := func(i int) byte {
		if i < len(s) {
			return s[i]
		}
		return 0
	}
	fold := func(i int, w string) bool {
		for j := 0; j < len(w); j++ {
			if at(i+j)|0x20 != w[j] {
				return false
			}
		}
		return true
	}
	isDigit := func(c byte) bool { return '0' <= c && c <= '9' }
	isHex := func(c byte) bool { return isDigit(c) || 'a' <= c|0x20 && c|0x20 <= 'f' }
	p := pos
	for c := at(p); c == ' ' || '\t' <= c && c <= '\r'; c = at(p) {
		p++
	}
	neg := false
	if c := at(p); c == '+' || c == '-' {
		neg = c == '-'
		p++
	}
	sign := func(f float64) float64 {
		if neg {
			return -f
		}
		return f
	}
	switch {
	case fold(p, "inf"):
		p += 3
		if fold(p, "inity") {
			p += 5
		}
		return sign(math.Inf(1)), p
	case fold(p, "nan"):
		p += 3
		if at(p) == '(' {
			q := p + 1
			for c := at(q); isDigit(c) || 'a' <= c|0x20 && c|0x20 <= 'z' || c == '_'; c = at(q) {
				q++
			}
			if at(q) == ')' {
				p = q + 1
			}
		}
		// glibc's NaN: the quiet NaN with no payload (Go's math.NaN has one), signed by
		// a leading '-'.
		nan := math.Float64frombits(0x7FF8000000000000)
		if neg {
			nan = math.Float64frombits(0xFFF8000000000000)
		}
		return nan, p
	}
	digits := func(q int, ok func(byte) bool) int {
		for ok(at(q)) {
			q++
		}
		return q
	}
	// mantissa: digits [. digits], at least one digit; exponent: e|p [sign] digits.
	scan := func(q int, digit func(byte) bool, exp byte) (int, bool) {
		start := q
		q = digits(q, digit)
		n := q - start
		if at(q) == '.' {
			r := digits(q+1, digit)
			n += r - q - 1
			q = r
		}
		if n == 0 {
			return start, false
		}
		if at(q)|0x20 == exp {
			r := q + 1
			if at(r) == '+' || at(r) == '-' {
				r++
			}
			if isDigit(at(r)) {
				q = digits(r, isDigit)
			}
		}
		return q, true
	}
	if at(p) == '0' && at(p+1)|0x20 == 'x' {
		if end, ok := scan(p+2, isHex, 'p'); ok {
			text := "0x" + s[p+2:end]
			if !containsFold(s[p+2:end], 'p') {
				text += "p0"
			}
			f, _ := strconv.ParseFloat(text, 64)
			return sign(f), end
		}
	}
	end, ok := scan(p, isDigit, 'e')
	if !ok {
		return 0, pos
	}
	f, err := strconv.ParseFloat(s[p:end], 64)
	if err != nil && !isRangeError(err) {
		return 0, pos
	}
	return sign(f), end
}

func containsFold(s string, c byte) bool {
	for i := 0; i < len(s); i++ {
		if s[i]|0x20 == c {
			return true
		}
	}
	return false
}

func isRangeError(err error) bool {
	ne, ok := err.(*strconv.NumError)
	return ok && ne.Err == strconv.ErrRange
}
