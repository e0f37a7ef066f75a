package server

// Sorted set commands: ZADD, ZINCRBY, ZREM, ZREMRANGEBYSCORE, ZREMRANGEBYRANK, ZPOPMIN, ZPOPMAX,
// ZSCORE, ZMSCORE, ZCARD, ZCOUNT, ZRANK, ZREVRANK, ZRANGE, ZREVRANGE, ZRANGEBYSCORE,
// ZREVRANGEBYSCORE, ZRANGEBYLEX, ZREVRANGEBYLEX. A sorted set keeps its members in (score,
// member) order, ties by member bytes, as Redis does; its replies are those of a small Redis
// sorted set (a listpack), so a stored score of -0 reads back as 0. Symfony's and
// redis-semaphore's semaphores are sorted sets.

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/raftlock/raftlock/fsm"
)

const (
	errNotFloat   = "ERR value is not a valid float"
	errRangeFloat = "ERR min or max is not a float"
	errRangeLex   = "ERR min or max not valid string range item"
	errNaNScore   = "ERR resulting score is not a number (NaN)"
)

// editZSet returns a copy of z (a new sorted set when nil) to change.
func editZSet(z *fsm.Collection) *fsm.Collection {
	if z == nil {
		return &fsm.Collection{Type: fsm.TypeZSet}
	}
	return &fsm.Collection{Type: fsm.TypeZSet, Elems: slices.Clone(z.Elems), Scores: slices.Clone(z.Scores)}
}

// zsetRemove removes the member at index i of z (a copy being changed).
func zsetRemove(z *fsm.Collection, i int) {
	z.Elems = slices.Delete(z.Elems, i, i+1)
	z.Scores = slices.Delete(z.Scores, i, i+1)
}

// zsetInsert inserts member, not in z (a copy being changed), at its place in (score, member)
// order. A score of -0 is stored as 0, as a Redis listpack stores it.
func zsetInsert(z *fsm.Collection, member []byte, score float64) {
	if score == 0 {
		score = 0 // -0 == 0: it becomes +0
	}
	i, _ := slices.BinarySearch(z.Scores, score) // the first of the scores equal to it
	for i < len(z.Elems) && z.Scores[i] == score && bytes.Compare(z.Elems[i], member) < 0 {
		i++
	}
	z.Elems = slices.Insert(z.Elems, i, member)
	z.Scores = slices.Insert(z.Scores, i, score)
}

// zsetScore is the score of member in z, which may be missing (nil).
func zsetScore(z *fsm.Collection, member []byte) (float64, bool) {
	if z == nil {
		return 0, false
	}
	if i := z.Index(member); i >= 0 {
		return z.Scores[i], true
	}
	return 0, false
}

// isSpace is C's isspace in the C locale.
func isSpace(c byte) bool {
	return c == ' ' || '\t' <= c && c <= '\r'
}

// strtod parses the whole of b as C's strtod reads a double: an optional sign, then decimal
// digits with an optional point and exponent, hexadecimal digits after 0x with an optional
// binary exponent, or inf, infinity or nan in any case. b must not start with a space (strtod
// skips those; the callers decide). erange reports a value out of a double's range: rounded to
// an infinity, or a non-zero value rounded to 0 (glibc's ERANGE; a subnormal result is not).
func strtod(b []byte) (f float64, erange, ok bool) {
	s := string(b)
	if s == "" || strings.IndexByte(s, '_') >= 0 { // ParseFloat takes Go's 1_000; strtod does not
		return 0, false, false
	}
	unsigned := s
	if s[0] == '+' || s[0] == '-' {
		unsigned = s[1:]
	}
	hex := len(unsigned) > 2 && unsigned[0] == '0' && (unsigned[1] == 'x' || unsigned[1] == 'X')
	if hex && !strings.ContainsAny(s, "pP") {
		s += "p0" // strtod's binary exponent is optional, ParseFloat's is not
	}
	f, err := strconv.ParseFloat(s, 64)
	if errors.Is(err, strconv.ErrRange) {
		return f, true, true
	}
	if err != nil {
		return 0, false, false
	}
	if f == 0 {
		// ParseFloat rounds an underflow to 0 silently: a non-zero digit in the mantissa
		// tells it from a zero.
		mantissa, marks, nonZero := unsigned, "eE", "123456789"
		if hex {
			mantissa, marks, nonZero = unsigned[2:], "pP", "123456789abcdefABCDEF"
		}
		if i := strings.IndexAny(mantissa, marks); i >= 0 {
			mantissa = mantissa[:i]
		}
		erange = strings.ContainsAny(mantissa, nonZero)
	}
	return f, erange, true
}

