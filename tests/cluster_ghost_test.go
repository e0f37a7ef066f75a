package tests

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
)

// TestClusterGhostReleaseSparesRetry checks the ghost-lock cleanup against the retry it exists
// for. Client A sends LOCK k OWNER o and hangs up before the grant commits (its connection broke);
// client B, the same owner retrying on a new connection as DESIGN.md §7 allows, sends LOCK k OWNER
// o and is told a token. Whatever the order, the lock B was acknowledged must stay held with that
// token: the leader's cleanup of A's grant must not release it (DESIGN.md §8.1, §8.3).
//
// The followers are stopped (SIGSTOP) for the few milliseconds it takes to queue both requests,
// so A's grant is still uncommitted when A hangs up and B's request arrives.
func TestClusterGhostReleaseSparesRetry(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	const attempts = 5
	conclusive := 0
	for attempt := 1; attempt <= attempts; attempt++ {
		key := fmt.Sprintf("ghost/%d", attempt)
		tok, ok := ghostRace(t, c, l, key)
		if !ok {
			continue
		}
		conclusive++
		// B was told tok: the lock must stay held with it (its lease is a minute).
		deadline := time.Now().Add(500 * time.Millisecond)
		for i := 0; i < 200 && time.Now().Before(deadline); i++ {
			v, err := call(l.addr, "LOCKINFO", key)
			if err != nil {
				t.Fatalf("LOCKINFO %s: %v", key, err)
			}
			info, _ := v.([]any)
			if len(info) != 6 || info[1] != "o" || info[3] != tok {
				t.Fatalf("attempt %d: the retried LOCK %s OWNER o was acknowledged token %d, then LOCKINFO says %#v: "+
					"the cleanup of the hung-up client's grant released the lock the retry was acknowledged", attempt, key, tok, v)
			}
		}
		t.Logf("attempt %d: the retry's lock (token %d) stayed held", attempt, tok)
	}
	if conclusive == 0 {
		t.Fatalf("none of %d attempts was conclusive (the leader stepped down each time)", attempts)
	}
	c.digests()
}

// ghostRace runs one attempt: it stops the followers, sends A's LOCK to the leader and waits
// until the leader has proposed it, hangs A up, sends B's LOCK and waits until the leader has
// taken it, resumes the followers, and returns the token B was told. ok is false when B got an
// error (the leader stepped down meanwhile: the attempt proves nothing).
func ghostRace(t *testing.T, c *cluster, l *node, key string) (token int64, ok bool) {
	t.Helper()
	a, err := dialRESP(l.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := dialRESP(l.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	mon, err := dialRESP(l.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer mon.Close()
	for _, conn := range []*respConn{a, b, mon} {
		if r, err := conn.do("PING"); err != nil || string(r) != "+PONG\r\n" {
			t.Fatalf("PING: %q, %v", r, err)
		}
	}
	followers := c.others(l)
	for _, f := range followers {
		f.sigstop()
	}
	resumed := false
	resume := func() {
		if !resumed {
			for _, f := range followers {
				f.sigcont()
			}
			resumed = true
		}
	}
	defer resume()

	lock := encodeCommand("LOCK", key, "60000", "OWNER", "o")
	if err := a.writeRaw(lock); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Second); infoField(t, mon, "locks", "pending_keys") != "1"; {
		if state := infoField(t, mon, "raft", "raft_state"); state != "Leader" {
			// A follower resumed after the previous attempt can take over before A's LOCK
			// arrives: that attempt proves nothing.
			t.Logf("%s is %s, no longer the leader, before A's LOCK %s was proposed (inconclusive)", l.id, state, key)
			return 0, false
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader %s did not propose A's LOCK %s within 2s (pending_keys stays 0)", l.id, key)
		}
		time.Sleep(time.Millisecond)
	}
	a.Close()
	base, _ := strconv.Atoi(infoField(t, mon, "stats", "total_commands_processed"))
	if err := b.writeRaw(lock); err != nil {
		t.Fatal(err)
	}
	polls := 0
	testutil.WaitFor(t, 2*time.Second, func() error {
		polls++
		n, _ := strconv.Atoi(infoField(t, mon, "stats", "total_commands_processed"))
		if n-base-polls < 1 { // every poll counts itself
			return fmt.Errorf("the leader has not taken B's LOCK yet")
		}
		return nil
	})
	resume()
	raw, err := b.readReply()
	if err != nil {
		t.Fatalf("B's LOCK: %q, %v", raw, err)
	}
	v, err := parseReply(raw)
	if err != nil {
		t.Fatal(err)
	}
	tok, isTok := v.(int64)
	if !isTok {
		if isErrorReply(v) {
			t.Logf("B's LOCK %s: %v (inconclusive)", key, v)
			return 0, false
		}
		t.Fatalf("B's LOCK %s OWNER o: %#v; want a token (the owner is the same)", key, v)
	}
	return tok, true
}

// infoField returns one field of an INFO section, read on conn.
func infoField(t *testing.T, conn *respConn, section, name string) string {
	t.Helper()
	raw, err := conn.do("INFO", section)
	if err != nil {
		t.Fatalf("INFO %s: %v", section, err)
	}
	for line := range strings.SplitSeq(string(raw), "\r\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			return v
		}
	}
	t.Fatalf("INFO %s: no %s in %q", section, name, raw)
	return ""
}
