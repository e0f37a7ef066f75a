package fsm

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// Slot ownership (docs/groups.md, "Moving slots"). In a cluster of several raft groups each
// group's table records which hash slots it owns, so that a slot can move from one group to
// another while clients run: every node holds a replica of every group and reads each group's
// ownership from it, with no routing table of its own to keep in step. The owner of a slot is
// the group that owns it (owned or frozen) with the highest epoch: a move gives the range a new
// epoch in its target before its source lets it go, so a node whose replica of the source lags
// still routes to the target.
//
// A move is four commands, each in its own entry:
//
//	FreezeSlots  (source): the range stops changing; every command on its keys is refused
//	                       (StatusSlotFrozen) and its proposer waits and routes again.
//	ImportSlots  (target): the range's keys as the source held them after the freeze, their
//	                       leases as the time they had left, and the fence floor: the target's
//	                       token counter rises to the source's, so every token it grants next is
//	                       above every token the source gave.
//	ReleaseSlots (source): the range's keys are deleted; the slots are recorded as gone.
//	AbortSlots   (target), then UnfreezeSlots (source): a move that cannot finish is undone;
//	                       an Abort is refused once the Import applied, so whoever recovers a
//	                       move learns from it, atomically, which way the move went.
//
// With no move ever applied, a group owns its default range (GroupOfSlot) at epoch 0 and its
// table keeps no per-slot records: nothing is checked at apply, since routing by the default
// ranges is exact.

// GroupOfSlot is the group that owns slot by default in a cluster of groups groups: the slots
// split into groups even ranges, in order.
func GroupOfSlot(slot, groups int) int { return slot * groups / HashSlots }

// DefaultSlots is the first and last slot group g owns by default (GroupOfSlot's inverse).
func DefaultSlots(g, groups int) (first, last int) {
	return (g*HashSlots + groups - 1) / groups, ((g+1)*HashSlots+groups-1)/groups - 1
}

// MaxGroups bounds a cluster's raft groups: a slot record names a group in 16 bits, and far
// fewer are useful (each is a raft group on every member).
const MaxGroups = 1 << 10

// SlotState is what one group's table says of one slot.
type SlotState uint8

// Slot states. Values are part of the snapshot encoding: never renumber.
const (
	// SlotNone: the group does not own the slot and never gave it away.
	SlotNone SlotState = 0
	// SlotOwned: the group serves the slot.
	SlotOwned SlotState = 1
	// SlotFrozen: the group owns the slot and is moving it to Peer (move Move): nothing in it
	// changes until the move is released or undone.
	SlotFrozen SlotState = 2
	// SlotGone: the group gave the slot to Peer at Epoch.
	SlotGone SlotState = 3
)

func (s SlotState) String() string {
	switch s {
	case SlotNone:
		return "none"
	case SlotOwned:
		return "owned"
	case SlotFrozen:
		return "frozen"
	case SlotGone:
		return "gone"
	}
	return fmt.Sprintf("slot-state(%d)", uint8(s))
}

// SlotRecord is one group's record of one slot.
type SlotRecord struct {
	State SlotState
	// Epoch rises with every move of the slot (and every undone one): the owner is whoever owns
	// it at the highest epoch.
	Epoch uint64
	// Peer is the group a frozen slot is moving to, or a gone slot went to.
	Peer int
	// Fenced is the highest epoch of a move into this group that was aborted here: an Import
	// at or below it is refused, whatever this group's state of the slot (an abort may come
	// while the group serves the slot, and the import after it has given the slot away).
	Fenced uint64
}

// serving reports whether the record claims the slot (owned, or frozen while it moves).
func (r SlotRecord) serving() bool { return r.State == SlotOwned || r.State == SlotFrozen }

// Move is a move of a slot range from one group to another: what every move command names
// (its Command.Key is EncodeMove of it).
type Move struct {
	// ID is chosen by the mover (nonzero): the Release and Unfreeze of a move act only on the
	// slots its own Freeze froze.
	ID          uint64
	First, Last int // the slot range, inclusive
	Source      int
	Target      int
	// Epoch is the range's epoch once the move is done: above the epoch of each of its slots in
	// the source before the freeze.
	Epoch uint64
}

