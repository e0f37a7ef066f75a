package server

// Glob patterns as Redis's stringmatchlen (util.c) matches them: * ? [abc] [^a-z] and \
// escapes, byte for byte, and in time that does not grow with the pattern for each name it is
// matched against. KEYS, SCAN MATCH, PSUBSCRIBE, PUBSUB CHANNELS and ACL key and channel
// patterns use it, on the apply goroutine or under the view lock, with patterns a client chose.
//
// A pattern is compiled once into star-free segments of one-byte tokens (each a set of bytes;
// a class's set is computed once, not once per byte of the name). A name matches when the first
// segment matches at its start, the last at its end, and the ones between are found in order,
// each at its leftmost place: with * as the only variable-length token, the leftmost place is
// always as good as any later one. Literal segments are found with bytes.Index; the others with
// a bit-parallel shift-and over the segment's tokens. Matching one name of n bytes costs
// O(n·⌈L/64⌉) word operations, where L ≤ n is the longest segment that fits in the name, and
// O(1) when the segments cannot fit at all; compiling costs O(len(pattern)). A short pattern
// matched only once (globMatch: ACL patterns) is matched by Redis's own algorithm instead,
// without compiling or allocating.

import (
	"bytes"
	"math/bits"
)

// globNestingLimit is Redis's protection against abusive patterns (stringmatchlen_impl returns
// no match past 1000 nested *s): a pattern with more *s that each need something after them
// matches no name, and Redis's answers are ours.
const globNestingLimit = 1000

// glob is a compiled pattern.
//
// A glob is not safe for concurrent use: matching counts its steps, and compiles the pattern
// again for a name longer than it was compiled for.
type glob struct {
	pattern []byte
	maxName int  // the longest name it was compiled for
	cut     bool // compiling stopped at maxName: a longer name needs it compiled again
	empty   bool // the pattern was "": Redis matches it with "" only
	never   bool // no name of at most maxName bytes matches (or past Redis's nesting limit)
	// segs are the star-free runs: segs[0] before the first *, segs[len-1] after the last one
	// (either may be empty). With no * there is one, matched against the whole name.
	segs   []globSeg
	stars  int
	minLen int // the bytes a matching name needs at least

	// table holds the shift-and masks of every non-literal segment's tokens, side by side:
	// bit p of table[c*words+p/64] is set when the token at position p admits byte c. Built
	// when compiling, if a segment between two *s needs it.
	table []uint64
	words int
	steps int64 // word operations done matching, for tests that hold it linear
}

// globSeg is a run of one-byte tokens between *s.
type globSeg struct {
	lit  []byte      // the bytes, when every token is one literal byte
	sets [][4]uint64 // otherwise each token's set of bytes
	at   int         // the segment's first position in glob.table
}

func (s *globSeg) len() int {
	if s.sets != nil {
		return len(s.sets)
	}
	return len(s.lit)
}

// shortGlob is the longest pattern globMatch matches without compiling it.
const shortGlob = 256

// globMatch reports whether s matches the glob pattern, as Redis's stringmatchlen does. A
// pattern matched once (an ACL key or channel pattern, checked for every key of every command)
// is not worth compiling when it is short: it is matched as Redis matches it, allocating
// nothing, at a cost of at most O(len(pattern) × len(s)) = O(256 × len(s)). Longer ones are
// compiled.
func globMatch(pattern, s []byte) bool {
	if len(pattern) <= shortGlob {
		skipLonger := false
		return stringMatch(pattern, s, &skipLonger, 0)
	}
	return compileGlob(pattern, len(s)).match(s)
}

// stringMatch is Redis's stringmatchlen_impl (util.c), byte for byte: * ? [abc] [^a-z] and \
// escapes, with its guards against abusive patterns (skipLonger, and no match past 1000 nested
// *s). Its cost grows with the pattern times the name: only short patterns come here.
func stringMatch(pattern, s []byte, skipLonger *bool, nesting int) bool {
	if nesting > globNestingLimit {
		return false
	}
	for len(pattern) > 0 && len(s) > 0 {
		switch pattern[0] {
		case '*':
			for len(pattern) > 1 && pattern[1] == '*' {
				pattern = pattern[1:]
			}
			if len(pattern) == 1 {
				return true
			}
			for len(s) > 0 {
				if stringMatch(pattern[1:], s, skipLonger, nesting+1) {
					return true
				}
				if *skipLonger {
					return false
				}
				s = s[1:]
			}
			// No match for the rest of the pattern from anywhere in s: a longer match for an
			// earlier * cannot help either.
			*skipLonger = true
			return false
		case '?':
			s = s[1:]
		case '[':
			var match bool
			pattern, match = matchClass(pattern[1:], s[0])
			if !match {
				return false
			}
			s = s[1:]
		case '\\':
			if len(pattern) >= 2 {
				pattern = pattern[1:]
			}
			fallthrough
		default:
			if pattern[0] != s[0] {
				return false
			}
			s = s[1:]
		}
		if len(pattern) > 0 {
			pattern = pattern[1:]
		}
		if len(s) == 0 {
			for len(pattern) > 0 && pattern[0] == '*' {
				pattern = pattern[1:]
			}
			break
		}
	}
	return len(pattern) == 0 && len(s) == 0
}

