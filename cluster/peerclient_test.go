package cluster

import (
	"bytes"
	"net"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/resp"
)

// pinnedPeerReplies reads the RESP2 replies of the server's pinned transcript (the server
// renders them byte for byte so, server/peer_replies_test.go): the reply to each command the
// first time the transcript shows it, with its CRLFs back.
func pinnedPeerReplies(t *testing.T) map[string][]byte {
	t.Helper()
	b, err := os.ReadFile("../server/testdata/peer-replies.txt")
	if err != nil {
		t.Fatal(err)
	}
	replies := map[string][]byte{}
	for _, part := range strings.Split(string(b), "> ")[1:] {
		cmd, reply, _ := strings.Cut(part, "\n")
		if _, seen := replies[cmd]; !seen {
			replies[cmd] = []byte(strings.ReplaceAll(reply, "\n", "\r\n"))
		}
	}
	return replies
}

// servePeer answers on a loopback port with replies, by the command's words joined by spaces;
// anything else gets an integer, as a server that is no raftlock node might answer. With
// password set, a connection must AUTH as peer first.
func servePeer(t *testing.T, replies map[string][]byte, password string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { ln.Close(); wg.Wait() })
	wg.Go(func() {
		for {
			nc, err := ln.Accept()
			if err != nil {
				return
			}
			wg.Go(func() {
				defer nc.Close()
				r := resp.NewReader(nc, resp.Limits{})
				authed := password == ""
				for {
					args, err := r.ReadCommand()
					if err != nil {
						return
					}
					cmd := string(bytes.Join(args, []byte(" ")))
					out, ok := replies[cmd]
					switch {
					case cmd == "AUTH peer "+password:
						authed, out = true, []byte("+OK\r\n")
					case !authed:
						out = []byte("-NOAUTH Authentication required.\r\n")
					case !ok:
						out = []byte(":66\r\n")
					}
					if _, err := nc.Write(out); err != nil {
						return
					}
				}
			})
		}
	})
	return ln.Addr().String()
}

// The peer client reads the replies the server renders (pinned in the server's transcript)
// into what the server rendered them from: server/peer_replies_test.go's peerFactsNode.
func TestPeerClientReadsPinnedReplies(t *testing.T) {
	for _, password := range []string{"", "secret"} {
		addr := servePeer(t, pinnedPeerReplies(t), password)
		c := newPeerClient(nil, "peer", password)
		ctx := t.Context()

		st, err := c.State(ctx, addr)
		want := node.PeerState{
			ID: "n2", ClusterID: "0123456789abcdef0123456789abcdef", State: "Follower", LeaderID: "n1",
			LeaderAddr: "10.0.0.1:7001", Term: 7, LastIndex: 1001, CommitIndex: 1000, AppliedIndex: 999,
			LogFormat: 3, LogFormatMax: 4, Groups: 1, Layout: 1, Planned: 1,
		}
		if diff := cmp.Diff(want, st); err != nil || diff != "" {
			t.Errorf("State: %v (-want +got):\n%s", err, diff)
		}
		members, err := c.Members(ctx, addr, 0)
		wantMembers := []node.Member{
			{ID: "n1", RaftAddr: "10.0.0.1:7001", ClientAddr: "10.0.0.1:6379", Voter: true, Leader: true},
			{ID: "n3", RaftAddr: "10.0.0.3:7001"},
		}
		if diff := cmp.Diff(wantMembers, members); err != nil || diff != "" {
			t.Errorf("Members: %v (-want +got):\n%s", err, diff)
		}
		for id, member := range map[string]bool{"n3": true, "n9": false} {
			m, err := c.Membership(ctx, addr, id, 0)
			if want := (node.Membership{LeaderReady: true, Known: true, ConfigIndex: 42, Member: member}); err != nil || m != want {
				t.Errorf("Membership(%s) = %+v, %v; want %+v", id, m, err, want)
			}
		}
		if got, err := c.ReadIndex(ctx, addr); err != nil || got != 1000 {
			t.Errorf("ReadIndex = %d, %v; want 1000", got, err)
		}
	}
}

// What is not a node's answer is an error, not an empty one: an integer where fields belong,
// an error reply, an index that is not positive.
func TestPeerClientRefusesOtherReplies(t *testing.T) {
	addr := servePeer(t, map[string][]byte{
		"RAFT STATS":     []byte("-ERR unknown command\r\n"),
		"RAFT MEMBERS":   []byte("*1\r\n*1\r\n$2\r\nid\r\n"),
		"RAFT READINDEX": []byte(":0\r\n"),
	}, "")
	c := newPeerClient(nil, "", "")
	ctx := t.Context()
	if st, err := c.State(ctx, addr); err == nil {
		t.Errorf("State of an error reply = %+v; want an error", st)
	}
	if m, err := c.Members(ctx, addr, 0); err == nil {
		t.Errorf("Members of an entry with a name and no value = %+v; want an error", m)
	}
	if m, err := c.Membership(ctx, addr, "n1", 0); err == nil {
		t.Errorf("Membership of an integer reply = %+v; want an error", m)
	}
	if i, err := c.ReadIndex(ctx, addr); err == nil {
		t.Errorf("ReadIndex of 0 = %d; want an error", i)
	}
	if i, err := c.Add(ctx, addr, "n4", "10.0.0.4:7001"); err != nil || i != 66 {
		t.Errorf("Add = %d, %v; want the index 66", i, err)
	}
}
