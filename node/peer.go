package node

import (
	"fmt"
	"strconv"

	"github.com/raftlock/raftlock/fsm"
)

// What one node asks another on its client port, and the one encoding of each answer as the
// name/value pairs of a RESP map (a flat array in RESP2): the server renders the reply from
// these structures and raftnode's peer client parses it back into them, so each field is named
// once, here. Nodes of two releases ask each other during a rolling upgrade, so a field keeps
// its name and value syntax for good (server/testdata/peer-replies.txt pins the bytes). A
// parser takes a field that is missing as its zero value, or the default it names (an older
// node's answer lacks the fields added since), and ignores fields it does not know (a newer
// node's carries more); a value that is there but malformed is an error.
//
// RAFT READINDEX and RAFT ADD answer with a bare integer, a log index; RAFT PROMOTE and RAFT
// ANNOUNCE with OK. They have no fields.

// Field is one name and value of a peer reply: a bulk string, or a RESP integer when Integer.
type Field struct {
	Name    string
	Str     string
	Int     int64
	Integer bool
}

// Text is the field's value as a reader of the reply sees it: the string, or the integer in
// decimal.
func (f Field) Text() string {
	if f.Integer {
		return strconv.FormatInt(f.Int, 10)
	}
	return f.Str
}

// The fields of PeerState, in RAFT STATS and INFO raft. The server places them among the
// figures RAFT STATS carries for operators, so their names are exported.
const (
	FieldRaftID           = "raft_id"
	FieldClusterID        = "cluster_id"
	FieldRaftState        = "raft_state"
	FieldRaftReady        = "raft_ready"
	FieldRaftLeaderID     = "raft_leader_id"
	FieldRaftLeaderAddr   = "raft_leader_addr"
	FieldRaftTerm         = "raft_term"
	FieldRaftLastIndex    = "raft_last_index"
	FieldRaftCommitIndex  = "raft_commit_index"
	FieldRaftAppliedIndex = "raft_applied_index"
	FieldRaftLogFormat    = "raft_log_format"
	FieldRaftLogFormatMax = "raft_log_format_max"
	// FieldRaftGroups is the number of raft groups the node runs (RAFT STATS, and INFO raft on
	// a node of several): absent from a node that predates groups, which runs one.
	FieldRaftGroups = "raft_groups"
	// FieldRaftGroupsLayout is the number of groups the node's cluster was created with, and
	// FieldRaftGroupsPlanned the number its groups plan (RAFT GROUPS) asks for, or the number it
	// runs without a plan (RAFT STATS): a node joining a cluster of several groups runs them.
	FieldRaftGroupsLayout  = "raft_groups_layout"
	FieldRaftGroupsPlanned = "raft_groups_planned"
)

// StateLeader is the State of a leader: raft's name for it (raft.Leader.String()).
const StateLeader = "Leader"

// PeerState is what a node says of itself when another asks (RAFT STATS, whose other fields
// are figures for operators): who it is, where it stands in its cluster, how far its log goes
// and which log formats it reads.
type PeerState struct {
	ID        string
	ClusterID string // empty until the first leader named the cluster
	State     string // Leader, Follower, Candidate, Shutdown
	Ready     bool   // leader and caught up: serving
	LeaderID  string
	// LeaderAddr is the leader's raft address.
	LeaderAddr   string
	Term         uint64
	LastIndex    uint64
	CommitIndex  uint64
	AppliedIndex uint64
	// LogFormat is the cluster's log format as the node has applied it; LogFormatMax the
	// newest its binary reads (fsm/format.go). A node that names neither runs a release from
	// before formats were announced, and reads fsm.FormatKeyed only.
	LogFormat, LogFormatMax byte
	// Groups is the number of raft groups the node runs; 0 when it does not say (a release
	// from before groups, which runs one). Layout is the number its cluster was created with,
	// Planned the number its cluster's groups plan asks for; each 0 when it does not say.
	Groups, Layout, Planned int
}

