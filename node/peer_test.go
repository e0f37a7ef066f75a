package node

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/raftlock/raftlock/fsm"
)

// wire renders fields as a RESP reader sees them: each name, then its value marked with the
// type a RESP reply gives it ($ a bulk string, : an integer).
func wire(fields []Field) []string {
	out := make([]string, len(fields))
	for i, f := range fields {
		kind := "$"
		if f.Integer {
			kind = ":"
		}
		out[i] = f.Name + " " + kind + f.Text()
	}
	return out
}

// texts is a reply's fields as a peer parses them: each value's text by name.
func texts(fields []Field) map[string]string {
	m := make(map[string]string, len(fields))
	for _, f := range fields {
		m[f.Name] = f.Text()
	}
	return m
}

// Nodes of two releases read each other's replies during a rolling upgrade: the names, their
// order, the RESP type and the syntax of every value are pinned here. A change that fails this
// test breaks joins, announcements or removals between releases.
func TestPeerEncodingPinned(t *testing.T) {
	state := PeerState{
		ID: "n2", ClusterID: "c0ffee", State: "Follower", Ready: false, LeaderID: "n1", LeaderAddr: "10.0.0.1:7001",
		Term: 7, LastIndex: 1001, CommitIndex: 1000, AppliedIndex: 999, LogFormat: 3, LogFormatMax: 4,
	}
	for _, tc := range []struct {
		name string
		got  []Field
		want []string
	}{
		{"PeerState", state.Fields(), []string{
			"raft_id $n2", "cluster_id $c0ffee", "raft_state $Follower", "raft_ready $false",
			"raft_leader_id $n1", "raft_leader_addr $10.0.0.1:7001", "raft_term $7", "raft_last_index $1001",
			"raft_commit_index $1000", "raft_applied_index $999", "raft_log_format $3", "raft_log_format_max $4",
		}},
		{"PeerState of a ready leader", PeerState{ID: "n1", State: "Leader", Ready: true}.Fields(), []string{
			"raft_id $n1", "cluster_id $", "raft_state $Leader", "raft_ready $true",
			"raft_leader_id $", "raft_leader_addr $", "raft_term $0", "raft_last_index $0",
			"raft_commit_index $0", "raft_applied_index $0", "raft_log_format $0", "raft_log_format_max $0",
		}},
		{"Member voter", Member{ID: "n1", RaftAddr: "10.0.0.1:7001", ClientAddr: "10.0.0.1:6379", Voter: true, Leader: true}.Fields(), []string{
			"id $n1", "raft_addr $10.0.0.1:7001", "client_addr $10.0.0.1:6379", "suffrage $voter", "leader :1",
		}},
		{"Member nonvoter", Member{ID: "n3", RaftAddr: "10.0.0.3:7001"}.Fields(), []string{
			"id $n3", "raft_addr $10.0.0.3:7001", "client_addr $", "suffrage $nonvoter", "leader :0",
		}},
		{"Membership", Membership{LeaderReady: true, Known: true, ConfigIndex: 42, Member: false}.Fields(), []string{
			"leader_ready :1", "known :1", "config_index :42", "member :0",
		}},
		{"Membership of a member", Membership{Member: true}.Fields(), []string{
			"leader_ready :0", "known :0", "config_index :0", "member :1",
		}},
	} {
		if diff := cmp.Diff(tc.want, wire(tc.got)); diff != "" {
			t.Errorf("%s: the encoding changed (-want +got):\n%s", tc.name, diff)
		}
	}
}

func TestPeerRoundTrip(t *testing.T) {
	for _, s := range []PeerState{
		{},
		{ID: "n1", State: StateLeader, Ready: true, LeaderID: "n1", LeaderAddr: "a:1", LogFormat: fsm.FormatCurrent, LogFormatMax: fsm.FormatCurrent},
		{ID: "n2", ClusterID: "c", State: "Candidate", Term: 1<<64 - 1, LastIndex: 3, CommitIndex: 2, AppliedIndex: 1, LogFormat: 255, LogFormatMax: 255},
		{ID: "n3", Groups: 4},
	} {
		got, err := ParsePeerState(texts(s.Fields()))
		if err != nil || got != s {
			t.Errorf("ParsePeerState(%+v's fields) = %+v, %v", s, got, err)
		}
	}
	for _, m := range []Member{
		{ID: "n1"},
		{ID: "n1", RaftAddr: "r:1", ClientAddr: "c:1", Voter: true, Leader: true},
		{ID: "n2", RaftAddr: "r:2", Voter: true},
	} {
		got, err := ParseMember(texts(m.Fields()))
		if err != nil || got != m {
			t.Errorf("ParseMember(%+v's fields) = %+v, %v", m, got, err)
		}
	}
	for _, m := range []Membership{
		{},
		{LeaderReady: true, Known: true, ConfigIndex: 1<<63 - 1, Member: true},
		{LeaderReady: true, Known: true, ConfigIndex: 9},
	} {
		got, err := ParseMembership(texts(m.Fields()))
		if err != nil || got != m {
			t.Errorf("ParseMembership(%+v's fields) = %+v, %v", m, got, err)
		}
	}
}

// An older node's reply lacks the fields added since, and a newer one's carries fields this
// release does not know: both parse. A malformed value does not.
func TestPeerParseAcrossReleases(t *testing.T) {
	older, err := ParsePeerState(map[string]string{"raft_id": "n1", "raft_state": "Leader", "raft_ready": "true", "raft_last_index": "5"})
	want := PeerState{ID: "n1", State: StateLeader, Ready: true, LastIndex: 5, LogFormat: fsm.FormatKeyed, LogFormatMax: fsm.FormatKeyed}
	if err != nil || older != want || !older.ReadyLeader() {
		t.Errorf("an older node's RAFT STATS parses as %+v, %v; want %+v, a ready leader", older, err, want)
	}
	newer := texts(PeerState{ID: "n1", LogFormatMax: 9}.Fields())
	newer["raft_something_new"] = "x"
	if got, err := ParsePeerState(newer); err != nil || got.LogFormatMax != 9 {
		t.Errorf("a newer node's RAFT STATS parses as %+v, %v", got, err)
	}
	if got, err := ParseMember(map[string]string{"id": "n1"}); err != nil || got != (Member{ID: "n1"}) {
		t.Errorf("a member entry with its ID only parses as %+v, %v", got, err)
	}
	for _, tc := range []struct {
		name  string
		parse func() error
	}{
		{"raft_last_index", func() error { _, err := ParsePeerState(map[string]string{"raft_last_index": "-1"}); return err }},
		{"raft_ready", func() error { _, err := ParsePeerState(map[string]string{"raft_ready": "maybe"}); return err }},
		{"raft_log_format_max", func() error { _, err := ParsePeerState(map[string]string{"raft_log_format_max": "256"}); return err }},
		{"leader", func() error { _, err := ParseMember(map[string]string{"id": "n1", "leader": "yes"}); return err }},
		{"id", func() error { _, err := ParseMember(map[string]string{"raft_addr": "r:1"}); return err }},
		{"config_index", func() error { _, err := ParseMembership(map[string]string{"member": "1"}); return err }},
		{"config_index", func() error { _, err := ParseMembership(map[string]string{"config_index": "x"}); return err }},
		{"known", func() error {
			_, err := ParseMembership(map[string]string{"config_index": "1", "known": "2"})
			return err
		}},
	} {
		if err := tc.parse(); err == nil || !strings.Contains(err.Error(), tc.name) {
			t.Errorf("a malformed %s: error %v; want one naming it", tc.name, err)
		}
	}
}
