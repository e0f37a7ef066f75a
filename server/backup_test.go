package server

import (
	"slices"
	"strings"
	"testing"

	"github.com/raftlock/raftlock/backup"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/resp"
)

// RAFT BACKUP replies with the node's backup file as one bulk string, at most one per
// backupEvery; RAFT READINDEX with an integer.
func TestRaftBackup(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	if got := r.do("LOCK", "job", "60000", "OWNER", "me"); !strings.HasPrefix(got, ":") {
		t.Fatalf("LOCK = %q", got)
	}
	raw := r.do("RAFT", "BACKUP")
	v, _, err := resp.ParseValue([]byte(raw))
	if err != nil || v.Kind != resp.KindBulk {
		t.Fatalf("RAFT BACKUP = %.80q, %v; want a bulk string", raw, err)
	}
	h, m, err := backup.Decode(v.Str)
	if err != nil {
		t.Fatalf("RAFT BACKUP's reply does not decode: %v", err)
	}
	if l, ok := m.Get(fsm.DBKey(0, []byte("job"))); !ok || string(l.Owner) != "me" || h.Keys != 1 {
		t.Errorf("backup holds %+v (%v), %d keys; want job held by me", l, ok, h.Keys)
	}
	if got := r.do("RAFT", "BACKUP"); !strings.HasPrefix(got, "-ERR RAFT BACKUP too soon") {
		t.Errorf("second RAFT BACKUP at once = %q", got)
	}
	if got := r.do("RAFT", "BACKUP", "extra"); got != "-ERR wrong number of arguments for 'raft|backup' command\r\n" {
		t.Errorf("RAFT BACKUP extra = %q", got)
	}
	if got := r.do("RAFT", "READINDEX"); !strings.HasPrefix(got, ":") {
		t.Errorf("RAFT READINDEX = %q", got)
	}
	for _, name := range []string{"raft|backup", "raft|readindex"} {
		if id, ok := catalog.index[name]; !ok || !slices.Contains(catalog.cats["admin"], id) {
			t.Errorf("%s is not @admin", name)
		}
	}
}