// EncodeMove is a move as a command's key.
func EncodeMove(mv Move) []byte {
	b := binary.AppendUvarint(nil, mv.ID)
	for _, v := range []int{mv.First, mv.Last, mv.Source, mv.Target} {
		b = binary.AppendUvarint(b, uint64(v))
	}
	return binary.AppendUvarint(b, mv.Epoch)
}

// DecodeMove reads a move command's key, and checks it names a range and two groups.
func DecodeMove(b []byte) (Move, error) {
	d := decoder{b: b}
	var mv Move
	mv.ID = d.uvarint()
	var v [4]uint64
	for i := range v {
		v[i] = d.uvarint()
	}
	mv.Epoch = d.uvarint()
	switch {
	case d.err != nil:
		return Move{}, d.err
	case len(d.b) != 0:
		return Move{}, fmt.Errorf("%w: %d trailing bytes in a move", ErrCorrupt, len(d.b))
	case mv.ID == 0 || mv.Epoch == 0:
		return Move{}, fmt.Errorf("fsm: a move without an ID or an epoch")
	case v[0] > v[1] || v[1] >= HashSlots:
		return Move{}, fmt.Errorf("fsm: a move of slots %d-%d", v[0], v[1])
	case v[2] >= MaxGroups || v[3] >= MaxGroups || v[2] == v[3]:
		return Move{}, fmt.Errorf("fsm: a move from group %d to group %d", v[2], v[3])
	}
	mv.First, mv.Last, mv.Source, mv.Target = int(v[0]), int(v[1]), int(v[2]), int(v[3])
	return mv, nil
}

// Slots is one group's ownership of the hash slots. It is a value: a change makes a new
// record array, so a Snapshot or a reader on another goroutine keeps the one it was given.
type Slots struct {
	// group and groups are the group's number and the count of groups this node runs, layout
	// the count the cluster was created with (SetGroup): configuration, the same on every node
	// that runs the group, which says what the group owns by default.
	group, groups, layout int
	// recs is every slot's record, nil until a move first named the group: then each slot is
	// owned at epoch 0 when GroupOfSlot (of the layout) gives the group, none otherwise: a
	// group the cluster added (groupsplan.go) owns nothing.
	recs *[HashSlots]SlotRecord
	// moving is the move out of this group in flight (its slots frozen), nil when none.
	moving *Move
}

// Of is the group's record of slot.
func (s Slots) Of(slot int) SlotRecord {
	switch {
	case s.recs != nil:
		return s.recs[slot]
	case s.groups <= 1 || GroupOfSlot(slot, s.layout) == s.group: // one group owns every slot
		return SlotRecord{State: SlotOwned}
	}
	return SlotRecord{}
}

// Moving is the move out of this group that is in flight, if any: the node that leads the
// group next finishes or undoes it.
func (s Slots) Moving() (Move, bool) {
	if s.moving == nil {
		return Move{}, false
	}
	return *s.moving, true
}

// Moved reports whether a move ever named this group (its records are its own, not the
// default ranges').
func (s Slots) Moved() bool { return s.recs != nil }

// OwnerOf is the group that serves slot, given the Slots of each of groups groups (slotsOf),
// and its record there: the group that owns it or is moving it at the highest epoch. ok is
// false when no group claims it (only while replicas are far behind, or with a table from
// another cluster).
func OwnerOf(groups int, slotsOf func(g int) Slots, slot int) (owner int, rec SlotRecord, ok bool) {
	for g := range groups {
		r := slotsOf(g).Of(slot)
		if r.serving() && (!ok || r.Epoch > rec.Epoch) {
			owner, rec, ok = g, r, true
		}
	}
	return owner, rec, ok
}

