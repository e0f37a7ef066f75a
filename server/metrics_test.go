package server

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// TestCommandFamilies checks that every row of the command table names its family, and that
// the families a lock client's commands fall in are the ones the dashboard and docs describe.
func TestCommandFamilies(t *testing.T) {
	for _, name := range commandNames() {
		if commands[name].fam == famNone || commands[name].fam >= numFamilies {
			t.Errorf("command %q names no family", name)
		}
	}
	for name, want := range map[string]string{
		"lock": "lock", "unlock": "lock", "set": "lock", "del": "lock", "pexpire": "lock",
		"get": "read", "pttl": "read", "lockinfo": "read", "hget": "read",
		"eval": "script", "evalsha": "script", "hset": "collection", "zadd": "collection", "lpush": "collection",
		"blpop": "blocking", "publish": "pubsub", "subscribe": "pubsub", "exec": "transaction",
		"raft": "admin", "info": "admin", "flushall": "admin", "ping": "connection", "auth": "connection",
	} {
		if got := familyNames[commands[name].fam]; got != want {
			t.Errorf("family of %s = %s, want %s", name, got, want)
		}
	}
}

func TestServerStatsCounts(t *testing.T) {
	addr, s := startServer(t, nil)
	rc := dialRaw(t, addr)
	rc.do("LOCK", "k", "10000", "OWNER", "a")
	rc.do("LOCK", "k", "10000", "OWNER", "b") // refused: held
	rc.do("LOCK", "k", "10000", "OWNER", "b")
	rc.do("GET", "k")
	rc.do("NOSUCH")
	rc.do("GET")
	rc.do("AUTH", "nobody", "wrong")
	st := s.ServerStats()
	fam := map[string]uint64{}
	for _, f := range st.Families {
		fam[f.Name] = f.Latency.Count()
	}
	if fam["lock"] != 3 || fam["read"] != 1 || fam["connection"] != 1 {
		t.Errorf("family counts = %v, want lock 3, read 1, connection 1", fam)
	}
	refused := map[string]uint64{}
	for _, r := range st.Refused {
		refused[r.Reason] = r.Count
	}
	if refused["unknown_command"] != 1 || refused["wrong_arity"] != 1 {
		t.Errorf("refused = %v, want unknown_command 1, wrong_arity 1", refused)
	}
	if st.AuthFailures != 1 {
		t.Errorf("AuthFailures = %d, want 1", st.AuthFailures)
	}
	if want := []node.KeyCount{{DB: 0, Key: "k", Count: 2}}; !cmp.Equal(st.Contended, want) {
		t.Errorf("Contended = %+v, want %+v", st.Contended, want)
	}
}

func TestContentionBounded(t *testing.T) {
	c := contention{window: time.Minute}
	t0 := time.Unix(1000, 0)
	// One hot key among many cold ones: the hot key stays in the sketch and is counted exactly
	// (it never left), while the sketch never holds more than its slots.
	for i := range 10000 {
		c.record(fsm.DBKey(3, []byte(fmt.Sprintf("cold-%d", i))), t0)
		if i%4 == 0 {
			c.record(fsm.DBKey(3, []byte("hot")), t0)
		}
	}
	if n := len(c.mu.cur); n > contentionSlots {
		t.Fatalf("sketch holds %d keys, want at most %d", n, contentionSlots)
	}
	top, _ := c.top(t0, 3)
	if len(top) != 3 || top[0].Key != "hot" || top[0].DB != 3 || top[0].Count < 2500 || top[0].Count-top[0].Err > 2500 {
		t.Fatalf("top = %+v, want hot first with 2500 (plus at most Err)", top)
	}
	// The next window keeps the last one's figures; the one after forgets them.
	c.record(fsm.DBKey(0, []byte("new")), t0.Add(61*time.Second))
	if top, span := c.top(t0.Add(61*time.Second), 1); top[0].Key != "hot" || span != 61*time.Second {
		t.Errorf("next window: top %+v over %v, want hot over 61s", top, span)
	}
	if top, _ := c.top(t0.Add(5*time.Minute), 10); len(top) != 0 {
		t.Errorf("after two idle windows: top = %+v, want none", top)
	}
	long := make([]byte, 10000)
	c.record(long, t0.Add(5*time.Minute))
	for k := range c.mu.cur {
		if len(k) > contentionKeyBytes {
			t.Errorf("sketch keeps a key of %d bytes, want at most %d", len(k), contentionKeyBytes)
		}
	}
}
