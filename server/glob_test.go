package server

import (
	"bytes"
	"encoding/json"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

// testdata/glob_redis.json is what a real redis-server 7 answered to KEYS pattern over a set of
// keys (tricky ones: brackets, escapes, ranges, unterminated classes), and
// glob_redis_random.json what redis-server 7.0.15 answered to 2,231 random patterns over 61 keys
// and to patterns at its nesting limit: globMatch, and a pattern compiled once for all the keys,
// must pick exactly the same keys.
func TestGlobMatchesRedis(t *testing.T) {
	for _, file := range []string{"testdata/glob_redis.json", "testdata/glob_redis_random.json"} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		var golden struct {
			Keys []string            `json:"keys"`
			Res  map[string][]string `json:"res"`
		}
		if err := json.Unmarshal(b, &golden); err != nil {
			t.Fatal(err)
		}
		for pattern, want := range golden.Res {
			var got, compiled []string
			g := compileGlob([]byte(pattern), 8)
			for _, k := range golden.Keys {
				if globMatch([]byte(pattern), []byte(k)) {
					got = append(got, k)
				}
				if g.match([]byte(k)) {
					compiled = append(compiled, k)
				}
			}
			slices.Sort(got)
			slices.Sort(compiled)
			if !slices.Equal(got, want) || !slices.Equal(compiled, want) {
				t.Errorf("%s: KEYS %.80q: got %.200q (compiled once: %.200q), want %.200q", file, pattern, got, compiled, want)
			}
		}
	}
}

// A pattern built to make a naive matcher take exponential time returns at once.
func TestGlobAbusivePattern(t *testing.T) {
	pattern := []byte(strings.Repeat("a*", 30) + "b")
	if globMatch(pattern, []byte(strings.Repeat("a", 60))) {
		t.Error("matched without a b")
	}
}

// The oracle for random patterns: stringMatch, the port of Redis 7's recursive stringmatchlen
// (util.c) with its skipLongerMatches and nesting guards that short patterns use, itself checked
// against redis-server's recorded answers (testdata/glob_redis_random.json). It is
// O(pattern × name) and worse, so only short patterns go to it.
func oracleGlob(pattern, s []byte) bool {
	skipLonger := false
	return stringMatch(pattern, s, &skipLonger, 0)
}

// Random patterns over the bytes that mean something to a glob, against random names: the
// compiled matcher answers as the recursive one, whether compiled per name or once for all.
func TestGlobMatchesOracle(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 5))
	const patChars = `ab*?[]^-\`
	const nameChars = `ab-]^\[*`
	for range 20000 {
		p := make([]byte, rng.IntN(12))
		for i := range p {
			p[i] = patChars[rng.IntN(len(patChars))]
		}
		g := compileGlob(p, 4) // shorter than most names: recompiled for longer ones
		for range 8 {
			s := make([]byte, rng.IntN(10))
			for i := range s {
				s[i] = nameChars[rng.IntN(len(nameChars))]
			}
			want := oracleGlob(p, s)
			if got := globMatch(p, s); got != want {
				t.Fatalf("globMatch(%q, %q) = %v, want %v", p, s, got, want)
			}
			if got := g.match(s); got != want {
				t.Fatalf("compiled %q matching %q = %v, want %v", p, s, got, want)
			}
		}
	}
}

// Redis gives up past 1000 nested *s that each need something after them: so do we, at the
// same count, and a trailing * or long runs of * do not count.
func TestGlobNestingLimit(t *testing.T) {
	name := []byte(strings.Repeat("a", 1100))
	for _, tc := range []struct {
		pattern string
	}{
		{strings.Repeat("*a", 1000)},
		{strings.Repeat("*a", 1001)},
		{strings.Repeat("*a", 1000) + "*"},
		{strings.Repeat("*a", 1001) + "*"},
		{strings.Repeat("a*", 1000)},
		{strings.Repeat("a*", 1001)},
		{strings.Repeat("**a", 999) + "*"},
		{strings.Repeat("**a", 1002)},
	} {
		want := oracleGlob([]byte(tc.pattern), name)
		if got := globMatch([]byte(tc.pattern), name); got != want {
			t.Errorf("pattern of %d bytes: got %v, want %v", len(tc.pattern), got, want)
		}
	}
}

// The issue-30 patterns: a 1 MiB class after a * (7.6 s per KEYS on the recursive matcher, which
// parsed the class again at every byte of every name) and a * followed by a long run of ?s. The
// work of matching one name is bounded by the name's length, whatever the pattern's: this test
// counts the matcher's word operations, and the recursive matcher would need about 10^12 steps
// for the first case (it could not finish).
func TestGlobLinear(t *testing.T) {
	class := make([]byte, 1<<20)
	for i := range class {
		class[i] = 'c' + byte(i%20)
	}
	bigClass := append(append([]byte("*["), class...), ']')
	name := bytes.Repeat([]byte("ab"), 1<<19) // 1 MiB, no byte of the class
	for _, tc := range []struct {
		name     string
		pattern  []byte
		subject  []byte
		want     bool
		maxSteps int64 // for matching, after compiling
	}{
		{"1MiB class, 1MiB name", bigClass, name, false, 2 << 20},
		{"1MiB class, 1MiB name that ends in it", bigClass, append(slices.Clip(name), 'e'), true, 2 << 20},
		{"1MiB class, short name", bigClass, []byte("lock:1"), false, 100},
		{"* then 4000 ?s then b", append(append([]byte("*"), bytes.Repeat([]byte("?"), 4000)...), 'b'),
			bytes.Repeat([]byte("a"), 4096), false, 4096 * 64 * 2},
		{"*a repeated to 1 MiB", bytes.Repeat([]byte("*a"), 1<<19), bytes.Repeat([]byte("a"), 4096), false, 100},
		{"*a?* repeated", bytes.Repeat([]byte("*a?"), 300), bytes.Repeat([]byte("ab"), 2048), true, 4096 * 8},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := compileGlob(tc.pattern, len(tc.subject))
			compile := g.steps
			for range 3 {
				if got := g.match(tc.subject); got != tc.want {
					t.Fatalf("got %v, want %v", got, tc.want)
				}
			}
			if steps := (g.steps - compile) / 3; steps > tc.maxSteps {
				t.Errorf("matching took %d steps, want at most %d", steps, tc.maxSteps)
			}
		})
	}
}