// CheckOwnership reports whether the groups' tables (index = group; each table's Slots, read
// at its own moment, as a backup reads them) agree on who serves every slot: one group owns or
// is moving it, or a frozen source and the target its move names, which imported it at a later
// epoch (the move's recovery releases the source). A slot served by none, or by two otherwise,
// means the tables were read on both sides of a move: a backup reads them again.
func CheckOwnership(groups []Slots) error {
	for slot := 0; slot < HashSlots; slot++ {
		first, second, n := -1, -1, 0
		for g, s := range groups {
			if s.Of(slot).serving() {
				if n++; first < 0 {
					first = g
				} else {
					second = g
				}
			}
		}
		switch {
		case n == 1:
			continue
		case n == 2 && handingOver(groups, slot, first, second), n == 2 && handingOver(groups, slot, second, first):
			continue
		case n == 0:
			return fmt.Errorf("fsm: no group serves slot %d", slot)
		}
		return fmt.Errorf("fsm: %d groups serve slot %d", n, slot)
	}
	return nil
}

// handingOver reports whether group from is moving slot to group to, which imported it.
func handingOver(groups []Slots, slot, from, to int) bool {
	a, b := groups[from].Of(slot), groups[to].Of(slot)
	return a.State == SlotFrozen && a.Peer == to && b.State == SlotOwned && b.Epoch > a.Epoch
}

// ReleasedTo is the group the latest release of slot gave it to, given every group's Slots as
// in OwnerOf: where slot is served once that group's replica applies the import that preceded
// the release. ok is false when no group released it.
func ReleasedTo(groups int, slotsOf func(g int) Slots, slot int) (to int, ok bool) {
	var epoch uint64
	for g := range groups {
		if r := slotsOf(g).Of(slot); r.State == SlotGone && (!ok || r.Epoch > epoch) {
			to, epoch, ok = r.Peer, r.Epoch, true
		}
	}
	return to, ok
}

// SetGroup tells the table it is group group of a cluster that runs groups groups and was
// created with layout of them (0: groups): what it owns by default, before any move named it.
// Every node that runs the group calls it with the same group and layout, before the first
// entry applies and after every restore (it is configuration, not replicated state). groups
// differs between nodes only while a cluster converts to more groups, and only says whether
// the node runs one group (which owns every slot).
func (m *Machine) SetGroup(group, groups, layout int) {
	if layout <= 0 || layout > groups {
		layout = groups
	}
	m.slots.group, m.slots.groups, m.slots.layout = group, groups, layout
}

// Slots is the table's ownership of the hash slots.
func (m *Machine) Slots() Slots { return m.slots }

// Slots is the snapshot's ownership of the hash slots.
func (s *Snapshot) Slots() Slots { return s.slots }

// slotRefusal is the result of a command on key when this group does not serve key's slot now,
// and ok false when it does (or has never been part of a move: then routing is exact).
func (m *Machine) slotRefusal(key []byte) (Result, bool) {
	if m.slots.recs == nil {
		return Result{}, false
	}
	switch m.slots.recs[SlotOf(key)].State {
	case SlotOwned:
		return Result{}, false
	case SlotFrozen:
		return Result{Status: StatusSlotFrozen}, true
	}
	return Result{Status: StatusSlotMoved}, true
}

// refusedBySlots is the refusal of cmd when its key's slot is not this group's to change now,
// and whether it is refused: a Flush too waits while a move is in flight, since it would change
// the frozen keys.
func (m *Machine) refusedBySlots(cmd Command) (Result, bool) {
	switch {
	case checksSlot(cmd.Kind):
		return m.slotRefusal(cmd.Key)
	case cmd.Kind == KindFlush && m.slots.moving != nil:
		return Result{Status: StatusSlotFrozen}, true
	}
	return Result{}, false
}

// refuseEntryBySlots checks, before any of them applies, whether a command of an entry of
// several (cmds; out their results) is on a slot this group does not serve now: then the
// entry applies as nothing, that command's result the refusal and every other's
// StatusAborted, and it reports true. Checked first because an entry of commands that cannot
// otherwise fail takes no undo log (ApplyEntry); whether a slot is served does not depend on
// the entry's own commands (a move's commands are alone in theirs).
func (m *Machine) refuseEntryBySlots(out []Result, cmds []Command) bool {
	for i, c := range cmds {
		if c.Validate() != nil {
			continue // a no-op
		}
		r, refused := m.refusedBySlots(c)
		if !refused {
			continue
		}
		for j := range out {
			out[j] = Result{Status: StatusAborted}
		}
		out[i] = r
		return true
	}
	return false
}

