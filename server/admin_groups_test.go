package server

import (
	"strings"
	"testing"
)

// TestRaftGroupOption: RAFT MEMBERS, ADD, PROMOTE and REMOVE take a trailing GROUP g, and
// STATS a group number, of a group this node runs (a one-group node runs group 0 only); a node
// whose ID is "group" is still named by it.
func TestRaftGroupOption(t *testing.T) {
	addr, _ := startServer(t, nil)
	c := dialRaw(t, addr)
	for _, tc := range []struct {
		args []string
		want string // a prefix of the reply
	}{
		{[]string{"RAFT", "MEMBERS", "GROUP", "0"}, "*1\r\n"},
		{[]string{"RAFT", "MEMBERS", "GROUP", "1"}, "-ERR RAFT MEMBERS: no raft group \"1\" on this node (it runs 1)"},
		{[]string{"RAFT", "MEMBERS", "GROUP", "x"}, "-ERR RAFT MEMBERS: no raft group \"x\""},
		{[]string{"RAFT", "MEMBERS", "extra"}, "-ERR wrong number of arguments"},
		{[]string{"RAFT", "REMOVE", "group", "FORCE"}, "-ERR no such member"},
		{[]string{"RAFT", "REMOVE", "n9", "GROUP", "0"}, "-ERR no such member"},
		{[]string{"RAFT", "REMOVE", "n9", "FORCE", "GROUP", "0"}, "-ERR no such member"},
		{[]string{"RAFT", "PROMOTE", "n9", "GROUP", "2"}, "-ERR RAFT PROMOTE: no raft group \"2\""},
		{[]string{"RAFT", "STATS", "1"}, "-ERR RAFT STATS: no raft group \"1\""},
		{[]string{"RAFT", "STATS", "0", "1"}, "-ERR wrong number of arguments"},
	} {
		if got := c.do(tc.args...); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%s: %q; want %q...", strings.Join(tc.args, " "), got, tc.want)
		}
	}
	stats := c.do("RAFT", "STATS", "0")
	for _, f := range []string{"raft_groups\r\n$1\r\n1", "raft_groups_layout\r\n$1\r\n1", "raft_groups_planned\r\n$1\r\n1"} {
		if !strings.Contains(stats, f) {
			t.Errorf("RAFT STATS 0 of a one-group node: %q; want %q in it", stats, f)
		}
	}
}
