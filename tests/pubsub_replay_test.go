package tests

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
)

// A node that restarts applies again the entries of its log past its snapshot once it hears the
// commit index: the messages in them were published before any client subscribed to the
// restarted node, so none of its subscribers hears them (as on Redis, a subscriber hears what is
// published after its SUBSCRIBE); it hears what is published afterwards. The restarted node's
// peers are paused while it starts, so that it replays its log only after the SUBSCRIBE. With
// leadership moved before the restart, the log's last entry is of a later term than the
// messages': the index the node had applied when it stopped is what holds them back.
func TestPubSubRestartReplaysNoOldMessages(t *testing.T) {
	for _, moved := range []bool{false, true} {
		t.Run(fmt.Sprintf("leadership moved %v", moved), func(t *testing.T) { restartReplaysNoOldMessages(t, moved) })
	}
}

func restartReplaysNoOldMessages(t *testing.T, moveLeadership bool) {
	c := newCluster(t, 3)
	l := c.leader()
	f := c.others(l)[0]
	for i := range 20 {
		if _, err := call(l.addr, "PUBLISH", "replayed", fmt.Sprintf("old-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	if moveLeadership {
		to := c.others(l)[1]
		if v, err := call(l.addr, "RAFT", "TRANSFER", to.id); err != nil || v != "OK" {
			t.Fatalf("RAFT TRANSFER %s: %v, %v", to.id, v, err)
		}
		if c.leader() != to {
			t.Fatalf("the leader is not %s after the transfer", to.id)
		}
	}
	c.waitSettled() // f holds and applied every message's entry
	if err := f.proc.stop(); err != nil {
		t.Fatal(err)
	}
	peers := c.others(f)
	for _, p := range peers {
		p.proc.sigstop()
	}
	paused := true
	resume := func() {
		if paused {
			paused = false
			for _, p := range peers {
				p.proc.sigcont()
			}
		}
	}
	defer resume()

	r := &node{dir: f.dir, raftAddr: f.raftAddr, id: f.id, starts: f.starts, args: f.args, bin: f.bin}
	if err := r.start(t, f.addr); err != nil {
		t.Fatal(err)
	}
	c.nodes[slices.Index(c.nodes, f)] = r // the cluster's cleanup stops it
	if err := r.WaitServing(r.addr, 20*time.Second, nil); err != nil {
		t.Fatal(err)
	}
	sub, err := dialRESP(r.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	if reply, err := sub.do("SUBSCRIBE", "replayed"); err != nil || !strings.Contains(string(reply), "subscribe") {
		t.Fatalf("SUBSCRIBE on the restarted node: %q, %v", reply, err)
	}
	if reply, err := sub.do("PSUBSCRIBE", "replay*"); err != nil || !strings.Contains(string(reply), "psubscribe") {
		t.Fatalf("PSUBSCRIBE on the restarted node: %q, %v", reply, err)
	}
	resume()
	c.waitSettled()                                    // a leader again, and the restarted node has applied its log again
	testutil.WaitFor(t, 10*time.Second, func() error { // once, past the election's refusals
		if v, err := call(c.leader().addr, "PUBLISH", "replayed", "new"); err != nil {
			return err
		} else if _, ok := v.(int64); !ok {
			return fmt.Errorf("PUBLISH = %#v", v)
		}
		return nil
	})
	sub.nc.SetDeadline(time.Now().Add(10 * time.Second))
	for _, want := range []string{
		"*3\r\n$7\r\nmessage\r\n$8\r\nreplayed\r\n$3\r\nnew\r\n",
		"*4\r\n$8\r\npmessage\r\n$7\r\nreplay*\r\n$8\r\nreplayed\r\n$3\r\nnew\r\n",
	} {
		if msg, err := sub.readReply(); err != nil || string(msg) != want {
			t.Fatalf("the restarted node's subscriber heard %q (%v); want %q, the first message published after it subscribed", msg, err, want)
		}
	}
}
