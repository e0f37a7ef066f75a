package raftnode

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/node"
)

// TestStrictReconfiguration checks the reachable-quorum rule of quorum.go against configurations
// with some voters unreachable from the leader n1.
func TestStrictReconfiguration(t *testing.T) {
	voters := func(ids ...string) raft.Configuration {
		var c raft.Configuration
		for _, id := range ids {
			c.Servers = append(c.Servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: raft.ServerAddress(id + ":1")})
		}
		return c
	}
	withNonvoter := voters("n1")
	withNonvoter.Servers = append(withNonvoter.Servers, raft.Server{Suffrage: raft.Nonvoter, ID: "evil", Address: "127.0.0.1:9"})
	tests := []struct {
		name    string
		conf    raft.Configuration
		failing []string
		op      string // "remove" or "promote"
		id      string
		refused bool
	}{
		{"remove a live voter of 3, all reachable", voters("n1", "n2", "n3"), nil, "remove", "n2", false},
		{"remove a live voter of 3, the third down", voters("n1", "n2", "n3"), []string{"n3"}, "remove", "n2", true},
		{"remove the dead voter of 3", voters("n1", "n2", "n3"), []string{"n3"}, "remove", "n3", false},
		{"remove down to 1, reachable", voters("n1", "n2"), nil, "remove", "n2", false},
		{"remove the last voter", voters("n1"), nil, "remove", "n1", true},
		{"remove a non-voter", withNonvoter, []string{"evil"}, "remove", "evil", false},
		{"promote into 1 node", withNonvoter, nil, "promote", "evil", false},
		{"promote into 3 with 2 down", voters("n1", "n2", "n3"), []string{"n2", "n3"}, "promote", "n4", true},
		{"promote into 3 with 1 down", voters("n1", "n2", "n3"), []string{"n3"}, "promote", "n4", false},
		{"promote into 2 with 1 down: a quorum of 3 again", voters("n1", "n2"), []string{"n2"}, "promote", "n3", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &Node{cfg: Config{ID: "n1"}}
			for _, id := range tt.failing {
				n.peers.heartbeat(raft.FailedHeartbeatObservation{PeerID: raft.ServerID(id)})
			}
			var err error
			if tt.op == "remove" {
				err = n.checkRemove(tt.conf, tt.id)
			} else {
				err = n.checkAddVoter(tt.conf, tt.id)
			}
			if got := errors.Is(err, node.ErrQuorumAtRisk); got != tt.refused {
				t.Errorf("%s %s: got err %v, want refused=%v", tt.op, tt.id, err, tt.refused)
			}
		})
	}
}
