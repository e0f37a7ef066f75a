package script

import (
	"math/rand"
	"strings"
	"testing"
)

// TestPatternDifferentialRedis runs random patterns (of every kind of item: classes, sets,
// quantifiers, captures, anchors, %b, %f, back-references) through find, match, gmatch and gsub
// here and on a real Redis 7.0 (SCRIPT_REDIS_ADDR), and compares the replies: results and
// error texts.
func TestPatternDifferentialRedis(t *testing.T) {
	conn, rd := dialRedis(t)
	e := testEngine(t, Config{})
	rng := rand.New(rand.NewSource(1))
	atoms := []string{"a", "b", ".", "%a", "%d", "[ab]", "[^a]", "%s", "(", ")", "()", "%b()", "%f[%a]", "%1", "^", "$", "x", "[a-c]", "%%", "%w"}
	quants := []string{"", "", "*", "+", "-", "?"}
	subjects := []string{"aab(b)c", "abc 123 x", "", "((a))b", "a.b.c", "  xy  ", "aaaa", "ab%cd"}
	bad := 0
	for i := 0; i < 2000 && bad < 15; i++ {
		var p strings.Builder
		for n := rng.Intn(5) + 1; n > 0; n-- {
			a := atoms[rng.Intn(len(atoms))]
			p.WriteString(a)
			if len(a) == 1 || a[0] == '%' && len(a) == 2 || a[0] == '[' {
				p.WriteString(quants[rng.Intn(len(quants))])
			}
		}
		subj := subjects[rng.Intn(len(subjects))]
		fns := []string{"S(string.find(s, p))", "S(string.match(s, p))", "S(string.gsub(s, p, '<%0>'))", "G(s, p)", "S(string.find(s, p, 2))", "S(string.gsub(s, p, {a='A'}))"}
		fn := fns[rng.Intn(len(fns))]
		src := patternPrelude + `local function G(s, p) local t = {} for a, b in string.gmatch(s, p) do t[#t+1] = tostring(a) .. '/' .. tostring(b) if #t > 20 then break end end return table.concat(t, ',') end local s, p = ARGV[1], ARGV[2] local ok, r = pcall(function() return ` + fn + ` end) return tostring(ok) .. ':' .. tostring(r)`
		got := reply(e.Run(t.Context(), []byte(src), nil, bytesOf(subj, p.String()), nil))
		want := redisDo(t, conn, rd, "EVAL", src, "0", subj, p.String())
		if got != want {
			bad++
			t.Errorf("%s on %q with %q:\n got  %q\n want %q", fn, subj, p.String(), got, want)
		}
	}
}
