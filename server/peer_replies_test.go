package server

import (
	"context"
	"flag"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/raftlock/raftlock/node"
)

// peerFactsNode answers what peers ask (RAFT STATS, MEMBERS, MEMBER, READINDEX) with a value of
// its own in every field, so that a field rendered from the wrong one shows.
type peerFactsNode struct{ *fakeNode }

func (peerFactsNode) Stats() node.Stats {
	return node.Stats{
		ID: "n2", ClusterID: "0123456789abcdef0123456789abcdef", LogFormat: 3, LogFormatMax: 4,
		State: "Follower", Ready: false, LeaderID: "n1", LeaderAddr: "10.0.0.1:7001",
		Term: 7, LastIndex: 1001, CommitIndex: 1000, AppliedIndex: 999, LastContact: time.Second,
		LastSnapshot: 512, Voters: 3, ReachableVoters: 2, Locks: 5, Leases: 4, PendingKeys: 1,
		Proposals: 11, FailedProps: 12, Aborted: 13, Reads: 14, VerifyRounds: 15, MemberHints: 2,
		Store: node.StoreStats{FirstIndex: 400, LastIndex: 1001, Snapshots: 2}, RaftInsecure: true,
	}
}

func (peerFactsNode) Members() ([]node.Member, error) {
	return []node.Member{
		{ID: "n1", RaftAddr: "10.0.0.1:7001", ClientAddr: "10.0.0.1:6379", Voter: true, Leader: true},
		{ID: "n3", RaftAddr: "10.0.0.3:7001"},
	}, nil
}

func (peerFactsNode) Membership(id string) node.Membership {
	return node.Membership{LeaderReady: true, Known: true, ConfigIndex: 42, Member: id == "n3"}
}

func (peerFactsNode) ReadIndex(context.Context) (uint64, error) { return 1000, nil }

// updatePeerReplies rewrites testdata/peer-replies.txt with the replies as they are now: for a
// change that only adds fields (peers read RAFT STATS and INFO raft by name), after checking
// the diff the test printed.
var updatePeerReplies = flag.Bool("update-peer-replies", false, "rewrite testdata/peer-replies.txt")

// The replies one node reads from another are pinned byte for byte (testdata/peer-replies.txt),
// in RESP2, as peers ask, and RESP3: nodes of different releases run side by side during a
// rolling upgrade, so a renamed field or a changed value syntax breaks joins, announcements
// and removals between them.
func TestPeerRepliesPinned(t *testing.T) {
	addr, _ := serveNode(t, peerFactsNode{newFakeNode()}, nil)
	r := dialRaw(t, addr)
	var got strings.Builder
	transcript := func(args ...string) {
		got.WriteString("> " + strings.Join(args, " ") + "\n")
		got.WriteString(strings.ReplaceAll(r.do(args...), "\r\n", "\n"))
	}
	for _, proto := range []string{"2", "3"} {
		r.do("HELLO", proto)
		transcript("RAFT", "STATS")
		transcript("RAFT", "MEMBERS")
		transcript("RAFT", "MEMBER", "n3")
		transcript("RAFT", "MEMBER", "n9")
		transcript("RAFT", "READINDEX")
		transcript("INFO", "raft")
	}
	if *updatePeerReplies {
		if err := os.WriteFile("testdata/peer-replies.txt", []byte(got.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("testdata/peer-replies.txt")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(string(want), got.String()); diff != "" {
		t.Errorf("peer replies differ from testdata/peer-replies.txt (-want +got):\n%s", diff)
	}
}

// RAFT STATS carries every field of node.PeerState once, with the value PeerState encodes: a
// field added there and not placed in raftInfo would never reach a peer.
func TestRaftInfoCarriesPeerState(t *testing.T) {
	ns := peerFactsNode{}.Stats()
	got := map[string][]string{}
	for _, f := range raftInfo(ns) {
		got[f.name] = append(got[f.name], f.value)
	}
	for _, f := range ns.PeerState().Fields() {
		if vals := got[f.Name]; len(vals) != 1 || vals[0] != f.Text() {
			t.Errorf("raftInfo has %s = %q; want it once, %q", f.Name, vals, f.Text())
		}
	}
}