// parseScore parses a score or an increment as Redis's getDoubleFromObject does: strtod over
// the whole argument, with no leading space, and neither NaN nor a value out of range.
func parseScore(b []byte) (float64, bool) {
	if len(b) == 0 || isSpace(b[0]) {
		return 0, false
	}
	f, erange, ok := strtod(b)
	if !ok || erange || math.IsNaN(f) {
		return 0, false
	}
	return f, true
}

// scoreRange is the min and max of ZCOUNT, ZRANGEBYSCORE and friends, each inclusive unless
// "(" made it exclusive.
type scoreRange struct {
	min, max     float64
	minex, maxex bool
}

// parseScoreRange parses min and max as Redis's zslParseRange does: "(" before a bound makes
// it exclusive; the rest is strtod's, leading spaces and infinities included (an empty bound is
// 0, as strtod reads it).
func parseScoreRange(minArg, maxArg []byte) (scoreRange, bool) {
	var sr scoreRange
	var ok1, ok2 bool
	sr.min, sr.minex, ok1 = parseRangeBound(minArg)
	sr.max, sr.maxex, ok2 = parseRangeBound(maxArg)
	return sr, ok1 && ok2
}

func parseRangeBound(b []byte) (f float64, ex, ok bool) {
	if len(b) > 0 && b[0] == '(' {
		b, ex = b[1:], true
	}
	if len(b) == 0 {
		return 0, ex, true
	}
	trimmed := bytes.TrimLeftFunc(b, func(r rune) bool { return r < 0x80 && isSpace(byte(r)) })
	f, _, ok = strtod(trimmed)
	return f, ex, ok && !math.IsNaN(f)
}

func (sr scoreRange) aboveMin(s float64) bool {
	if sr.minex {
		return s > sr.min
	}
	return s >= sr.min
}

func (sr scoreRange) belowMax(s float64) bool {
	if sr.maxex {
		return s < sr.max
	}
	return s <= sr.max
}

// empty reports a range nothing can be in (zslIsInRange's first test).
func (sr scoreRange) empty() bool {
	return sr.min > sr.max || sr.min == sr.max && (sr.minex || sr.maxex)
}

// lexBound is one end of a BYLEX range: "-" (the least string), "+" (the greatest) or a value,
// inclusive after "[" and exclusive after "(".
type lexBound struct {
	inf   int // -1 for "-", 1 for "+", 0 for a value
	value []byte
	ex    bool
}

// parseLexBound parses a bound as Redis's zslParseLexRangeItem does.
func parseLexBound(b []byte) (lexBound, bool) {
	switch {
	case len(b) == 0:
		return lexBound{}, false
	case b[0] == '+' || b[0] == '-':
		if len(b) != 1 {
			return lexBound{}, false
		}
		if b[0] == '+' {
			return lexBound{inf: 1, ex: true}, true
		}
		return lexBound{inf: -1, ex: true}, true
	case b[0] == '(' || b[0] == '[':
		return lexBound{value: b[1:], ex: b[0] == '('}, true
	}
	return lexBound{}, false
}

// compareLex orders two bounds as Redis's sdscmplex does.
func compareLex(a, b lexBound) int {
	switch {
	case a.inf != 0 && a.inf == b.inf:
		return 0
	case a.inf < 0 || b.inf > 0:
		return -1
	case a.inf > 0 || b.inf < 0:
		return 1
	}
	return bytes.Compare(a.value, b.value)
}

// lexRange is the min and max of a BYLEX range.
type lexRange struct{ min, max lexBound }

func (lr lexRange) aboveMin(member []byte) bool {
	c := compareLex(lexBound{value: member}, lr.min)
	return c > 0 || c == 0 && !lr.min.ex
}

func (lr lexRange) belowMax(member []byte) bool {
	c := compareLex(lexBound{value: member}, lr.max)
	return c < 0 || c == 0 && !lr.max.ex
}

func (lr lexRange) empty() bool {
	c := compareLex(lr.min, lr.max)
	return c > 0 || c == 0 && (lr.min.ex || lr.max.ex)
}

// ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...] -> the number of members
// added (with CH: added or changed); with INCR, the member's new score, or nil when NX, XX, GT
// or LT prevented the change.
func cmdZAdd(r *request) { zadd(r, false) }

