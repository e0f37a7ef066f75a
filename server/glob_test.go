package server

import (
	"encoding/json"
	"os"
	"slices"
	"strings"
	"testing"
)

// testdata/glob_redis.json is what a real redis-server 7 answered to KEYS pattern over a set of
// keys (tricky ones: brackets, escapes, ranges, unterminated classes): globMatch must pick
// exactly the same keys.
func TestGlobMatchesRedis(t *testing.T) {
	b, err := os.ReadFile("testdata/glob_redis.json")
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
		var got []string
		for _, k := range golden.Keys {
			if globMatch([]byte(pattern), []byte(k)) {
				got = append(got, k)
			}
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Errorf("KEYS %q: got %q, want %q", pattern, got, want)
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
