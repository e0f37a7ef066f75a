package fsm_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/raftlock/raftlock/fsm"
)

func TestMembers(t *testing.T) {
	m := fsm.New()
	set := func(id, addr string) fsm.Command {
		return fsm.Command{Kind: fsm.KindSetMember, Key: []byte(id), Owner: []byte(addr)}
	}
	steps := []struct {
		cmd  fsm.Command
		want fsm.Result
	}{
		{set("n1", "127.0.0.1:6379"), fsm.Result{Status: fsm.StatusMember}},
		{set("n2", "127.0.0.1:6380"), fsm.Result{Status: fsm.StatusMember}},
		{set("n1", "127.0.0.1:7000"), fsm.Result{Status: fsm.StatusMember}},
		{fsm.Command{Kind: fsm.KindRemoveMember, Key: []byte("n2")}, fsm.Result{Status: fsm.StatusMember, Existed: true}},
		{fsm.Command{Kind: fsm.KindRemoveMember, Key: []byte("n2")}, fsm.Result{Status: fsm.StatusMember}},
		// Invalid: no address. Changes nothing.
		{set("n3", ""), fsm.Result{Status: fsm.StatusNoop}},
	}
	for i, s := range steps {
		if got := m.Apply(uint64(i+1), s.cmd); !cmp.Equal(got, s.want) {
			t.Errorf("step %d %v: got %+v, want %+v", i, s.cmd.Kind, got, s.want)
		}
	}
	if diff := cmp.Diff(m.Members(), map[string]string{"n1": "127.0.0.1:7000"}); diff != "" {
		t.Errorf("members (-got +want):\n%s", diff)
	}
	if m.Len() != 0 {
		t.Errorf("member commands touched the lock table: %d locks", m.Len())
	}
	// A member command survives the codec.
	enc := encode(set("n9", "h:1"))
	if c, err := decodeOne(enc); err != nil || string(c.Owner) != "h:1" {
		t.Errorf("Decode(set-member) = %+v, %v", c, err)
	}
}

// TestReleaseByLease: the guard of a ghost-lock release spares a lock its owner renewed after
// the grant (a retry told it holds the lock), even though the token is unchanged.
func TestReleaseByLease(t *testing.T) {
	m := fsm.New()
	m.Apply(1, fsm.Command{Kind: fsm.KindGrant, Key: []byte("k"), Owner: []byte("o"), LeaseMs: 100, Match: fsm.Match{Kind: fsm.MatchAbsent}})
	ghost := fsm.Command{Kind: fsm.KindRelease, Key: []byte("k"), LeaseRev: 1, Match: fsm.Match{Kind: fsm.MatchLease, Token: 1}}
	m.Apply(2, fsm.Command{Kind: fsm.KindRenew, Key: []byte("k"), LeaseMs: 100, Match: fsm.Match{Kind: fsm.MatchOwner, Owner: []byte("o")}})
	if r := m.Apply(3, ghost); r.Status != fsm.StatusNotFound {
		t.Errorf("release by a stale lease revision = %v, want not-found", r.Status)
	}
	ghost.LeaseRev = 2
	if r := m.Apply(4, ghost); r.Status != fsm.StatusReleased || m.Len() != 0 {
		t.Errorf("release by the current lease = %v (locks %d), want released", r.Status, m.Len())
	}
}

// TestClusterID: the first SetCluster names the cluster for good; another ID is refused, the
// member commands cannot reach it, and it survives the codec and a snapshot without showing up
// as a member.
func TestClusterID(t *testing.T) {
	m := fsm.New()
	cluster := func(id string) fsm.Command { return fsm.Command{Kind: fsm.KindSetCluster, Key: []byte(id)} }
	steps := []struct {
		cmd  fsm.Command
		want fsm.Result
	}{
		{cluster("c-1"), fsm.Result{Status: fsm.StatusMember}},
		{cluster("c-1"), fsm.Result{Status: fsm.StatusMember, Existed: true}},
		{cluster("c-2"), fsm.Result{Status: fsm.StatusConflict, Existed: true}},
		{fsm.Command{Kind: fsm.KindSetMember, Key: []byte("\x00cluster-id"), Owner: []byte("x")}, fsm.Result{Status: fsm.StatusNoop}},
		{fsm.Command{Kind: fsm.KindRemoveMember, Key: []byte("\x00cluster-id")}, fsm.Result{Status: fsm.StatusNoop}},
		{cluster(""), fsm.Result{Status: fsm.StatusNoop}}, // invalid: no ID
		{fsm.Command{Kind: fsm.KindSetMember, Key: []byte("n1"), Owner: []byte("h:1")}, fsm.Result{Status: fsm.StatusMember}},
	}
	for i, s := range steps {
		if got := m.Apply(uint64(i+1), s.cmd); !cmp.Equal(got, s.want) {
			t.Errorf("step %d %v %q: got %+v, want %+v", i, s.cmd.Kind, s.cmd.Key, got, s.want)
		}
	}
	if got := m.ClusterID(); got != "c-1" {
		t.Errorf("ClusterID() = %q, want c-1", got)
	}
	if diff := cmp.Diff(m.Members(), map[string]string{"n1": "h:1"}); diff != "" {
		t.Errorf("members (-got +want):\n%s", diff)
	}
	if c, err := decodeOne(encode(cluster("c-9"))); err != nil || c.Kind != fsm.KindSetCluster || string(c.Key) != "c-9" {
		t.Errorf("codec round trip: %+v, %v", c, err)
	}
	r := restore(t, snapshotBytes(t, m))
	if r.ClusterID() != "c-1" || len(r.Members()) != 1 {
		t.Errorf("restored: cluster %q, members %v; want c-1 and n1 only", r.ClusterID(), r.Members())
	}
}