// checksSlot reports whether a command of kind k acts on its key's slot (every table-key
// command: lock kinds and queues included, since their hidden keys are in their key's slot).
func checksSlot(k Kind) bool {
	switch k {
	case KindGrant, KindRelease, KindRenew, KindExpire, KindWrite, KindAcquire, KindEnqueue, KindServe:
		return true
	}
	return false
}

// isMoveKind reports whether k is one of a slot move's commands.
func isMoveKind(k Kind) bool {
	return k >= KindFreezeSlots && k <= KindUnfreezeSlots
}

// editSlots returns a copy of the group's records to change: the default ranges' when no move
// named the group before.
func (m *Machine) editSlots() *[HashSlots]SlotRecord {
	recs := new([HashSlots]SlotRecord)
	for slot := range recs {
		recs[slot] = m.slots.Of(slot)
	}
	return recs
}

// applyMove applies one of a move's commands (decoded and validated).
func (m *Machine) applyMove(index uint64, cmd Command) Result {
	// Only the move's own bytes decide, not the groups this node runs: while a cluster converts
	// to more groups its nodes run different numbers of them, and every replica must decide alike.
	// The mover checks that the target group runs.
	mv, err := DecodeMove(cmd.Key)
	if err != nil {
		return Result{Status: StatusConflict}
	}
	refused := Result{Status: StatusConflict}
	done := Result{Status: StatusSlots}
	switch cmd.Kind {
	case KindFreezeSlots:
		if mv.Source != m.slots.group || m.slots.moving != nil {
			return refused
		}
		for slot := mv.First; slot <= mv.Last; slot++ {
			if r := m.slots.Of(slot); r.State != SlotOwned || r.Epoch >= mv.Epoch {
				return refused
			}
		}
		recs := m.editSlots()
		for slot := mv.First; slot <= mv.Last; slot++ {
			recs[slot].State, recs[slot].Peer = SlotFrozen, mv.Target
		}
		m.slots.recs, m.slots.moving = recs, &mv
		return done

	case KindReleaseSlots, KindUnfreezeSlots:
		if mv.Source != m.slots.group {
			return refused
		}
		if cur := m.slots.moving; cur == nil || *cur != mv {
			if m.decided(mv, cmd.Kind) {
				return done // released or unfrozen before: a retry
			}
			return refused
		}
		recs := m.editSlots()
		for slot := mv.First; slot <= mv.Last; slot++ {
			if cmd.Kind == KindReleaseSlots {
				recs[slot] = SlotRecord{State: SlotGone, Epoch: mv.Epoch, Peer: mv.Target, Fenced: recs[slot].Fenced}
			} else {
				recs[slot] = SlotRecord{State: SlotOwned, Epoch: mv.Epoch, Fenced: recs[slot].Fenced}
			}
		}
		if cmd.Kind == KindReleaseSlots {
			m.deleteRange(mv.First, mv.Last)
		}
		m.slots.recs, m.slots.moving = recs, nil
		return done

	case KindImportSlots:
		if mv.Target != m.slots.group {
			return refused
		}
		for slot := mv.First; slot <= mv.Last; slot++ {
			if r := m.slots.Of(slot); r.serving() || r.Epoch >= mv.Epoch || r.Fenced >= mv.Epoch {
				return refused
			}
		}
		in, err := readRange(cmd.Owner, mv)
		if err != nil {
			return refused // the mover checked the bytes it read; a refusal changes nothing
		}
		recs := m.editSlots()
		for slot := mv.First; slot <= mv.Last; slot++ {
			recs[slot] = SlotRecord{State: SlotOwned, Epoch: mv.Epoch, Fenced: recs[slot].Fenced}
		}
		m.slots.recs = recs
		m.importRange(index, in)
		m.lastToken = max(m.lastToken, cmd.Token, in.lastToken)
		return done

	case KindAbortSlots:
		if mv.Target != m.slots.group {
			return refused
		}
		for slot := mv.First; slot <= mv.Last; slot++ {
			// Imported (served at the move's epoch), or imported and moved on since (a later
			// epoch): the move went through, and its source must release, never unfreeze.
			if r := m.slots.Of(slot); r.Epoch > mv.Epoch || r.Epoch == mv.Epoch && r.serving() {
				return refused
			}
		}
		recs := m.editSlots()
		for slot := mv.First; slot <= mv.Last; slot++ {
			recs[slot].Fenced = max(recs[slot].Fenced, mv.Epoch)
		}
		m.slots.recs = recs
		return done
	}
	return refused
}

