package server

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// ACL DELUSER gives a deleted user's record back (fsm.KindForgetUser): creating and deleting
// users with new names, over and over, leaves the replicated table as it was. A user the node's
// --aclfile defines is deleted with a tombstone instead, so it stays deleted; so is every user
// while the cluster is in a format an older member cannot read the forgetting in.
func TestDelUserReclaims(t *testing.T) {
	aclFile := filepath.Join(t.TempDir(), "users.acl")
	if err := os.WriteFile(aclFile, []byte("user app on >apppw ~app:* +@all\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name       string
		format     byte
		tombstones bool // every deleted user leaves a record
	}{
		{"batch-format", fsm.FormatBatch, false},
		{"typed-format", fsm.FormatTyped, true},
	} {
		for _, cfg := range nodeConfigs {
			t.Run(tc.name+"/"+cfg.name, func(t *testing.T) {
				f := newFakeNodeIn(tc.format)
				addr, _ := serveNode(t, f, func(c *Config) {
					secure(cfg.secured)(c)
					c.ACLFile = aclFile
				})
				admin := adminConn(t, addr, cfg.secured)
				for i := range 50 {
					name := fmt.Sprintf("temp-%d", i)
					if got := admin.do("ACL", "SETUSER", name, "on", ">pw", "~k*"); got != "+OK\r\n" {
						t.Fatalf("SETUSER %s: %q", name, got)
					}
					if got := admin.do("ACL", "DELUSER", name); got != ":1\r\n" {
						t.Fatalf("DELUSER %s: %q", name, got)
					}
					if got := admin.do("ACL", "GETUSER", name); got != "$-1\r\n" {
						t.Fatalf("GETUSER %s after DELUSER: %q", name, got)
					}
				}
				if got := admin.do("ACL", "DELUSER", "app"); got != ":1\r\n" {
					t.Fatalf("DELUSER app: %q", got)
				}
				if got := admin.do("ACL", "GETUSER", "app"); got != "$-1\r\n" {
					t.Fatalf("GETUSER app after DELUSER (the --aclfile's user came back): %q", got)
				}
				f.mu.Lock()
				users := f.mu.table.Users()
				f.mu.Unlock()
				if rules, ok := users["app"]; !ok || rules != "" {
					t.Errorf("the --aclfile's user app: record %q (kept %v), want its tombstone", rules, ok)
				}
				want := 1 // app's tombstone
				if tc.tombstones {
					want += 50
				}
				if len(users) != want {
					t.Errorf("%d records in the replicated table after 50 users came and went, want %d: %v", len(users), want, users)
				}
			})
		}
	}
}