// ZINCRBY key increment member -> the member's new score (the increment when it was missing).
func cmdZIncrBy(r *request) { zadd(r, true) }

// zaddFlags are ZADD's options.
type zaddFlags struct{ nx, xx, gt, lt, ch, incr bool }

// zadd is Redis's zaddGenericCommand. ZINCRBY is ZADD INCR with no other option: its
// increment and member are a pair of ZADD's.
func zadd(r *request, incrby bool) {
	var f zaddFlags
	i := 2
	if incrby {
		f.incr = true
	} else {
	options:
		for ; i < len(r.args); i++ {
			switch a := r.args[i]; {
			case is(a, "nx"):
				f.nx = true
			case is(a, "xx"):
				f.xx = true
			case is(a, "gt"):
				f.gt = true
			case is(a, "lt"):
				f.lt = true
			case is(a, "ch"):
				f.ch = true
			case is(a, "incr"):
				f.incr = true
			default:
				break options
			}
		}
	}
	pairs := r.args[i:]
	switch {
	case len(pairs) == 0 || len(pairs)%2 != 0:
		r.w.Error(errSyntax)
		return
	case f.nx && f.xx:
		r.w.Error("ERR XX and NX options at the same time are not compatible")
		return
	case f.nx && (f.gt || f.lt) || f.gt && f.lt:
		r.w.Error("ERR GT, LT, and/or NX options at the same time are not compatible")
		return
	case f.incr && len(pairs) > 2:
		r.w.Error("ERR INCR option supports a single increment-element pair")
		return
	}
	scores := make([]float64, len(pairs)/2)
	for j := range scores {
		var ok bool
		if scores[j], ok = parseScore(pairs[2*j]); !ok {
			r.w.Error(errNotFloat)
			return
		}
	}
	if !r.checkKey(r.args[1]) {
		return
	}
	for j := 1; j < len(pairs); j += 2 {
		if !r.checkValue(pairs[j]) {
			return
		}
	}
	var added, updated, processed int
	var score float64
	ok := r.update(r.args[1], fsm.TypeZSet, func(cur *fsm.Collection) (*fsm.Collection, bool, string) {
		added, updated, processed = 0, 0, 0
		if cur == nil && f.xx {
			return nil, false, ""
		}
		next := editZSet(cur)
		for j, s := range scores {
			member := pairs[2*j+1]
			k := next.Index(member)
			if k < 0 {
				if f.xx {
					continue
				}
				zsetInsert(next, member, s)
				added++
				processed++
				score = s
				continue
			}
			old := next.Scores[k]
			if f.nx {
				continue
			}
			if f.incr {
				if s += old; math.IsNaN(s) {
					return nil, false, errNaNScore
				}
			}
			if f.lt && s >= old || f.gt && s <= old {
				continue
			}
			processed++
			score = s
			if s != old {
				zsetRemove(next, k)
				zsetInsert(next, member, s)
				updated++
			}
		}
		return next, added+updated > 0, ""
	})
	switch {
	case !ok:
	case f.incr && processed == 0:
		r.w.Null()
	case f.incr:
		r.w.Double(score)
	case f.ch:
		r.w.Int(int64(added + updated))
	default:
		r.w.Int(int64(added))
	}
}

// ZREM key member [member ...] -> the number of members removed.
func cmdZRem(r *request) {
	members := r.args[2:]
	var removed int64
	ok := r.update(r.args[1], fsm.TypeZSet, func(cur *fsm.Collection) (*fsm.Collection, bool, string) {
		removed = 0
		if cur == nil {
			return nil, false, ""
		}
		next := editZSet(cur)
		for _, m := range members {
			if k := next.Index(m); k >= 0 {
				zsetRemove(next, k)
				removed++
			}
		}
		return next, removed > 0, ""
	})
	if ok {
		r.w.Int(removed)
	}
}

// ZREMRANGEBYSCORE key min max -> the number of members removed whose score is in the range.
func cmdZRemRangeByScore(r *request) {
	sr, ok := parseScoreRange(r.args[2], r.args[3])
	if !ok {
		r.w.Error(errRangeFloat)
		return
	}
	zremRange(r, func(z *fsm.Collection) (start, end int) {
		start = len(z.Scores)
		for i, s := range z.Scores {
			if sr.aboveMin(s) {
				start = i
				break
			}
		}
		end = start
		for end < len(z.Scores) && sr.belowMax(z.Scores[end]) {
			end++
		}
		return start, end
	})
}

