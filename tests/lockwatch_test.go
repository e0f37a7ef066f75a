package tests

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
)

// lockLost is the RESP3 push a holder hears when its lock ends without its UNLOCK.
func lockLost(key string, token int64, reason string) string {
	return fmt.Sprintf(">4\r\n$9\r\nlock-lost\r\n$%d\r\n%s\r\n:%d\r\n$%d\r\n%s\r\n", len(key), key, token, len(reason), reason)
}

// resp3Holder dials addr, switches to RESP3 and takes key's lock with LOCK, returning the
// connection and the token.
func resp3Holder(t *testing.T, addr, key string, ttlMs int) (*respConn, int64) {
	t.Helper()
	c := mustDial(t, addr)
	if got, err := c.do("HELLO", "3"); err != nil || !strings.HasPrefix(string(got), "%") {
		t.Fatalf("HELLO 3: %q, %v", got, err)
	}
	got, err := c.do("LOCK", key, strconv.Itoa(ttlMs))
	if err != nil || !strings.HasPrefix(string(got), ":") {
		t.Fatalf("LOCK %s: %q, %v", key, got, err)
	}
	tok, _ := strconv.ParseInt(strings.TrimSpace(string(got[1:])), 10, 64)
	return c, tok
}

// expectPush reads the next frame on c within 10 s and wants it to be want.
func expectPush(t *testing.T, c *respConn, want string) {
	t.Helper()
	c.nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	got, err := c.readReply()
	c.nc.SetReadDeadline(time.Time{})
	if err != nil || string(got) != want {
		t.Fatalf("next frame %q, %v; want %q", got, err, want)
	}
}

// expectQuiet checks that nothing was pushed to c before the reply to a PING sent now.
func expectQuiet(t *testing.T, c *respConn) {
	t.Helper()
	if got, err := c.do("PING"); err != nil || string(got) != "+PONG\r\n" {
		t.Fatalf("PING after the holder's own release: %q, %v; want +PONG and no push before it", got, err)
	}
}

