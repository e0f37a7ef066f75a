package server

import (
	"regexp"
	"strconv"
	"testing"
)

// LOCKINFO and VALIDATE work on every key type (DESIGN.md §2) with the shape they have on a
// string: owner, token, pttl. A collection's owner is its first element (a hash's first field,
// a set's first member, a sorted set's lowest, a list's head); changing the collection keeps
// its token, as HINCRBY on a re-entrant lock or ZADD into a semaphore must.
func TestLockInfoOnEveryType(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	info := regexp.MustCompile(`^\*6\r\n\$5\r\nowner\r\n\$\d+\r\n(.*)\r\n\$5\r\ntoken\r\n:(\d+)\r\n\$4\r\npttl\r\n:(-?\d+)\r\n$`)
	lockInfo := func(key string) (owner string, token uint64, pttl int64) {
		t.Helper()
		got := r.do("LOCKINFO", key)
		m := info.FindStringSubmatch(got)
		if m == nil {
			t.Fatalf("LOCKINFO %s = %q, want owner, token and pttl", key, got)
		}
		token, _ = strconv.ParseUint(m[2], 10, 64)
		pttl, _ = strconv.ParseInt(m[3], 10, 64)
		return m[1], token, pttl
	}
	for _, c := range []struct {
		key    string
		create [][]string // the first creates the key
		change []string   // changes it, keeping its holder
		owner  string     // after create
	}{
		{"str", [][]string{{"SET", "str", "me"}}, []string{"SET", "str", "me", "KEEPTTL"}, "me"},
		{"hash", [][]string{{"HSET", "hash", "uuid:1", "1"}}, []string{"HINCRBY", "hash", "uuid:1", "1"}, "uuid:1"},
		{"set", [][]string{{"SADD", "set", "m2", "m1"}}, []string{"SADD", "set", "m3"}, "m2"},
		{"zset", [][]string{{"ZADD", "zset", "2", "b", "1", "a"}}, []string{"ZADD", "zset", "3", "c"}, "a"},
		{"list", [][]string{{"RPUSH", "list", "head", "tail"}}, []string{"RPUSH", "list", "more"}, "head"},
	} {
		t.Run(c.key, func(t *testing.T) {
			for _, cmd := range c.create {
				r.do(cmd...)
			}
			owner, token, pttl := lockInfo(c.key)
			if owner != c.owner || token == 0 || pttl != -1 {
				t.Errorf("LOCKINFO %s = owner %q token %d pttl %d, want owner %q, a token, pttl -1", c.key, owner, token, pttl, c.owner)
			}
			tok := strconv.FormatUint(token, 10)
			if got := r.do("VALIDATE", c.key, tok); got != ":1\r\n" {
				t.Errorf("VALIDATE %s %s = %q, want :1", c.key, tok, got)
			}
			if got := r.do("VALIDATE", c.key, strconv.FormatUint(token+1, 10)); got != ":0\r\n" {
				t.Errorf("VALIDATE %s with another token = %q, want :0", c.key, got)
			}
			r.do(c.change...)
			if got := r.do("PEXPIRE", c.key, "60000"); got != ":1\r\n" {
				t.Fatalf("PEXPIRE %s = %q", c.key, got)
			}
			_, after, pttl := lockInfo(c.key)
			if after != token || pttl <= 0 || pttl > 60000 {
				t.Errorf("LOCKINFO %s after %q and PEXPIRE = token %d pttl %d, want token %d and a pttl in (0, 60000]", c.key, c.change, after, pttl, token)
			}
			if got := r.do("VALIDATE", c.key, tok); got != ":1\r\n" {
				t.Errorf("VALIDATE %s after the change = %q, want :1", c.key, got)
			}
			r.do("DEL", c.key)
			if got := r.do("LOCKINFO", c.key); got != "$-1\r\n" {
				t.Errorf("LOCKINFO %s after DEL = %q, want nil", c.key, got)
			}
			if got := r.do("VALIDATE", c.key, tok); got != ":0\r\n" {
				t.Errorf("VALIDATE %s after DEL = %q, want :0", c.key, got)
			}
		})
	}
	// RESP3: a map, the same fields.
	r.do("HELLO", "3")
	r.do("SADD", "s3", "only")
	if got := r.do("LOCKINFO", "s3"); !regexp.MustCompile(`^%3\r\n\$5\r\nowner\r\n\$4\r\nonly\r\n\$5\r\ntoken\r\n:\d+\r\n\$4\r\npttl\r\n:-1\r\n$`).MatchString(got) {
		t.Errorf("RESP3 LOCKINFO of a set = %q", got)
	}
	if got := r.do("LOCKINFO", "none"); got != "_\r\n" {
		t.Errorf("RESP3 LOCKINFO of a missing key = %q", got)
	}
}