// PeerState is the part of s that a node tells its peers.
func (s Stats) PeerState() PeerState {
	return PeerState{
		ID: s.ID, ClusterID: s.ClusterID, State: s.State, Ready: s.Ready,
		LeaderID: s.LeaderID, LeaderAddr: s.LeaderAddr,
		Term: s.Term, LastIndex: s.LastIndex, CommitIndex: s.CommitIndex, AppliedIndex: s.AppliedIndex,
		LogFormat: byte(s.LogFormat), LogFormatMax: byte(s.LogFormatMax),
	}
}

// ReadyLeader reports whether the node said it is the leader, caught up and serving.
func (s PeerState) ReadyLeader() bool { return s.State == StateLeader && s.Ready }

// Fields encodes s, every value a bulk string.
func (s PeerState) Fields() []Field {
	u := func(name string, v uint64) Field { return Field{Name: name, Str: strconv.FormatUint(v, 10)} }
	f := []Field{
		{Name: FieldRaftID, Str: s.ID},
		{Name: FieldClusterID, Str: s.ClusterID},
		{Name: FieldRaftState, Str: s.State},
		{Name: FieldRaftReady, Str: strconv.FormatBool(s.Ready)},
		{Name: FieldRaftLeaderID, Str: s.LeaderID},
		{Name: FieldRaftLeaderAddr, Str: s.LeaderAddr},
		u(FieldRaftTerm, s.Term),
		u(FieldRaftLastIndex, s.LastIndex),
		u(FieldRaftCommitIndex, s.CommitIndex),
		u(FieldRaftAppliedIndex, s.AppliedIndex),
		u(FieldRaftLogFormat, uint64(s.LogFormat)),
		u(FieldRaftLogFormatMax, uint64(s.LogFormatMax)),
	}
	for _, g := range []struct {
		name string
		n    int
	}{{FieldRaftGroups, s.Groups}, {FieldRaftGroupsLayout, s.Layout}, {FieldRaftGroupsPlanned, s.Planned}} {
		if g.n > 0 {
			f = append(f, u(g.name, uint64(g.n)))
		}
	}
	return f
}

// ParsePeerState decodes what PeerState.Fields encoded, given each field's value text.
func ParsePeerState(fields map[string]string) (PeerState, error) {
	r := fieldReader{fields: fields}
	s := PeerState{
		ID:           fields[FieldRaftID],
		ClusterID:    fields[FieldClusterID],
		State:        fields[FieldRaftState],
		Ready:        r.bool(FieldRaftReady),
		LeaderID:     fields[FieldRaftLeaderID],
		LeaderAddr:   fields[FieldRaftLeaderAddr],
		Term:         r.uint(FieldRaftTerm, 64, 0),
		LastIndex:    r.uint(FieldRaftLastIndex, 64, 0),
		CommitIndex:  r.uint(FieldRaftCommitIndex, 64, 0),
		AppliedIndex: r.uint(FieldRaftAppliedIndex, 64, 0),
		LogFormat:    byte(r.uint(FieldRaftLogFormat, 8, uint64(fsm.FormatKeyed))),
		LogFormatMax: byte(r.uint(FieldRaftLogFormatMax, 8, uint64(fsm.FormatKeyed))),
		Groups:       int(r.uint(FieldRaftGroups, 16, 0)),
		Layout:       int(r.uint(FieldRaftGroupsLayout, 16, 0)),
		Planned:      int(r.uint(FieldRaftGroupsPlanned, 16, 0)),
	}
	return s, r.err
}

// The fields of one Member in RAFT MEMBERS.
const (
	fieldMemberID         = "id"
	fieldMemberRaftAddr   = "raft_addr"
	fieldMemberClientAddr = "client_addr"
	fieldMemberSuffrage   = "suffrage"
	fieldMemberLeader     = "leader"
)

// The values of a Member's suffrage field.
const (
	suffrageVoter    = "voter"
	suffrageNonvoter = "nonvoter"
)