// TestLockLostNotices: a holder that took its lock with LOCK on a RESP3 connection hears
// `lock-lost key token reason` when the lock ends other than by its own doing (expired, deleted
// by another connection's DEL or UNLOCK with its token, overwritten, flushed) and nothing when it
// ends the lock itself (UNLOCK, DEL, UNLOCK inside MULTI); a subscriber of __lock__:* (RESP2)
// hears `lost <token> <reason>` and `released <token>` (for any release: UNLOCK, or a DEL of the
// lock, which is a release by its token); PSUBSCRIBE * hears no lock channel.
func TestLockLostNotices(t *testing.T) {
	n := startNode(t, t.TempDir())
	other := mustDial(t, n.addr)
	sub := mustDial(t, n.addr)
	mustReply(t, sub, "*3\r\n$10\r\npsubscribe\r\n$10\r\n__lock__:*\r\n:1\r\n", "PSUBSCRIBE", "__lock__:*")
	heard := func(key, body string) {
		t.Helper()
		ch := "__lock__:" + key
		expectPush(t, sub, fmt.Sprintf("*4\r\n$8\r\npmessage\r\n$10\r\n__lock__:*\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(ch), ch, len(body), body))
	}

	h, tok := resp3Holder(t, n.addr, "exp", 300)
	expectPush(t, h, lockLost("exp", tok, "expired"))
	heard("exp", fmt.Sprintf("lost %d expired", tok))

	h, tok = resp3Holder(t, n.addr, "del", 60000)
	mustReply(t, other, ":1\r\n", "DEL", "del")
	expectPush(t, h, lockLost("del", tok, "deleted"))
	heard("del", fmt.Sprintf("released %d", tok)) // a DEL of a lock is a release by its token

	h, tok = resp3Holder(t, n.addr, "over", 60000)
	mustReply(t, other, "+OK\r\n", "SET", "over", "mine")
	expectPush(t, h, lockLost("over", tok, "overwritten"))
	heard("over", fmt.Sprintf("lost %d overwritten", tok))

	h, tok = resp3Holder(t, n.addr, "stolen", 60000)
	mustReply(t, other, ":1\r\n", "UNLOCK", "stolen", strconv.FormatInt(tok, 10))
	expectPush(t, h, lockLost("stolen", tok, "deleted"))
	heard("stolen", fmt.Sprintf("released %d", tok))

	h, tok = resp3Holder(t, n.addr, "mine", 60000)
	if got, err := h.do("UNLOCK", "mine"); err != nil || string(got) != ":1\r\n" {
		t.Fatalf("UNLOCK mine: %q, %v", got, err)
	}
	expectQuiet(t, h)
	heard("mine", fmt.Sprintf("released %d", tok))

	// The holder's own DEL, and its own UNLOCK inside a transaction, are its doing too.
	h, tok = resp3Holder(t, n.addr, "mydel", 60000)
	mustReply(t, h, ":1\r\n", "DEL", "mydel")
	expectQuiet(t, h)
	heard("mydel", fmt.Sprintf("released %d", tok))
	h, tok = resp3Holder(t, n.addr, "mytx", 60000)
	mustReply(t, h, "+OK\r\n", "MULTI")
	mustReply(t, h, "+QUEUED\r\n", "UNLOCK", "mytx", strconv.FormatInt(tok, 10))
	mustReply(t, h, "*1\r\n:1\r\n", "EXEC")
	expectQuiet(t, h)
	heard("mytx", fmt.Sprintf("released %d", tok))

	// Every lock the flush removes is announced, in key order: "over" (other's SET) too.
	h, tok = resp3Holder(t, n.addr, "flushed", 60000)
	over, held, err := lockInfo(testContext(t, 5*time.Second), newClient(t, n.addr, 1), "over")
	if err != nil || !held {
		t.Fatalf("LOCKINFO over: %+v held %v, %v", over, held, err)
	}
	mustReply(t, other, "+OK\r\n", "FLUSHDB")
	expectPush(t, h, lockLost("flushed", tok, "flushed"))
	heard("flushed", fmt.Sprintf("lost %d flushed", tok))
	heard("over", fmt.Sprintf("lost %d flushed", over.token))

	// Without anyone on the lock channels a flush still tells the holders; a pattern that does
	// not start with __lock__ hears no lock channel.
	mustReply(t, sub, "*3\r\n$12\r\npunsubscribe\r\n$10\r\n__lock__:*\r\n:0\r\n", "PUNSUBSCRIBE", "__lock__:*")
	mustReply(t, sub, "*3\r\n$10\r\npsubscribe\r\n$1\r\n*\r\n:1\r\n", "PSUBSCRIBE", "*")
	h, tok = resp3Holder(t, n.addr, "quiet", 60000)
	mustReply(t, other, "+OK\r\n", "FLUSHDB")
	expectPush(t, h, lockLost("quiet", tok, "flushed"))
	mustReply(t, other, ":1\r\n", "PUBLISH", "plain", "x")
	expectPush(t, sub, "*4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$5\r\nplain\r\n$1\r\nx\r\n") // and nothing of "quiet" before it
	mustReply(t, sub, "*3\r\n$12\r\npunsubscribe\r\n$1\r\n*\r\n:0\r\n", "PUNSUBSCRIBE", "*")
	mustReply(t, sub, "*3\r\n$10\r\npsubscribe\r\n$10\r\n__lock__:*\r\n:1\r\n", "PSUBSCRIBE", "__lock__:*")

	// A RESP2 holder is not pushed to (it hears the channel).
	r2 := mustDial(t, n.addr)
	got, err := r2.do("LOCK", "r2", "200")
	if err != nil || got[0] != ':' {
		t.Fatalf("LOCK r2: %q, %v", got, err)
	}
	tok, _ = strconv.ParseInt(strings.TrimSpace(string(got[1:])), 10, 64)
	heard("r2", fmt.Sprintf("lost %d expired", tok))
	mustReply(t, r2, "+PONG\r\n", "PING")
}

// TestLockLostThroughFollower: a holder connected to a follower hears lock-lost from that
// follower as it applies the expiry, also when the leader that granted the lock is gone and a
// new one expires it; its own UNLOCK through the follower pushes nothing.
func TestLockLostThroughFollower(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	f := c.others(l)[0]

	h, tok := resp3Holder(t, f.addr, "mine", 60000)
	if got, err := h.do("UNLOCK", "mine"); err != nil || string(got) != ":1\r\n" {
		t.Fatalf("UNLOCK mine through %s: %q, %v", f.id, got, err)
	}
	time.Sleep(200 * time.Millisecond) // the follower applies the release after the reply
	expectQuiet(t, h)

	h, tok = resp3Holder(t, f.addr, "job", 300)
	expectPush(t, h, lockLost("job", tok, "expired"))

	// Across a leader change: the old leader is killed while the lock is held; the new leader
	// expires the lease.
	h, tok = resp3Holder(t, f.addr, "failover", 3000)
	l.kill9()
	expectPush(t, h, lockLost("failover", tok, "expired"))
}