// compileGlob compiles pattern for names of at most maxName bytes: a pattern that needs more
// is compiled no further (it never matches), so what compiling keeps is O(maxName) whatever
// the pattern's length.
func compileGlob(pattern []byte, maxName int) *glob {
	g := &glob{pattern: pattern, maxName: maxName, empty: len(pattern) == 0}
	var cur globSeg
	literal := true
	var bytesLit []byte
	var sets [][4]uint64
	flush := func() {
		if literal {
			cur.lit = bytesLit
		} else {
			cur.sets = sets
		}
		g.segs = append(g.segs, cur)
		cur, literal, bytesLit, sets = globSeg{}, true, nil, nil
	}
	add := func(set *[4]uint64, b byte, single bool) {
		g.minLen++
		if literal && single {
			bytesLit = append(bytesLit, b)
			return
		}
		if literal {
			literal = false
			for _, c := range bytesLit {
				var one [4]uint64
				one[c>>6] |= 1 << (c & 63)
				sets = append(sets, one)
			}
		}
		if single {
			var one [4]uint64
			one[b>>6] |= 1 << (b & 63)
			sets = append(sets, one)
		} else {
			sets = append(sets, *set)
		}
	}
	all := [4]uint64{^uint64(0), ^uint64(0), ^uint64(0), ^uint64(0)}
	for len(pattern) > 0 {
		if g.minLen > maxName {
			g.never, g.cut = true, true
			return g
		}
		switch pattern[0] {
		case '*':
			for len(pattern) > 1 && pattern[1] == '*' {
				pattern = pattern[1:]
			}
			flush()
			g.stars++
		case '?':
			add(&all, 0, false)
		case '[':
			var set [4]uint64
			pattern = compileClass(pattern[1:], &set)
			add(&set, 0, false)
		case '\\':
			if len(pattern) >= 2 {
				pattern = pattern[1:]
			}
			add(nil, pattern[0], true)
		default:
			add(nil, pattern[0], true)
		}
		if len(pattern) > 0 {
			pattern = pattern[1:]
		}
	}
	flush()
	if g.minLen > maxName {
		g.never, g.cut = true, true
		return g
	}
	// The masks are built now, not at the first match (under the caller's lock), when a
	// segment between two *s will be searched for.
	for i := 1; i < len(g.segs)-1; i++ {
		if g.segs[i].sets != nil {
			g.buildTable()
			break
		}
	}
	// Redis recurses once per * that has something after it, and gives up past its limit.
	needy := g.stars
	if g.stars > 0 && g.segs[len(g.segs)-1].len() == 0 {
		needy--
	}
	if needy > globNestingLimit {
		g.never = true
	}
	return g
}

// compileClass sets in set the bytes the class that starts at pattern (just past its '[')
// admits, parsing it as stringmatchlen does (its parse does not depend on the byte matched).
// It returns the pattern at the class's closing ']' (which the caller's step skips), or empty
// for an unterminated class (Redis steps back onto its last byte, and the same step leaves
// nothing).
func compileClass(pattern []byte, set *[4]uint64) []byte {
	not := len(pattern) > 0 && pattern[0] == '^'
	if not {
		pattern = pattern[1:]
	}
	add := func(lo, hi byte) {
		for c := int(lo); c <= int(hi); c++ {
			set[c>>6] |= 1 << (c & 63)
		}
	}
	for {
		if len(pattern) >= 2 && pattern[0] == '\\' {
			pattern = pattern[1:]
			add(pattern[0], pattern[0])
		} else if len(pattern) > 0 && pattern[0] == ']' {
			break
		} else if len(pattern) == 0 {
			break
		} else if len(pattern) >= 3 && pattern[1] == '-' {
			lo, hi := pattern[0], pattern[2]
			if lo > hi {
				lo, hi = hi, lo
			}
			pattern = pattern[2:]
			add(lo, hi)
		} else {
			add(pattern[0], pattern[0])
		}
		pattern = pattern[1:]
	}
	if not {
		for i := range set {
			set[i] = ^set[i]
		}
	}
	return pattern
}