// Fields encodes m: its suffrage as voter or nonvoter, Leader as the integer 1 or 0.
func (m Member) Fields() []Field {
	suffrage := suffrageNonvoter
	if m.Voter {
		suffrage = suffrageVoter
	}
	return []Field{
		{Name: fieldMemberID, Str: m.ID},
		{Name: fieldMemberRaftAddr, Str: m.RaftAddr},
		{Name: fieldMemberClientAddr, Str: m.ClientAddr},
		{Name: fieldMemberSuffrage, Str: suffrage},
		flagField(fieldMemberLeader, m.Leader),
	}
}

// ParseMember decodes what Member.Fields encoded. A member is a voter only when its suffrage
// says voter; it must have an ID.
func ParseMember(fields map[string]string) (Member, error) {
	r := fieldReader{fields: fields}
	m := Member{
		ID:         fields[fieldMemberID],
		RaftAddr:   fields[fieldMemberRaftAddr],
		ClientAddr: fields[fieldMemberClientAddr],
		Voter:      fields[fieldMemberSuffrage] == suffrageVoter,
		Leader:     r.flag(fieldMemberLeader),
	}
	if r.err == nil && m.ID == "" {
		r.err = fmt.Errorf("member without %s", fieldMemberID)
	}
	return m, r.err
}

// The fields of Membership in RAFT MEMBER.
const (
	fieldLeaderReady = "leader_ready"
	fieldKnown       = "known"
	fieldConfigIndex = "config_index"
	fieldMember      = "member"
)

// Fields encodes m, every value an integer (a flag as 1 or 0).
func (m Membership) Fields() []Field {
	return []Field{
		flagField(fieldLeaderReady, m.LeaderReady),
		flagField(fieldKnown, m.Known),
		{Name: fieldConfigIndex, Int: int64(m.ConfigIndex), Integer: true},
		flagField(fieldMember, m.Member),
	}
}

// ParseMembership decodes what Membership.Fields encoded. The configuration index must be
// there: every release that answers RAFT MEMBER sends it, so an answer without it is no answer.
func ParseMembership(fields map[string]string) (Membership, error) {
	if _, ok := fields[fieldConfigIndex]; !ok {
		return Membership{}, fmt.Errorf("no %s", fieldConfigIndex)
	}
	r := fieldReader{fields: fields}
	m := Membership{
		LeaderReady: r.flag(fieldLeaderReady),
		Known:       r.flag(fieldKnown),
		ConfigIndex: r.uint(fieldConfigIndex, 64, 0),
		Member:      r.flag(fieldMember),
	}
	return m, r.err
}

// flagField is a yes/no field sent as the integer 1 or 0.
func flagField(name string, v bool) Field {
	f := Field{Name: name, Integer: true}
	if v {
		f.Int = 1
	}
	return f
}

// fieldReader decodes the values of a reply's fields, keeping the first error.
type fieldReader struct {
	fields map[string]string
	err    error
}

// uint reads an unsigned integer of bits bits; missing when the field is not there.
func (r *fieldReader) uint(name string, bits int, missing uint64) uint64 {
	s, ok := r.fields[name]
	if !ok {
		return missing
	}
	v, err := strconv.ParseUint(s, 10, bits)
	if err != nil {
		r.fail(name, s)
		return 0
	}
	return v
}

// bool reads true or false; false when the field is not there.
func (r *fieldReader) bool(name string) bool {
	s, ok := r.fields[name]
	if !ok {
		return false
	}
	v, err := strconv.ParseBool(s)
	if err != nil {
		r.fail(name, s)
	}
	return v
}

// flag reads 1 or 0; false when the field is not there.
func (r *fieldReader) flag(name string) bool {
	switch s, ok := r.fields[name]; {
	case !ok, s == "0":
		return false
	case s == "1":
		return true
	default:
		r.fail(name, s)
		return false
	}
}

func (r *fieldReader) fail(name, value string) {
	if r.err == nil {
		r.err = fmt.Errorf("field %s: malformed value %q", name, value)
	}
}