// ZREMRANGEBYRANK key start stop -> the number of members removed whose rank (from 0, lowest
// score first; negative from the end) is in [start, stop].
func cmdZRemRangeByRank(r *request) {
	start, ok1 := parseInt(r.args[2])
	stop, ok2 := parseInt(r.args[3])
	if !ok1 || !ok2 {
		r.w.Error(errNotInt)
		return
	}
	zremRange(r, func(z *fsm.Collection) (int, int) {
		from, to, ok := rankRange(start, stop, z.Len())
		if !ok {
			return 0, 0
		}
		return from, to + 1
	})
}

// zremRange removes the members at the indexes [start, end) that span picks, and replies
// their count.
func zremRange(r *request, span func(z *fsm.Collection) (start, end int)) {
	var removed int
	ok := r.update(r.args[1], fsm.TypeZSet, func(cur *fsm.Collection) (*fsm.Collection, bool, string) {
		removed = 0
		if cur == nil {
			return nil, false, ""
		}
		start, end := span(cur)
		if removed = end - start; removed <= 0 {
			removed = 0
			return nil, false, ""
		}
		next := editZSet(cur)
		next.Elems = slices.Delete(next.Elems, start, end)
		next.Scores = slices.Delete(next.Scores, start, end)
		return next, true, ""
	})
	if ok {
		r.w.Int(int64(removed))
	}
}

// rankRange turns Redis's start and stop ranks (negative: from the end) into the indexes
// [from, to] of a sorted set of n members; ok is false when the range is empty.
func rankRange(start, stop int64, n int) (from, to int, ok bool) {
	l := int64(n)
	if start < 0 {
		start += l
	}
	if stop < 0 {
		stop += l
	}
	start = max(start, 0)
	if start > stop || start >= l {
		return 0, 0, false
	}
	return int(start), int(min(stop, l-1)), true
}

// ZPOPMIN key [count], ZPOPMAX key [count] -> the popped members with their scores: member,
// score (RESP3 with a count: an array of [member, score] pairs).
func cmdZPopMin(r *request) { zpop(r, false) }
func cmdZPopMax(r *request) { zpop(r, true) }

func zpop(r *request, highest bool) {
	if len(r.args) > 3 {
		r.w.Error(errSyntax)
		return
	}
	count := int64(1)
	if len(r.args) == 3 {
		var ok bool
		if count, ok = parseInt(r.args[2]); !ok || count < 0 {
			// Redis's getPositiveLongFromObjectOrReply: one message for both.
			r.w.Error("ERR value is out of range, must be positive")
			return
		}
	}
	var popped *fsm.Collection
	ok := r.update(r.args[1], fsm.TypeZSet, func(cur *fsm.Collection) (*fsm.Collection, bool, string) {
		popped = nil
		if cur == nil || count == 0 {
			return nil, false, ""
		}
		n := int(min(count, int64(cur.Len())))
		popped = &fsm.Collection{Type: fsm.TypeZSet}
		next := editZSet(cur)
		if highest {
			for i := cur.Len() - 1; i >= cur.Len()-n; i-- {
				popped.Elems = append(popped.Elems, cur.Elems[i])
				popped.Scores = append(popped.Scores, cur.Scores[i])
			}
			next.Elems, next.Scores = next.Elems[:cur.Len()-n], next.Scores[:cur.Len()-n]
		} else {
			popped.Elems, popped.Scores = cur.Elems[:n], cur.Scores[:n]
			next.Elems, next.Scores = next.Elems[n:], next.Scores[n:]
		}
		return next, true, ""
	})
	if !ok {
		return
	}
	if popped == nil {
		r.w.Array(0)
		return
	}
	nested := r.w.Protocol() == 3 && len(r.args) == 3
	if nested {
		r.w.Array(popped.Len())
	} else {
		r.w.Array(2 * popped.Len())
	}
	for i, m := range popped.Elems {
		if nested {
			r.w.Array(2)
		}
		r.w.Bulk(m)
		r.w.Double(popped.Scores[i])
	}
}

// ZSCORE key member -> the member's score, or nil.
func cmdZScore(r *request) {
	z, ok := r.readTyped(r.args[1], fsm.TypeZSet)
	if !ok {
		return
	}
	if s, found := zsetScore(z, r.args[2]); found {
		r.w.Double(s)
	} else {
		r.w.Null()
	}
}