// matchClass matches c against the class that starts at pattern (just past its '['), as
// compileClass parses it. It returns the pattern at the class's closing ']', or empty for an
// unterminated class.
func matchClass(pattern []byte, c byte) ([]byte, bool) {
	not := len(pattern) > 0 && pattern[0] == '^'
	if not {
		pattern = pattern[1:]
	}
	match := false
	for {
		if len(pattern) >= 2 && pattern[0] == '\\' {
			pattern = pattern[1:]
			if pattern[0] == c {
				match = true
			}
		} else if len(pattern) > 0 && pattern[0] == ']' {
			break
		} else if len(pattern) == 0 {
			break
		} else if len(pattern) >= 3 && pattern[1] == '-' {
			lo, hi := pattern[0], pattern[2]
			if lo > hi {
				lo, hi = hi, lo
			}
			pattern = pattern[2:]
			if c >= lo && c <= hi {
				match = true
			}
		} else if pattern[0] == c {
			match = true
		}
		pattern = pattern[1:]
	}
	return pattern, match != not
}

// match reports whether name matches the compiled pattern.
func (g *glob) match(name []byte) bool {
	g.steps++
	if len(name) == 0 {
		return g.empty // stringmatchlen's loop never runs: only "" matches ""
	}
	if g.cut && len(name) > g.maxName {
		*g = *compileGlob(g.pattern, max(len(name), 2*g.maxName))
	}
	if g.never || len(name) < g.minLen {
		return false
	}
	first := &g.segs[0]
	if g.stars == 0 {
		return len(name) == first.len() && g.matchAt(first, name)
	}
	last := &g.segs[len(g.segs)-1]
	if !g.matchAt(first, name[:first.len()]) || !g.matchAt(last, name[len(name)-last.len():]) {
		return false
	}
	rest := name[first.len() : len(name)-last.len()]
	for i := 1; i < len(g.segs)-1; i++ {
		seg := &g.segs[i]
		at := g.index(seg, rest)
		if at < 0 {
			return false
		}
		rest = rest[at+seg.len():]
	}
	return true
}

// matchAt reports whether seg matches all of s (len(s) == seg.len()).
func (g *glob) matchAt(seg *globSeg, s []byte) bool {
	g.steps += int64(len(s))
	if seg.sets == nil {
		return bytes.Equal(seg.lit, s)
	}
	for i, c := range s {
		if seg.sets[i][c>>6]&(1<<(c&63)) == 0 {
			return false
		}
	}
	return true
}

// index returns where seg first matches in s, or -1.
func (g *glob) index(seg *globSeg, s []byte) int {
	n := seg.len()
	if n > len(s) {
		return -1
	}
	if seg.sets == nil {
		g.steps += int64(len(s))
		return bytes.Index(s, seg.lit)
	}
	if g.table == nil {
		g.buildTable()
	}
	// Shift-and: bit j of d is set when the tokens 0..j match the bytes just read.
	w := (n + 63) / 64
	var small [1]uint64
	d := small[:]
	if w > 1 {
		d = make([]uint64, w)
	}
	top := uint64(1) << ((n - 1) & 63)
	for i, c := range s {
		g.steps += int64(w)
		carry := uint64(1)
		row := g.table[int(c)*g.words : (int(c)+1)*g.words]
		for j := range d {
			m := bitsAt(row, seg.at+64*j)
			next := (d[j]<<1 | carry) & m
			carry = d[j] >> 63
			d[j] = next
		}
		if d[w-1]&top != 0 {
			return i - n + 1
		}
	}
	return -1
}

// bitsAt returns the 64 bits of row from bit p on (zeros past its end).
func bitsAt(row []uint64, p int) uint64 {
	i, o := p/64, uint(p%64)
	v := row[i] >> o
	if o > 0 && i+1 < len(row) {
		v |= row[i+1] << (64 - o)
	}
	return v
}

// buildTable lays out the masks of the non-literal segments' tokens: 32 bytes a token.
func (g *glob) buildTable() {
	total := 0
	for i := range g.segs {
		if g.segs[i].sets != nil {
			g.segs[i].at = total
			total += len(g.segs[i].sets)
		}
	}
	g.words = (total + 63) / 64
	g.table = make([]uint64, 256*g.words)
	for i := range g.segs {
		seg := &g.segs[i]
		for j, set := range seg.sets {
			p := seg.at + j
			for k, word := range set {
				g.steps += int64(bits.OnesCount64(word))
				for word != 0 {
					c := k*64 + bits.TrailingZeros64(word)
					g.table[c*g.words+p/64] |= 1 << (p % 64)
					word &= word - 1
				}
			}
		}
	}
}
