package server

import (
	"strings"
	"testing"
)

// An EXEC refused before it runs ends the transaction, as Redis's execCommandAbort: EXECABORT
// names why, the next EXEC finds no MULTI, and the connection's watches are gone with it.
func TestExecRefusedEndsTransaction(t *testing.T) {
	addr, _ := startServer(t, func(c *Config) { c.MaxKeys = 1 })
	a, b := dialRaw(t, addr), dialRaw(t, addr)
	for _, s := range []struct {
		c          *rawConn
		args       []string
		want, note string
	}{
		{a, []string{"MULTI"}, "+OK\r\n", ""},
		{a, []string{"SET", "q", "1"}, "+QUEUED\r\n", "queued while the table has room"},
		{b, []string{"SET", "full", "1"}, "+OK\r\n", "the table is full now"},
		{a, []string{"EXEC"}, "-EXECABORT Transaction discarded because of: OOM command not allowed when used memory > 'maxmemory'.\r\n", "the key bound, checked again at EXEC"},
		{a, []string{"EXEC"}, "-ERR EXEC without MULTI\r\n", "the refusal ended the transaction"},
		{b, []string{"DEL", "full"}, ":1\r\n", ""},
		// A refused EXEC forgets the watches: a write after it does not fail the next EXEC.
		{a, []string{"WATCH", "w"}, "+OK\r\n", ""},
		{a, []string{"EXEC", "x"}, "-EXECABORT Transaction discarded because of: wrong number of arguments for 'exec' command\r\n", "wrong arity, outside MULTI"},
		{b, []string{"SET", "w", "1"}, "+OK\r\n", "a write to the key no longer watched"},
		{a, []string{"MULTI"}, "+OK\r\n", ""},
		{a, []string{"GET", "w"}, "+QUEUED\r\n", ""},
		{a, []string{"EXEC"}, "*1\r\n$1\r\n1\r\n", "runs: nothing is watched"},
	} {
		if got := s.c.do(s.args...); got != s.want {
			t.Errorf("%q (%s) = %q, want %q", s.args, s.note, got, s.want)
		}
	}
}

// EXEC refused by the user's permissions aborts the transaction with the NOPERM text, as in
// Redis 7.0.
func TestExecNotPermitted(t *testing.T) {
	addr, _ := startServer(t, nil)
	c := dialRaw(t, addr)
	for _, s := range [][2]string{
		{"ACL SETUSER u on nopass +@all -exec ~*", "+OK\r\n"},
		{"AUTH u x", "+OK\r\n"},
		{"MULTI", "+OK\r\n"},
		{"SET a 1", "+QUEUED\r\n"},
		{"EXEC", "-EXECABORT Transaction discarded because of: NOPERM this user has no permissions to run the 'exec' command\r\n"},
		{"EXEC", "-EXECABORT Transaction discarded because of: NOPERM this user has no permissions to run the 'exec' command\r\n"},
		{"AUTH default x", "+OK\r\n"},
		{"GET a", "$-1\r\n"},
	} {
		if got := c.do(strings.Fields(s[0])...); got != s[1] {
			t.Errorf("%s = %q, want %q", s[0], got, s[1])
		}
	}
}
