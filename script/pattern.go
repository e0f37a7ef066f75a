package script

import (
	"sort"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// Lua 5.1's pattern matching (lstrlib.c: string.find, match, gmatch and gsub), written for
// raftlock so that the time limit and SCRIPT KILL reach it. The matcher backtracks as Lua's
// does, and a 60-byte pattern can make it backtrack for hours inside one library call, where
// the VM never looks at the clock; so it counts its steps, and every patternCheckEvery steps it
// makes the run's check (time limit, SCRIPT KILL, memory, the client's context), stopping the
// script as an instruction past the limit would.
//
// Semantics are Lua 5.1's, which Redis runs: the pattern ends at its first NUL byte (C
// strings), '^' anchors find, match and gsub but is an ordinary character in gmatch, '%' before
// a character that is not alphanumeric escapes it, and the error texts are Lua's. One addition:
// a pattern that nests more than maxPatternDepth captures and quantified items raises Lua 5.2's
// "pattern too complex" (Lua 5.1 recurses on the C stack without a bound).

const (
	maxCaptures       = 32 // LUA_MAXCAPTURES
	capUnfinished     = -1
	capPosition       = -2
	patternCheckEvery = 1 << 12
	// maxPatternDepth bounds the matcher's recursion (each level is a capture, or an item with
	// a quantifier, still being tried), as Lua 5.2's MAXCCALLS (200) does, more loosely.
	maxPatternDepth = 1000
	// patternSpecials are the characters that make string.find match a pattern rather than
	// search for the text (lstrlib.c's SPECIALS).
	patternSpecials = "^$*+?.([%-"
)

// matcher is lstrlib.c's MatchState for one subject and pattern.
type matcher struct {
	m       *vm
	L       *lua.LState
	src     string
	pat     string
	level   int
	capture [maxCaptures]struct{ init, len int }
	steps   int
	depth   int
}

func (m *vm) newMatcher(L *lua.LState, src, pat string) *matcher {
	if i := strings.IndexByte(pat, 0); i >= 0 {
		pat = pat[:i] // Lua 5.1 reads patterns as C strings
	}
	return &matcher{m: m, L: L, src: src, pat: pat}
}

// step counts one unit of matching work and makes the run's check every patternCheckEvery.
func (ms *matcher) step() {
	if ms.steps++; ms.steps%patternCheckEvery == 0 {
		ms.m.checkNow(ms.L)
	}
}

// checkNow makes the run's check (time limit, SCRIPT KILL, memory, ctx) now, from a Go
// function that works long without running Lua instructions, and stops the script if it must.
func (m *vm) checkNow(L *lua.LState) {
	if m.rc.check(); m.rc.done != nil {
		L.RaiseError("%s", errKilled.Error())
	}
}

// at is the pattern's byte at p, 0 past its end (the C string's terminator).
func (ms *matcher) at(p int) byte {
	if p < len(ms.pat) {
		return ms.pat[p]
	}
	return 0
}

func (ms *matcher) fail(msg string) { raiseLua(ms.L, msg) }

func (ms *matcher) classEnd(p int) int {
	c := ms.at(p)
	p++
	switch c {
	case '%':
		if p >= len(ms.pat) {
			ms.fail("malformed pattern (ends with '%')")
		}
		return p + 1
	case '[':
		if ms.at(p) == '^' {
			p++
		}
		for { // look for a ']'
			if p >= len(ms.pat) {
				ms.fail("malformed pattern (missing ']')")
			}
			c := ms.pat[p]
			p++
			if c == '%' && p < len(ms.pat) {
				p++ // skip escapes (e.g. '%]')
			}
			if ms.at(p) == ']' {
				return p + 1
			}
		}
	}
	return p
}

// matchClass is lstrlib.c's match_class, with the C locale's character classes.
func matchClass(c, cl byte) bool {
	var res bool
	switch cl | 0x20 {
	case 'a':
		res = isAlpha(c)
	case 'c':
		res = c < 32 || c == 127
	case 'd':
		res = '0' <= c && c <= '9'
	case 'l':
		res = 'a' <= c && c <= 'z'
	case 'p':
		res = isPunct(c)
	case 's':
		res = c == ' ' || '\t' <= c && c <= '\r'
	case 'u':
		res = 'A' <= c && c <= 'Z'
	case 'w':
		res = isAlpha(c) || '0' <= c && c <= '9'
	case 'x':
		res = '0' <= c && c <= '9' || 'a' <= c|0x20 && c|0x20 <= 'f'
	case 'z':
		res = c == 0
	default:
		return cl == c
	}
	if 'a' <= cl && cl <= 'z' {
		return res
	}
	return !res
}

func isAlpha(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }

func isPunct(c byte) bool {
	return 33 <= c && c <= 126 && !isAlpha(c) && !('0' <= c && c <= '9')
}

// matchBracketClass matches c against the set [p, ec] (ec is its closing ']').
func (ms *matcher) matchBracketClass(c byte, p, ec int) bool {
	sig := true
	if ms.at(p+1) == '^' {
		sig = false
		p++
	}
	for p++; p < ec; p++ {
		switch {
		case ms.pat[p] == '%':
			p++
			if matchClass(c, ms.at(p)) {
				return sig
			}
		case ms.at(p+1) == '-' && p+2 < ec:
			p += 2
			if ms.pat[p-2] <= c && c <= ms.pat[p] {
				return sig
			}
		case ms.pat[p] == c:
			return sig
		}
	}
	return !sig
}

func (ms *matcher) singleMatch(s, p, ep int) bool {
	if s >= len(ms.src) {
		return false
	}
	c := ms.src[s]
	switch ms.pat[p] {
	case '.':
		return true
	case '%':
		return matchClass(c, ms.at(p+1))
	case '[':
		return ms.matchBracketClass(c, p, ep-1)
	}
	return ms.pat[p] == c
}

// match is lstrlib.c's match: the end of a match of the pattern from p on at s, or -1.
func (ms *matcher) match(s, p int) int {
	if ms.depth++; ms.depth > maxPatternDepth {
		ms.fail("pattern too complex")
	}
	defer func() { ms.depth-- }()
	for {
		ms.step()
		if p >= len(ms.pat) {
			return s // end of pattern
		}
		switch ms.pat[p] {
		case '(':
			if ms.at(p+1) == ')' {
				return ms.startCapture(s, p+2, capPosition)
			}
			return ms.startCapture(s, p+1, capUnfinished)
		case ')':
			return ms.endCapture(s, p+1)
		case '$':
			if p+1 == len(ms.pat) {
				if s == len(ms.src) {
					return s
				}
				return -1
			}
		case '%':
			switch next := ms.at(p + 1); {
			case next == 'b':
				if s = ms.matchBalance(s, p+2); s < 0 {
					return -1
				}
				p += 4
				continue
			case next == 'f':
				p += 2
				if ms.at(p) != '[' {
					ms.fail("missing '[' after '%f' in pattern")
				}
				ep := ms.classEnd(p)
				var prev, cur byte
				if s > 0 {
					prev = ms.src[s-1]
				}
				if s < len(ms.src) {
					cur = ms.src[s]
				}
				if ms.matchBracketClass(prev, p, ep-1) || !ms.matchBracketClass(cur, p, ep-1) {
					return -1
				}
				p = ep
				continue
			case '0' <= next && next <= '9':
				if s = ms.matchCapture(s, next); s < 0 {
					return -1
				}
				p += 2
				continue
			}
		}
		// A single character class, with its quantifier if any.
		ep := ms.classEnd(p)
		m := ms.singleMatch(s, p, ep)
		switch ms.at(ep) {
		case '?':
			if m {
				if res := ms.match(s+1, ep+1); res >= 0 {
					return res
				}
			}
			p = ep + 1
			continue
		case '*':
			return ms.maxExpand(s, p, ep)
		case '+':
			if !m {
				return -1
			}
			return ms.maxExpand(s+1, p, ep)
		case '-':
			return ms.minExpand(s, p, ep)
		}
		if !m {
			return -1
		}
		s++
		p = ep
	}
}

func (ms *matcher) maxExpand(s, p, ep int) int {
	i := 0
	for ms.singleMatch(s+i, p, ep) {
		ms.step()
		i++
	}
	for ; i >= 0; i-- { // try with the most repetitions first
		if res := ms.match(s+i, ep+1); res >= 0 {
			return res
		}
	}
	return -1
}

func (ms *matcher) minExpand(s, p, ep int) int {
	for {
		if res := ms.match(s, ep+1); res >= 0 {
			return res
		}
		if !ms.singleMatch(s, p, ep) {
			return -1
		}
		s++
	}
}

func (ms *matcher) startCapture(s, p, what int) int {
	if ms.level >= maxCaptures {
		ms.fail("too many captures")
	}
	ms.capture[ms.level].init, ms.capture[ms.level].len = s, what
	ms.level++
	res := ms.match(s, p)
	if res < 0 {
		ms.level-- // undo the capture
	}
	return res
}

func (ms *matcher) endCapture(s, p int) int {
	l := -1
	for i := ms.level - 1; i >= 0; i-- {
		if ms.capture[i].len == capUnfinished {
			l = i
			break
		}
	}
	if l < 0 {
		ms.fail("invalid pattern capture")
	}
	ms.capture[l].len = s - ms.capture[l].init
	res := ms.match(s, p)
	if res < 0 {
		ms.capture[l].len = capUnfinished
	}
	return res
}

func (ms *matcher) matchBalance(s, p int) int {
	if p+1 >= len(ms.pat) {
		ms.fail("unbalanced pattern")
	}
	if s >= len(ms.src) || ms.src[s] != ms.pat[p] {
		return -1
	}
	b, e, cont := ms.pat[p], ms.pat[p+1], 1
	for s++; s < len(ms.src); s++ {
		ms.step()
		switch ms.src[s] {
		case e:
			if cont--; cont == 0 {
				return s + 1
			}
		case b:
			cont++
		}
	}
	return -1
}

func (ms *matcher) matchCapture(s int, l byte) int {
	i := ms.checkCapture(l)
	n := ms.capture[i].len
	if n >= 0 && len(ms.src)-s >= n && ms.src[s:s+n] == ms.src[ms.capture[i].init:ms.capture[i].init+n] {
		return s + n
	}
	return -1
}

func (ms *matcher) checkCapture(l byte) int {
	i := int(l) - '1'
	if i < 0 || i >= ms.level || ms.capture[i].len == capUnfinished {
		ms.fail("invalid capture index")
	}
	return i
}

// reset readies the matcher for another try (lstrlib.c's reprepstate).
func (ms *matcher) reset() {
	ms.level, ms.depth = 0, 0
}

// captureValue is capture i of the match [s, e) (the whole match when there are no captures).
func (ms *matcher) captureValue(i, s, e int) lua.LValue {
	if i >= ms.level {
		if i != 0 {
			ms.fail("invalid capture index")
		}
		return lua.LString(ms.src[s:e])
	}
	c := ms.capture[i]
	switch c.len {
	case capUnfinished:
		ms.fail("unfinished capture")
	case capPosition:
		return lua.LNumber(c.init + 1)
	}
	return lua.LString(ms.src[c.init : c.init+c.len])
}

// pushCaptures pushes the captures of the match [s, e) (the whole match when it has none and
// whole is set) and returns how many it pushed.
func (ms *matcher) pushCaptures(s, e int, whole bool) int {
	n := ms.level
	if n == 0 && whole {
		n = 1
	}
	checkStack(ms.L, ms.L.GetTop(), n, "too many captures")
	for i := range n {
		ms.L.Push(ms.captureValue(i, s, e))
	}
	return n
}

// posRelat is Lua 5.1's posrelat: a negative position counts from the end.
func posRelat(pos int64, n int) int64 {
	if pos < 0 {
		pos += int64(n) + 1
	}
	return max(pos, 0)
}

// strFind and strMatch are string.find and string.match (str_find_aux).
func (m *vm) strFind(L *lua.LState) int  { return m.findAux(L, true) }
func (m *vm) strMatch(L *lua.LState) int { return m.findAux(L, false) }

func (m *vm) findAux(L *lua.LState, find bool) int {
	s := checkString(L, 1)
	p := checkString(L, 2)
	init := posRelat(optInteger(L, 3, 1), len(s)) - 1
	if init < 0 {
		init = 0
	} else if init > int64(len(s)) {
		init = int64(len(s))
	}
	start := int(init)
	if find && (lua.LVAsBool(L.Get(4)) || !hasSpecials(p)) {
		// A plain search: strings.Index is linear.
		if i := strings.Index(s[start:], p); i >= 0 {
			L.Push(lua.LNumber(start + i + 1))
			L.Push(lua.LNumber(start + i + len(p)))
			return 2
		}
		L.Push(lua.LNil)
		return 1
	}
	ms := m.newMatcher(L, s, p)
	pp, anchor := 0, ms.at(0) == '^'
	if anchor {
		pp = 1
	}
	for s1 := start; ; s1++ {
		ms.reset()
		if e := ms.match(s1, pp); e >= 0 {
			if find {
				L.Push(lua.LNumber(s1 + 1))
				L.Push(lua.LNumber(e))
				return ms.pushCaptures(-1, -1, false) + 2
			}
			return ms.pushCaptures(s1, e, true)
		}
		if s1 >= len(s) || anchor {
			break
		}
	}
	L.Push(lua.LNil)
	return 1
}

// hasSpecials is strpbrk(p, SPECIALS) != NULL: p, up to its first NUL, has a magic character.
func hasSpecials(p string) bool {
	if i := strings.IndexByte(p, 0); i >= 0 {
		p = p[:i]
	}
	return strings.ContainsAny(p, patternSpecials)
}

// strGmatch is string.gmatch: an iterator over the matches of a pattern (gmatch_aux). As in
// Lua 5.1, '^' is not an anchor here.
func (m *vm) strGmatch(L *lua.LState) int {
	s := checkString(L, 1)
	p := checkString(L, 2)
	pos := 0
	L.Push(L.NewFunction(func(L *lua.LState) int {
		ms := m.newMatcher(L, s, p)
		for src := pos; src <= len(s); src++ {
			ms.reset()
			if e := ms.match(src, 0); e >= 0 {
				pos = e
				if e == src {
					pos++ // an empty match: go on at least one position
				}
				return ms.pushCaptures(src, e, true)
			}
		}
		return 0
	}))
	return 1
}

// strGsub is string.gsub (str_gsub), its result charged to the run's memory as it grows.
func (m *vm) strGsub(L *lua.LState) int {
	src := checkString(L, 1)
	p := checkString(L, 2)
	repl := L.Get(3)
	switch repl.(type) {
	case lua.LNumber, lua.LString, *lua.LFunction, *lua.LTable:
	default:
		argError(L, 3, "string/function/table expected")
	}
	maxN := optInteger(L, 4, int64(len(src))+1)
	ms := m.newMatcher(L, src, p)
	pp, anchor := 0, ms.at(0) == '^'
	if anchor {
		pp = 1
	}
	b := &luaBuffer{m: m, L: L}
	s, n := 0, int64(0)
	for n < maxN {
		ms.reset()
		e := ms.match(s, pp)
		if e >= 0 {
			n++
			ms.addValue(b, s, e, repl)
		}
		switch {
		case e >= 0 && e > s:
			s = e
		case s < len(src):
			b.addByte(src[s])
			s++
		default:
			anchor = true // nothing left: stop
		}
		if anchor {
			break
		}
	}
	b.addString(src[s:])
	L.Push(b.value())
	L.Push(lua.LNumber(n))
	return 2
}

// addValue appends the replacement of the match [s, e) (add_value, add_s).
func (ms *matcher) addValue(b *luaBuffer, s, e int, repl lua.LValue) {
	L := ms.L
	var v lua.LValue
	switch r := repl.(type) {
	case lua.LString, lua.LNumber:
		news, _ := stringish(r)
		for i := 0; i < len(news); i++ {
			c := news[i]
			if c != '%' {
				b.addByte(c)
				continue
			}
			i++
			var d byte // Lua 5.1 reads the C string's terminator after a final '%'
			if i < len(news) {
				d = news[i]
			}
			switch {
			case d == '0':
				b.addString(ms.src[s:e])
			case '1' <= d && d <= '9':
				cv, _ := stringish(ms.captureValue(int(d-'1'), s, e))
				b.addString(cv)
			default:
				b.addByte(d)
			}
		}
		return
	case *lua.LTable:
		v = L.GetTable(r, ms.captureValue(0, s, e))
	case *lua.LFunction:
		top := L.GetTop()
		L.Push(r)
		n := ms.pushCaptures(s, e, true)
		L.Call(n, 1)
		v = L.Get(-1)
		L.SetTop(top)
	}
	if !lua.LVAsBool(v) {
		b.addString(ms.src[s:e]) // keep the original text
		return
	}
	str, ok := stringish(v)
	if !ok {
		raiseLua(L, "invalid replacement value (a "+v.Type().String()+")")
	}
	b.addString(str)
}

// tableSort is table.sort as gopher-lua sorts (sort.Sort, the comparator or Lua's <), making the
// run's check every patternCheckEvery comparisons: sorting a large table with Lua's own < runs
// no Lua instruction, so neither the time limit nor SCRIPT KILL would see it otherwise.
func (m *vm) tableSort(L *lua.LState) int {
	tbl := L.CheckTable(1)
	s := &luaSorter{m: m, L: L}
	if L.GetTop() != 1 {
		s.fn = L.CheckFunction(2)
	}
	n := tbl.Len()
	s.values = make([]lua.LValue, n)
	for i := range n {
		s.values[i] = tbl.RawGetInt(i + 1)
	}
	sort.Sort(s)
	for i, v := range s.values {
		tbl.RawSetInt(i+1, v)
	}
	return 0
}

type luaSorter struct {
	m      *vm
	L      *lua.LState
	fn     *lua.LFunction
	values []lua.LValue
	n      int
}

func (s *luaSorter) Len() int      { return len(s.values) }
func (s *luaSorter) Swap(i, j int) { s.values[i], s.values[j] = s.values[j], s.values[i] }

func (s *luaSorter) Less(i, j int) bool {
	if s.n++; s.n%patternCheckEvery == 0 {
		s.m.checkNow(s.L)
	}
	if s.fn == nil {
		return s.L.LessThan(s.values[i], s.values[j])
	}
	s.L.Push(s.fn)
	s.L.Push(s.values[i])
	s.L.Push(s.values[j])
	s.L.Call(2, 1)
	less := lua.LVAsBool(s.L.Get(-1))
	s.L.Pop(1)
	return less
}