// ZMSCORE key member [member ...] -> each member's score, nil for a missing one.
func cmdZMScore(r *request) {
	z, ok := r.readTyped(r.args[1], fsm.TypeZSet)
	if !ok {
		return
	}
	members := r.args[2:]
	r.w.Array(len(members))
	for _, m := range members {
		if s, found := zsetScore(z, m); found {
			r.w.Double(s)
		} else {
			r.w.Null()
		}
	}
}

// ZCARD key -> the number of members.
func cmdZCard(r *request) {
	if z, ok := r.readTyped(r.args[1], fsm.TypeZSet); ok {
		r.w.Int(int64(collectionLen(z)))
	}
}

// ZCOUNT key min max -> the number of members whose score is in the range.
func cmdZCount(r *request) {
	sr, ok := parseScoreRange(r.args[2], r.args[3])
	if !ok {
		r.w.Error(errRangeFloat)
		return
	}
	z, ok := r.readTyped(r.args[1], fsm.TypeZSet)
	if !ok {
		return
	}
	var n int64
	if z != nil {
		for _, s := range z.Scores {
			if sr.aboveMin(s) && sr.belowMax(s) {
				n++
			}
		}
	}
	r.w.Int(n)
}

// ZRANK key member, ZREVRANK key member -> the member's rank from 0, lowest (ZREVRANK:
// highest) score first, or nil.
func cmdZRank(r *request)    { zrank(r, false) }
func cmdZRevRank(r *request) { zrank(r, true) }

func zrank(r *request, rev bool) {
	z, ok := r.readTyped(r.args[1], fsm.TypeZSet)
	if !ok {
		return
	}
	i := -1
	if z != nil {
		i = z.Index(r.args[2])
	}
	switch {
	case i < 0:
		r.w.Null()
	case rev:
		r.w.Int(int64(z.Len() - 1 - i))
	default:
		r.w.Int(int64(i))
	}
}

// rangeBy is what a ZRANGE ranges over.
type rangeBy uint8

const (
	byAuto rangeBy = iota // ZRANGE until BYSCORE or BYLEX says
	byRank
	byScore
	byLex
)

// ZRANGE key start stop [BYSCORE|BYLEX] [REV] [LIMIT offset count] [WITHSCORES] -> the members
// in the range (with WITHSCORES each followed by its score; in RESP3 [member, score] pairs).
// BYSCORE and BYLEX take min and max (max and min with REV); LIMIT needs one of them.
func cmdZRange(r *request) { zrange(r, byAuto, false, true) }

// ZREVRANGE key start stop [WITHSCORES]: ZRANGE ... REV.
func cmdZRevRange(r *request) { zrange(r, byRank, true, false) }

// ZRANGEBYSCORE key min max [WITHSCORES] [LIMIT offset count]: ZRANGE ... BYSCORE.
func cmdZRangeByScore(r *request) { zrange(r, byScore, false, false) }

// ZREVRANGEBYSCORE key max min [WITHSCORES] [LIMIT offset count]: ZRANGE ... BYSCORE REV.
func cmdZRevRangeByScore(r *request) { zrange(r, byScore, true, false) }

// ZRANGEBYLEX key min max [LIMIT offset count]: ZRANGE ... BYLEX.
func cmdZRangeByLex(r *request) { zrange(r, byLex, false, false) }

// ZREVRANGEBYLEX key max min [LIMIT offset count]: ZRANGE ... BYLEX REV.
func cmdZRevRangeByLex(r *request) { zrange(r, byLex, true, false) }

