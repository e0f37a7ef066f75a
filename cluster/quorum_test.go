package cluster

import (
	"errors"
	"testing"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/raftnode"
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
	live, quorum := node.ErrLiveVoter, node.ErrQuorumAtRisk
	tests := []struct {
		name    string
		conf    raft.Configuration
		failing []string
		op      string // "remove", "remove force" or "promote"
		id      string
		refused error // nil: done
	}{
		// Two RAFT REMOVEs of live voters once shrank 3 to 1: a live voter now needs FORCE.
		{"remove a live voter of 3, all reachable", voters("n1", "n2", "n3"), nil, "remove", "n2", live},
		{"remove a live voter of 3 with FORCE", voters("n1", "n2", "n3"), nil, "remove force", "n2", nil},
		{"remove the leader itself", voters("n1", "n2", "n3"), nil, "remove", "n1", live},
		{"remove the leader itself with FORCE", voters("n1", "n2", "n3"), nil, "remove force", "n1", nil},
		{"remove a live voter of 3, the third down", voters("n1", "n2", "n3"), []string{"n3"}, "remove", "n2", quorum},
		{"remove a live voter of 3, the third down, FORCE", voters("n1", "n2", "n3"), []string{"n3"}, "remove force", "n2", quorum},
		{"remove the dead voter of 3", voters("n1", "n2", "n3"), []string{"n3"}, "remove", "n3", nil},
		{"remove down to 1, reachable", voters("n1", "n2"), nil, "remove", "n2", live},
		{"remove down to 1, reachable, FORCE", voters("n1", "n2"), nil, "remove force", "n2", nil},
		{"remove the last voter", voters("n1"), nil, "remove force", "n1", quorum},
		{"remove a non-voter", withNonvoter, []string{"evil"}, "remove", "evil", nil},
		{"remove a live non-voter", withNonvoter, nil, "remove", "evil", nil},
		{"promote into 1 node", withNonvoter, nil, "promote", "evil", nil},
		{"promote into 3 with 2 down", voters("n1", "n2", "n3"), []string{"n2", "n3"}, "promote", "n4", quorum},
		{"promote into 3 with 1 down", voters("n1", "n2", "n3"), []string{"n3"}, "promote", "n4", nil},
		{"promote into 2 with 1 down: a quorum of 3 again", voters("n1", "n2"), []string{"n2"}, "promote", "n3", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &Member{cfg: Config{Core: raftnode.Config{ID: "n1"}}}
			for _, id := range tt.failing {
				n.peers.heartbeat(raft.FailedHeartbeatObservation{PeerID: raft.ServerID(id)})
			}
			var err error
			switch tt.op {
			case "remove", "remove force":
				err = n.checkRemove(tt.conf, tt.id, tt.op == "remove force")
			default:
				err = n.checkAddVoter(tt.conf, tt.id)
			}
			if (err == nil) != (tt.refused == nil) || !errors.Is(err, tt.refused) {
				t.Errorf("%s %s: got err %v, want %v", tt.op, tt.id, err, tt.refused)
			}
		})
	}
}