// decided reports whether mv, no longer in flight here, ended as a step of kind would have
// ended it (Slots.Decided), so a retried step is a no-op rather than a refusal.
func (m *Machine) decided(mv Move, kind Kind) bool { return m.slots.Decided(mv, kind) }

// Decided reports whether every slot of mv ended as a step of kind ends it: gone to its target
// at its epoch (a Release), or owned at its epoch (an Unfreeze).
func (s Slots) Decided(mv Move, kind Kind) bool {
	want := SlotRecord{State: SlotGone, Epoch: mv.Epoch, Peer: mv.Target}
	if kind == KindUnfreezeSlots {
		want = SlotRecord{State: SlotOwned, Epoch: mv.Epoch}
	}
	for slot := mv.First; slot <= mv.Last; slot++ {
		r := s.Of(slot)
		if r.State != want.State || r.Epoch != want.Epoch || r.Peer != want.Peer {
			return false
		}
	}
	return true
}

// inRange reports whether table key k is in the slots first to last.
func inRange(k string, first, last int) bool {
	slot := SlotOf([]byte(k))
	return slot >= first && slot <= last
}

// deleteRange deletes every key of the slots first to last, hidden keys included. It walks the
// whole table: a move is rare, and the table keeps no index by slot.
func (m *Machine) deleteRange(first, last int) {
	var doomed []string
	m.table.Scan(func(k string, _ Lock) bool {
		if inRange(k, first, last) {
			doomed = append(doomed, k)
		}
		return true
	})
	for _, k := range doomed {
		m.del(k)
	}
}

// importRange stores every key of in, a moved range's keys: each lease is re-armed for the
// time it had left when the mover read it, from now on this node (late, never early), and
// set by this entry (index), as are the collections, so no guard a proposer saw in the source
// matches here by chance.
func (m *Machine) importRange(index uint64, in *Machine) {
	in.table.Scan(func(k string, l Lock) bool {
		if l.LeaseMs > 0 {
			l.LeaseRev = index
		}
		l.Deadline = m.deadline(l.LeaseMs)
		if l.Value != nil {
			v := *l.Value
			v.Rev = index
			l.Value = &v
		}
		m.set(k, l)
		return true
	})
}

// MaxMoveBytes bounds what one ImportSlots carries: a raft entry, sent to every member and
// kept in the log until a snapshot. A range that holds more moves in smaller ranges.
const MaxMoveBytes = 32 << 20

// RangeSnapshot is the part of the snapshot in the slots first to last (its keys, hidden keys
// included) and its token counter, the fence floor of a move: what a mover reads from the
// source after the freeze.
func (s *Snapshot) RangeSnapshot(first, last int) *Snapshot {
	part := &Snapshot{table: newLockTable(s.table.origins), members: map[string]string{}, scripts: map[string]string{},
		users: map[string]string{}, libraries: emptyLibraries, lastToken: s.lastToken, format: FormatFunctions}
	s.table.Scan(func(k string, l Lock) bool {
		if inRange(k, first, last) {
			part.table.Set(k, l)
		}
		return true
	})
	return part
}

// WithCounter is a copy of the snapshot whose token counter is t.
func (s *Snapshot) WithCounter(t Token) *Snapshot {
	c := *s
	c.lastToken = t
	return &c
}

// EncodeRange is what an ImportSlots carries of part (RangeSnapshot, its leases as the time
// they have left: WithLeases): its keys in snapshot layout.
func EncodeRange(part *Snapshot) ([]byte, error) {
	var b bytes.Buffer
	_, err := part.writeVersion(&b, snapshotV8)
	return b.Bytes(), err
}