// zrange is Redis's zrangeGenericCommand: by and rev are fixed by the command, or (auto, for
// ZRANGE) chosen by its options.
func zrange(r *request, by rangeBy, rev, auto bool) {
	var withScores bool
	offset, limit := int64(0), int64(-1)
	for j := 4; j < len(r.args); j++ {
		a := r.args[j]
		switch {
		case is(a, "withscores"):
			withScores = true
		case is(a, "limit") && len(r.args)-j-1 >= 2:
			var ok1, ok2 bool
			offset, ok1 = parseInt(r.args[j+1])
			limit, ok2 = parseInt(r.args[j+2])
			if !ok1 || !ok2 {
				r.w.Error(errNotInt)
				return
			}
			j += 2
		case auto && !rev && is(a, "rev"):
			rev = true
		case by == byAuto && is(a, "bylex"):
			by = byLex
		case by == byAuto && is(a, "byscore"):
			by = byScore
		default:
			r.w.Error(errSyntax)
			return
		}
	}
	if by == byAuto {
		by = byRank
	}
	switch {
	case limit != -1 && by == byRank:
		r.w.Error("ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX")
		return
	case withScores && by == byLex:
		r.w.Error("ERR syntax error, WITHSCORES not supported in combination with BYLEX")
		return
	}
	minArg, maxArg := r.args[2], r.args[3]
	if rev && by != byRank {
		minArg, maxArg = maxArg, minArg
	}
	var pick func(z *fsm.Collection) []int
	switch by {
	case byRank:
		start, ok1 := parseInt(minArg)
		stop, ok2 := parseInt(maxArg)
		if !ok1 || !ok2 {
			r.w.Error(errNotInt)
			return
		}
		pick = func(z *fsm.Collection) []int { return pickRanks(z.Len(), start, stop, rev) }
	case byScore:
		sr, ok := parseScoreRange(minArg, maxArg)
		if !ok {
			r.w.Error(errRangeFloat)
			return
		}
		pick = func(z *fsm.Collection) []int {
			if sr.empty() {
				return nil
			}
			return pickRange(z.Len(), offset, limit, rev,
				func(i int) bool { return sr.aboveMin(z.Scores[i]) },
				func(i int) bool { return sr.belowMax(z.Scores[i]) })
		}
	case byLex:
		lo, ok1 := parseLexBound(minArg)
		hi, ok2 := parseLexBound(maxArg)
		if !ok1 || !ok2 {
			r.w.Error(errRangeLex)
			return
		}
		lr := lexRange{lo, hi}
		pick = func(z *fsm.Collection) []int {
			if lr.empty() {
				return nil
			}
			return pickRange(z.Len(), offset, limit, rev,
				func(i int) bool { return lr.aboveMin(z.Elems[i]) },
				func(i int) bool { return lr.belowMax(z.Elems[i]) })
		}
	}
	z, ok := r.readTyped(r.args[1], fsm.TypeZSet)
	if !ok {
		return
	}
	var picked []int
	if z != nil {
		picked = pick(z)
	}
	replyMembers(r, z, picked, withScores)
}

// pickRanks returns the indexes of the members ranked start to stop (Redis's ranks: negative
// from the end; with rev, highest score first) of a sorted set of n members, in reply order.
func pickRanks(n int, start, stop int64, rev bool) []int {
	from, to, ok := rankRange(start, stop, n)
	if !ok {
		return nil
	}
	picked := make([]int, 0, to-from+1)
	for rank := from; rank <= to; rank++ {
		if rev {
			picked = append(picked, n-1-rank)
		} else {
			picked = append(picked, rank)
		}
	}
	return picked
}

// pickRange returns the indexes of a BYSCORE or BYLEX range of a sorted set of n members, in
// reply order, as a Redis listpack walks it: from the first member above min (with rev, from
// the last below max), skipping offset members, then while members stay below max (above
// min), at most limit of them (a negative limit: no limit). A negative offset picks nothing.
func pickRange(n int, offset, limit int64, rev bool, aboveMin, belowMax func(i int) bool) []int {
	if offset < 0 || offset > 0 && offset >= int64(n) || n == 0 {
		return nil
	}
	// The range is empty unless the last member is above min and the first below max
	// (zslIsInRange).
	if !aboveMin(n-1) || !belowMax(0) {
		return nil
	}
	i, step, inRange, enters := 0, 1, belowMax, aboveMin
	if rev {
		i, step, inRange, enters = n-1, -1, aboveMin, belowMax
	}
	for i >= 0 && i < n && !enters(i) {
		i += step
	}
	if i < 0 || i >= n || !inRange(i) {
		return nil
	}
	i += int(offset) * step
	var picked []int
	for ; i >= 0 && i < n && limit != 0 && inRange(i); i += step {
		picked = append(picked, i)
		limit--
	}
	return picked
}

// replyMembers replies the members of z at the indexes picked, with WITHSCORES each followed
// by its score: a flat array in RESP2, an array of [member, score] pairs in RESP3.
func replyMembers(r *request, z *fsm.Collection, picked []int, withScores bool) {
	pairs := withScores && r.w.Protocol() == 3
	if withScores && !pairs {
		r.w.Array(2 * len(picked))
	} else {
		r.w.Array(len(picked))
	}
	for _, i := range picked {
		if pairs {
			r.w.Array(2)
		}
		r.w.Bulk(z.Elems[i])
		if withScores {
			r.w.Double(z.Scores[i])
		}
	}
}
