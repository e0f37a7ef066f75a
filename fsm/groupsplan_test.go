package fsm_test

import (
	"slices"
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

func planCmd(p fsm.GroupsPlan) fsm.Command {
	return fsm.Command{Kind: fsm.KindPlanGroups, Key: fsm.EncodeGroupsPlan(p)}
}

var planVoters = []fsm.PlanVoter{{ID: "n1", Addr: "127.0.0.1:7001"}, {ID: "n2", Addr: "127.0.0.1:7002"}}

// A plan applies in group 0 when it adds groups to the last one with the same layout, survives
// a snapshot, and is refused (changing nothing) otherwise.
func TestGroupsPlanAppliesInGroupZeroAndGrowsOnly(t *testing.T) {
	m := fsm.New()
	m.SetGroup(0, 1, 0)
	m.NoteFormat(fsm.FormatFunctions)
	if _, ok := m.GroupsPlan(); ok {
		t.Fatal("a new table has a plan")
	}
	four := fsm.GroupsPlan{Groups: 4, Layout: 1, Voters: planVoters}
	if r := m.Apply(1, planCmd(four)); r.Status != fsm.StatusGroupsPlanned {
		t.Fatalf("plan: %v", r.Status)
	}
	for i, p := range []fsm.GroupsPlan{
		{Groups: 4, Layout: 1, Voters: planVoters}, // not more groups
		{Groups: 3, Layout: 1, Voters: planVoters}, // fewer
		{Groups: 8, Layout: 2, Voters: planVoters}, // another layout
	} {
		if r := m.Apply(uint64(2+i), planCmd(p)); r.Status != fsm.StatusConflict {
			t.Errorf("plan %+v: %v, want conflict", p, r.Status)
		}
	}
	if got, _ := m.GroupsPlan(); got.Groups != 4 {
		t.Errorf("a refused plan changed it: %+v", got)
	}
	// Other voters: the members changed after every node ran the last plan (the leader checks
	// that, cluster.PlanGroups; the table cannot).
	grown := append(slices.Clone(planVoters), fsm.PlanVoter{ID: "n3", Addr: "127.0.0.1:7003"})
	if r := m.Apply(10, planCmd(fsm.GroupsPlan{Groups: 8, Layout: 1, Voters: grown})); r.Status != fsm.StatusGroupsPlanned {
		t.Errorf("a plan of more groups: %v", r.Status)
	}

	b := snapshotBytes(t, m)
	if b[4] != 9 {
		t.Errorf("a table with a plan wrote snapshot version %d, want 9", b[4])
	}
	back := restore(t, b)
	if got, ok := back.GroupsPlan(); !ok || got.Groups != 8 || got.Layout != 1 || !slices.Equal(got.Voters, grown) {
		t.Errorf("restored plan %+v %v", got, ok)
	}

	if back.Slots().Moved() {
		t.Error("a table no move named restored with slot records of its own (its default ranges are its layout's)")
	}

	other := fsm.New()
	other.SetGroup(1, 4, 1)
	if r := other.Apply(1, planCmd(four)); r.Status != fsm.StatusConflict {
		t.Errorf("a plan in group 1: %v", r.Status)
	}
}

// Malformed plans are invalid commands: they apply as nothing.
func TestGroupsPlanValidation(t *testing.T) {
	for _, p := range []fsm.GroupsPlan{
		{Groups: 1, Layout: 1, Voters: planVoters},
		{Groups: 4, Layout: 0, Voters: planVoters},
		{Groups: fsm.MaxGroups + 1, Layout: 1, Voters: planVoters},
		{Groups: 4, Layout: 1},
		{Groups: 4, Layout: 1, Voters: []fsm.PlanVoter{{ID: "n1", Addr: "a"}, {ID: "n1", Addr: "b"}}},
		{Groups: 4, Layout: 1, Voters: []fsm.PlanVoter{{ID: "n1", Addr: "a"}, {ID: "n2", Addr: "a"}}},
		{Groups: 4, Layout: 1, Voters: []fsm.PlanVoter{{ID: "", Addr: "a"}}},
	} {
		if err := planCmd(p).Validate(); err == nil {
			t.Errorf("plan %+v validated", p)
		}
	}
	for _, b := range [][]byte{nil, {2}, {1}, append(fsm.EncodeGroupsPlan(fsm.GroupsPlan{Groups: 2, Layout: 1, Voters: planVoters}), 0)} {
		if _, err := fsm.DecodeGroupsPlan(b); err == nil {
			t.Errorf("plan bytes %x decoded", b)
		}
	}
}

// A cluster created with one group and grown to four: group 0 owns every slot and the added
// groups none, until a move.
func TestLayoutOwnership(t *testing.T) {
	zero, added := fsm.New(), fsm.New()
	zero.SetGroup(0, 4, 1)
	added.SetGroup(3, 4, 1)
	for _, slot := range []int{0, 5000, fsm.HashSlots - 1} {
		if zero.Slots().Of(slot).State != fsm.SlotOwned || added.Slots().Of(slot).State != fsm.SlotNone {
			t.Errorf("slot %d: group 0 %v, group 3 %v", slot, zero.Slots().Of(slot), added.Slots().Of(slot))
		}
	}
	// Grown from two groups: the first two keep their halves.
	g1 := fsm.New()
	g1.SetGroup(1, 4, 2)
	if g1.Slots().Of(fsm.HashSlots-1).State != fsm.SlotOwned || g1.Slots().Of(0).State != fsm.SlotNone {
		t.Errorf("group 1 of a layout of 2 owns the wrong half")
	}
}