// readRange decodes an ImportSlots' keys and checks each is in the move's range and nothing
// else came with them.
func readRange(b []byte, mv Move) (*Machine, error) {
	in, err := RestoreAt(bytes.NewReader(b), 0)
	if err != nil {
		return nil, err
	}
	if len(in.members) != 0 || len(in.scripts) != 0 || len(in.users) != 0 || in.libraries.Len() != 0 {
		return nil, fmt.Errorf("%w: a moved range with more than keys", ErrCorrupt)
	}
	var stray string
	in.table.Scan(func(k string, _ Lock) bool {
		if !inRange(k, mv.First, mv.Last) {
			stray = k
		}
		return stray == ""
	})
	if stray != "" {
		return nil, fmt.Errorf("%w: key %q is not in slots %d-%d", ErrCorrupt, stray, mv.First, mv.Last)
	}
	return in, nil
}

// appendSlots appends a group's slot records (snapshotV9): a flag byte, 0 for a table that keeps
// none (its default ranges, as its layout says on each node), else 1 and the records as runs of
// equal records: the count of runs, then each run's last slot, state, epoch, peer and fence
// epoch; then the move in flight, if any (a flag byte, then EncodeMove of it, length-prefixed).
func appendSlots(buf []byte, s Slots) []byte {
	if s.recs == nil {
		return append(buf, 0, 0) // no records, no move (a move makes records)
	}
	buf = append(buf, 1)
	type run struct {
		last int
		rec  SlotRecord
	}
	var runs []run
	for slot := 0; slot < HashSlots; slot++ {
		r := s.Of(slot)
		if n := len(runs); n > 0 && runs[n-1].rec == r {
			runs[n-1].last = slot
			continue
		}
		runs = append(runs, run{slot, r})
	}
	buf = binary.AppendUvarint(buf, uint64(len(runs)))
	for _, r := range runs {
		buf = binary.AppendUvarint(buf, uint64(r.last))
		buf = append(buf, byte(r.rec.State))
		buf = binary.AppendUvarint(buf, r.rec.Epoch)
		buf = binary.AppendUvarint(buf, uint64(r.rec.Peer))
		buf = binary.AppendUvarint(buf, r.rec.Fenced)
	}
	if s.moving == nil {
		return append(buf, 0)
	}
	return appendBytes(append(buf, 1), EncodeMove(*s.moving))
}

// slots reads what appendSlots wrote into s's records.
func (d *streamDecoder) slots(s *Slots) error {
	kept := d.read(1)
	if d.err != nil {
		return d.err
	}
	switch kept[0] {
	case 0:
		if moving := d.read(1); d.err != nil || moving[0] != 0 {
			return fmt.Errorf("%w: snapshot slots without records but moving", ErrCorrupt)
		}
		return nil
	case 1:
	default:
		return fmt.Errorf("%w: snapshot slot records flag %d", ErrCorrupt, kept[0])
	}
	recs := new([HashSlots]SlotRecord)
	runs := d.uvarint()
	next := 0
	for i := uint64(0); i < runs && d.err == nil; i++ {
		last := d.uvarint()
		b := d.read(1)
		epoch, peer, fenced := d.uvarint(), d.uvarint(), d.uvarint()
		if d.err != nil {
			break
		}
		state := SlotState(b[0])
		rec := SlotRecord{State: state, Epoch: epoch, Fenced: fenced}
		if last < uint64(next) || last >= HashSlots || state > SlotGone || peer >= MaxGroups {
			return fmt.Errorf("%w: snapshot slot run %d", ErrCorrupt, i)
		}
		rec.Peer = int(peer)
		for ; next <= int(last); next++ {
			recs[next] = rec
		}
	}
	moving := d.read(1)
	if d.err != nil {
		return d.err
	}
	if next != HashSlots || moving[0] > 1 {
		return fmt.Errorf("%w: snapshot slot records end at %d", ErrCorrupt, next)
	}
	s.recs = recs
	if moving[0] == 1 {
		mv, err := DecodeMove(d.bytes())
		if d.err != nil {
			return d.err
		}
		if err != nil {
			return fmt.Errorf("%w: snapshot move: %v", ErrCorrupt, err)
		}
		s.moving = &mv
	}
	return nil
}
