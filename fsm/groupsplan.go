package fsm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Growing a cluster's raft groups (docs/groups.md, "From one group to several"). A cluster
// created with L groups runs more of them only through a plan committed in group 0
// (KindPlanGroups): the new number of groups, L (the layout: the groups the slots were first
// divided among, which keep their default ranges), and the voters every new group starts
// with. Every node applies the plan, records it in its data dir, and runs the new groups from
// its next start, each bootstrapped with the plan's voters: one committed list, so every node
// bootstraps a new group with the same configuration whatever group 0's membership did since.
// A new group owns no slot until one is moved to it (RAFT MOVESLOTS).
//
// The plan is replicated state, not configuration: it is in group 0's snapshots (version 9),
// so a node that missed the entry learns it from a snapshot, and a backup restores a cluster
// that knows its layout.

// GroupsPlan is a committed plan to run Groups raft groups.
type GroupsPlan struct {
	// Groups is the number of raft groups the cluster runs once every node restarted.
	Groups int
	// Layout is the number of groups the cluster was created with: group g < Layout owns
	// DefaultSlots(g, Layout) until a move; a group from Layout on owns nothing until one.
	Layout int
	// Voters start every group the plan adds, on every node.
	Voters []PlanVoter
}

// PlanVoter is one voter of the plan's new groups: a node's ID and raft address.
type PlanVoter struct {
	ID, Addr string
}

// maxPlanVoters bounds a plan's voters (every node is a member of every group: a handful).
const maxPlanVoters = 64

// EncodeGroupsPlan is a plan command's key: version byte 1, groups, layout, the voters' count,
// then each voter's ID and address, length-prefixed.
func EncodeGroupsPlan(p GroupsPlan) []byte {
	b := []byte{1}
	b = binary.AppendUvarint(b, uint64(p.Groups))
	b = binary.AppendUvarint(b, uint64(p.Layout))
	b = binary.AppendUvarint(b, uint64(len(p.Voters)))
	for _, v := range p.Voters {
		b = appendBytes(b, []byte(v.ID))
		b = appendBytes(b, []byte(v.Addr))
	}
	return b
}

// DecodeGroupsPlan reads a plan command's key and checks it: more groups than its layout, at
// most MaxGroups, and one to maxPlanVoters voters of distinct, non-empty IDs and addresses.
func DecodeGroupsPlan(b []byte) (GroupsPlan, error) {
	if len(b) == 0 || b[0] != 1 {
		return GroupsPlan{}, errors.New("fsm: groups plan of an unknown version")
	}
	d := decoder{b: b[1:]}
	p := GroupsPlan{Groups: int(min(d.uvarint(), MaxGroups+1)), Layout: int(min(d.uvarint(), MaxGroups+1))}
	n := d.uvarint()
	if d.err == nil && n > maxPlanVoters {
		return GroupsPlan{}, fmt.Errorf("fsm: groups plan of %d voters (at most %d)", n, maxPlanVoters)
	}
	for i := uint64(0); i < n && d.err == nil; i++ {
		p.Voters = append(p.Voters, PlanVoter{ID: string(d.bytes()), Addr: string(d.bytes())})
	}
	switch {
	case d.err != nil || len(d.b) != 0:
		return GroupsPlan{}, errors.New("fsm: groups plan truncated or too long")
	case p.Layout < 1 || p.Groups <= p.Layout || p.Groups > MaxGroups:
		return GroupsPlan{}, fmt.Errorf("fsm: groups plan of %d groups from %d", p.Groups, p.Layout)
	case len(p.Voters) == 0:
		return GroupsPlan{}, errors.New("fsm: groups plan without voters")
	}
	for i, v := range p.Voters {
		if v.ID == "" || v.Addr == "" || slices.ContainsFunc(p.Voters[:i], func(o PlanVoter) bool { return o.ID == v.ID || o.Addr == v.Addr }) {
			return GroupsPlan{}, fmt.Errorf("fsm: groups plan voter %q at %q empty or named twice", v.ID, v.Addr)
		}
	}
	return p, nil
}

// GroupsPlan is the plan group 0's table committed last, if any.
func (m *Machine) GroupsPlan() (GroupsPlan, bool) {
	if m.plan == nil {
		return GroupsPlan{}, false
	}
	return *m.plan, true
}

// GroupsPlan is the snapshot's plan, if any.
func (s *Snapshot) GroupsPlan() (GroupsPlan, bool) {
	if s.plan == nil {
		return GroupsPlan{}, false
	}
	return *s.plan, true
}

// ReplaceGroupsPlan sets the table's plan (nil: none), bypassing the log: only for a table a
// restore writes into a new cluster (cluster.RestoreBackup) or a recovery rewrites
// (cluster.Recover), whose voters are not the plan's any more.
func (m *Machine) ReplaceGroupsPlan(p *GroupsPlan) { m.plan = p }

// applyPlan applies a plan command: taken in group 0 when it grows the groups of the plan
// before it (if any) and keeps its layout; refused (StatusConflict) otherwise. A later plan's
// voters are the last one's unless every member ran the last one (cluster.PlanGroups decides,
// on the leader): a node that learns two plans at once bootstraps every added group with the
// voters the nodes that learned the first one used. It depends only on replicated state, so
// every replica decides alike, whatever number of groups each node runs while the cluster
// converts.
func (m *Machine) applyPlan(cmd Command) Result {
	p, err := DecodeGroupsPlan(cmd.Key)
	if err != nil || m.slots.group != 0 {
		return Result{Status: StatusConflict}
	}
	if m.plan != nil && (p.Groups <= m.plan.Groups || p.Layout != m.plan.Layout) {
		return Result{Status: StatusConflict}
	}
	m.plan = &p
	return Result{Status: StatusGroupsPlanned}
}

// appendPlan appends the plan section of a version 9 snapshot: a flag byte, then
// EncodeGroupsPlan of the plan (length-prefixed) when it is 1.
func appendPlan(buf []byte, p *GroupsPlan) []byte {
	if p == nil {
		return append(buf, 0)
	}
	return appendBytes(append(buf, 1), EncodeGroupsPlan(*p))
}

// plan reads what appendPlan wrote.
func (d *streamDecoder) plan() (*GroupsPlan, error) {
	flag := d.read(1)
	if d.err != nil {
		return nil, d.err
	}
	switch flag[0] {
	case 0:
		return nil, nil
	case 1:
	default:
		return nil, fmt.Errorf("%w: snapshot groups plan flag %d", ErrCorrupt, flag[0])
	}
	b := d.bytes()
	if d.err != nil {
		return nil, d.err
	}
	p, err := DecodeGroupsPlan(b)
	if err != nil {
		return nil, fmt.Errorf("%w: snapshot groups plan: %v", ErrCorrupt, err)
	}
	return &p, nil
}
