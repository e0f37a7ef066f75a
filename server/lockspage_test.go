package server

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/tests/testutil"
)

// holderLine is a node.LockHolder without what the table chose (token, remaining lease).
func holderLine(h node.LockHolder) string { return fmt.Sprintf("%s %s %s", h.Key, h.Kind, h.Owner) }

// The locks view lists database 0's plain locks, shares and permits from the applied table,
// pages through them, matches a pattern, filters by the user's key permissions, shows a key's
// queue, and lists nothing of database 1.
func TestLockPage(t *testing.T) {
	addr, s := startServer(t, nil)
	r := dialRaw(t, addr)
	intReply(t, "LOCK", r.do("LOCK", "app:a", "60000", "OWNER", "alice"))
	intReply(t, "LOCK SHARED", r.do("LOCK", "app:doc", "60000", "SHARED", "OWNER", "reader-1"))
	intReply(t, "LOCK SHARED", r.do("LOCK", "app:doc", "60000", "SHARED", "OWNER", "reader-2"))
	intReply(t, "SEMACQUIRE", r.do("SEMACQUIRE", "pool", "3", "60000", "OWNER", "worker"))
	if got := r.do("SELECT", "1"); got != "+OK\r\n" {
		t.Fatalf("SELECT 1 = %q", got)
	}
	intReply(t, "LOCK in db 1", r.do("LOCK", "elsewhere", "60000", "OWNER", "db1-owner"))
	r.do("SELECT", "0")

	all := func(q node.LockPageQuery) []string {
		t.Helper()
		var lines []string
		for range 100 {
			page, err := s.LockPage(q)
			if err != nil {
				t.Fatalf("node.LockPage(%+v): %v", q, err)
			}
			for _, h := range page.Holders {
				if h.PTTL <= 0 || h.PTTL > time.Minute || h.Token == 0 {
					t.Errorf("%s: pttl %v token %d, want a lease within a minute and a token", h.Key, h.PTTL, h.Token)
				}
				lines = append(lines, holderLine(h))
			}
			if page.Next == "0" {
				return lines
			}
			q.Cursor = page.Next
		}
		t.Fatalf("node.LockPage(%+v) never reached the end of the walk", q)
		return nil
	}
	db0 := []string{"app:a lock alice", "pool semaphore worker", "app:doc shared reader-1", "app:doc shared reader-2"}
	for _, tc := range []struct {
		name string
		q    node.LockPageQuery
		want []string
	}{
		{"one page", node.LockPageQuery{Count: node.MaxLockPageCount}, db0},
		{"a page per entry", node.LockPageQuery{Count: 1}, db0},
		{"matching app:d*", node.LockPageQuery{Count: 2, Match: []byte("app:d*")}, []string{"app:doc shared reader-1", "app:doc shared reader-2"}},
		{"database 1", node.LockPageQuery{DB: 1, Count: node.MaxLockPageCount}, []string{"elsewhere lock db1-owner"}},
		{"empty database", node.LockPageQuery{DB: 2, Count: node.MaxLockPageCount}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, all(tc.q)); diff != "" {
				t.Errorf("holders (-want +got):\n%s", diff)
			}
		})
	}

	t.Run("key permissions", func(t *testing.T) {
		if got := r.do("ACL", "SETUSER", "ops", "on", ">pw", "+@all", "~app:*"); got != "+OK\r\n" {
			t.Fatalf("ACL SETUSER = %q", got)
		}
		want := []string{"app:a lock alice", "app:doc shared reader-1", "app:doc shared reader-2"}
		if diff := cmp.Diff(want, all(node.LockPageQuery{User: "ops", Count: node.MaxLockPageCount})); diff != "" {
			t.Errorf("holders as a user of ~app:* (-want +got):\n%s", diff)
		}
	})

	t.Run("queue", func(t *testing.T) {
		w := dialRaw(t, addr)
		w.sendOnly("LOCK", "app:a", "60000", "OWNER", "next-in-line", "WAIT", "30000")
		testutil.WaitFor(t, 5*time.Second, func() error {
			page, err := s.LockPage(node.LockPageQuery{Count: node.MaxLockPageCount, Match: []byte("app:*")})
			if err != nil {
				return err
			}
			if len(page.Queues) != 1 || string(page.Queues[0].Key) != "app:a" || len(page.Queues[0].Waiters) != 1 ||
				string(page.Queues[0].Waiters[0].Owner) != "next-in-line" || page.Queues[0].Waiters[0].Kind != "lock" {
				return fmt.Errorf("queues = %+v, want app:a's with next-in-line", page.Queues)
			}
			return nil
		})
	})

	t.Run("refused", func(t *testing.T) {
		first, err := s.LockPage(node.LockPageQuery{Count: 1})
		if err != nil || first.Next == "0" {
			t.Fatalf("database 0's first page of one = %+v, %v: want a cursor to go on", first, err)
		}
		for _, tc := range []struct {
			q    node.LockPageQuery
			want error
		}{
			{node.LockPageQuery{DB: 16, Count: 1}, node.ErrInvalidLockQuery},
			{node.LockPageQuery{DB: -1, Count: 1}, node.ErrInvalidLockQuery},
			{node.LockPageQuery{Count: 0}, node.ErrInvalidLockQuery},
			{node.LockPageQuery{Count: node.MaxLockPageCount + 1}, node.ErrInvalidLockQuery},
			{node.LockPageQuery{Count: 1, Cursor: "not hex"}, node.ErrInvalidLockQuery},
			{node.LockPageQuery{DB: 1, Count: 1, Cursor: first.Next}, node.ErrInvalidLockQuery}, // database 0's
			{node.LockPageQuery{Count: 1, User: "nobody"}, node.ErrUnknownUser},
		} {
			if _, err := s.LockPage(tc.q); !errors.Is(err, tc.want) {
				t.Errorf("node.LockPage(%+v) = %v, want %v", tc.q, err, tc.want)
			}
		}
	})
}
