package fsm_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// moveFixture is a cluster of two groups' tables on one node: src (group 0) and dst (group 1),
// with keys of one slot of group 0 to move, held in every way a key can be.
type moveFixture struct {
	src, dst   *fsm.Machine
	si, di     uint64 // the next index of each group's log
	slot       int
	lock, coll string // table keys in slot: a lock with a lease, a hash
	shared     string // a shared lock's key in slot
	other      string // a key of group 0 outside slot
	lockToken  fsm.Token
	waiterSeq  fsm.Token
}

// key0 is the table key of key in database 0.
func key0(key string) string { return string(fsm.DBKey(0, []byte(key))) }

func newMoveFixture(t *testing.T) *moveFixture {
	t.Helper()
	f := &moveFixture{src: fsm.New(), dst: fsm.New(), si: 1, di: 1}
	f.src.SetGroup(0, 2, 0)
	f.dst.SetGroup(1, 2, 0)
	f.src.NoteFormat(fsm.FormatFunctions)
	f.dst.NoteFormat(fsm.FormatFunctions)
	f.lock, f.coll, f.shared = key0("{user1}lock"), key0("{user1}hash"), key0("{user1}shared")
	f.slot = fsm.KeySlot([]byte("user1"))
	if fsm.GroupOfSlot(f.slot, 2) != 0 {
		t.Fatalf("slot %d is not group 0's", f.slot)
	}
	for i := 0; ; i++ {
		k := fmt.Sprintf("other%d", i)
		if s := fsm.KeySlot([]byte(k)); s != f.slot && fsm.GroupOfSlot(s, 2) == 0 {
			f.other = key0(k)
			break
		}
	}
	// The source hands out many tokens, the target few: the floor must lift the target's.
	for range 20 {
		f.si = applyAll(t, f.src, f.si, []fsm.Command{grant(f.other, "o", 0, matchAny)})
	}
	f.di = applyAll(t, f.dst, f.di, []fsm.Command{grant(key0("dstkey"), "d", 0, matchAny)})

	r := f.apply(t, f.src, grant(f.lock, "holder", 60_000, matchFree))
	f.lockToken = r.Token
	f.apply(t, f.src, fsm.Command{Kind: fsm.KindWrite, Key: []byte(f.coll), Match: matchAbsent,
		Value: &fsm.Collection{Type: fsm.TypeHash, Elems: [][]byte{[]byte("f"), []byte("v")}}})
	f.apply(t, f.src, fsm.Command{Kind: fsm.KindAcquire, Key: []byte(f.shared), Owner: []byte("reader"), LeaseMs: 30_000})
	w := f.apply(t, f.src, fsm.Command{Kind: fsm.KindEnqueue, Key: []byte(f.lock), LeaseMs: 10_000,
		Owner: fsm.EncodeWaiter(fsm.WaiterRequest{Mode: fsm.WaitLock, TTL: 5000, Owner: []byte("next")})})
	if w.Status != fsm.StatusQueued {
		t.Fatalf("enqueue: %v", w.Status)
	}
	f.waiterSeq = w.Token
	return f
}

// apply applies cmd in the next entry of m's log (src or dst).
func (f *moveFixture) apply(t *testing.T, m *fsm.Machine, cmd fsm.Command) fsm.Result {
	t.Helper()
	if err := cmd.Validate(); err != nil {
		t.Fatalf("%v is invalid: %v", cmd.Kind, err)
	}
	idx := &f.si
	if m == f.dst {
		idx = &f.di
	}
	r := m.Apply(*idx, cmd)
	*idx++
	return r
}

func (f *moveFixture) move(id, epoch uint64) fsm.Move {
	return fsm.Move{ID: id, First: f.slot, Last: f.slot, Source: 0, Target: 1, Epoch: epoch}
}

// owner is the group that serves the fixture's slot, by the two tables.
func (f *moveFixture) owner() (int, fsm.SlotRecord, bool) {
	return fsm.OwnerOf(2, func(g int) fsm.Slots { return []*fsm.Machine{f.src, f.dst}[g].Slots() }, f.slot)
}

func moveCmd(kind fsm.Kind, mv fsm.Move) fsm.Command {
	return fsm.Command{Kind: kind, Key: fsm.EncodeMove(mv)}
}

// importOf is the ImportSlots of mv with the range as src holds it now, each lease left at
// leftMs.
func importOf(t *testing.T, src *fsm.Machine, mv fsm.Move, leftMs uint64) fsm.Command {
	t.Helper()
	part := src.Snapshot().RangeSnapshot(mv.First, mv.Last).WithLeases(func(string, fsm.Lock) uint64 { return leftMs })
	b, err := fsm.EncodeRange(part)
	if err != nil {
		t.Fatal(err)
	}
	return fsm.Command{Kind: fsm.KindImportSlots, Key: fsm.EncodeMove(mv), Owner: b, Token: part.LastToken()}
}

func rangeKeys(m *fsm.Machine, slot int) map[string]fsm.Lock {
	out := map[string]fsm.Lock{}
	m.Scan(func(k string, l fsm.Lock) bool {
		if fsm.SlotOf([]byte(k)) == slot {
			out[k] = l
		}
		return true
	})
	return out
}

func TestSlotMoveCarriesKeysTokensAndTheFloor(t *testing.T) {
	f := newMoveFixture(t)
	before := rangeKeys(f.src, f.slot)
	if len(before) != 5 { // the lock, the hash, the shared lock's key and its holder, the waiter
		t.Fatalf("range keys before: %d, want 5", len(before))
	}
	mv := f.move(7, 1)
	if r := f.apply(t, f.src, moveCmd(fsm.KindFreezeSlots, mv)); r.Status != fsm.StatusSlots {
		t.Fatalf("freeze: %v", r.Status)
	}
	// Frozen: nothing of the range changes, not even an expiry; the rest of the group serves.
	for _, c := range []fsm.Command{
		grant(key0("{user1}new"), "x", 0, matchFree),
		release(f.lock, byToken(f.lockToken)),
		expire(f.lock, f.lockToken, 0),
		{Kind: fsm.KindFlush},
	} {
		if r := f.apply(t, f.src, c); r.Status != fsm.StatusSlotFrozen {
			t.Errorf("%v while frozen: %v, want slot-frozen", c.Kind, r.Status)
		}
	}
	if r := f.apply(t, f.src, grant(f.other, "o2", 0, matchAny)); r.Status != fsm.StatusGranted {
		t.Errorf("a grant outside the range: %v", r.Status)
	}
	if r := f.apply(t, f.src, moveCmd(fsm.KindFreezeSlots, fsm.Move{ID: 8, First: 0, Last: 0, Source: 0, Target: 1, Epoch: 1})); r.Status != fsm.StatusConflict {
		t.Errorf("a second move while one is in flight: %v", r.Status)
	}
	if got := rangeKeys(f.src, f.slot); diffTables(got, before) != "" {
		t.Errorf("the frozen range changed: %s", diffTables(got, before))
	}

	imp := importOf(t, f.src, mv, 1234)
	floor := imp.Token
	if floor != f.src.LastToken() || floor <= f.dst.LastToken() {
		t.Fatalf("floor %d, source counter %d, target counter %d", floor, f.src.LastToken(), f.dst.LastToken())
	}
	importIndex := f.di
	if r := f.apply(t, f.dst, imp); r.Status != fsm.StatusSlots {
		t.Fatalf("import: %v", r.Status)
	}
	if f.dst.LastToken() < floor {
		t.Errorf("target counter %d below the floor %d", f.dst.LastToken(), floor)
	}
	got := rangeKeys(f.dst, f.slot)
	if len(got) != len(before) {
		t.Fatalf("target holds %d keys of the range, source held %d", len(got), len(before))
	}
	for k, want := range before {
		l := got[k]
		if l.Token != want.Token || string(l.Owner) != string(want.Owner) || l.Delay != want.Delay {
			t.Errorf("%q moved as %+v, was %+v", k, l, want)
		}
		if want.LeaseMs > 0 && (l.LeaseMs != 1234 || l.LeaseRev != importIndex) {
			t.Errorf("%q lease %d ms set at %d, want the 1234 ms it had left, set by the import at %d", k, l.LeaseMs, l.LeaseRev, importIndex)
		}
		if want.Value != nil && (l.Value == nil || l.Value.Rev != importIndex || l.Value.Len() != want.Value.Len()) {
			t.Errorf("%q collection %+v, want %+v at rev %d", k, l.Value, want.Value, importIndex)
		}
	}
	var queued []fsm.Token
	f.dst.Waiters([]byte(f.lock), func(w fsm.Waiter) bool {
		queued = append(queued, w.Seq)
		return true
	})
	if len(queued) != 1 || queued[0] != f.waiterSeq {
		t.Errorf("the target's queue holds %v, want the waiter's place %d", queued, f.waiterSeq)
	}
	// Every token the target grants now, for the moved keys or any other, is above every token
	// the source gave.
	if r := f.apply(t, f.dst, grant(key0("{user1}new"), "x", 0, matchFree)); r.Status != fsm.StatusGranted || r.Token <= floor {
		t.Errorf("a grant in the target after the import: %v token %d, floor %d", r.Status, r.Token, floor)
	}
	owner, rec, ok := f.owner()
	if !ok || owner != 1 || rec.Epoch != 1 {
		t.Errorf("owner of the slot after the import: group %d %+v %v, want group 1 at epoch 1", owner, rec, ok)
	}
	if r := f.apply(t, f.dst, moveCmd(fsm.KindAbortSlots, mv)); r.Status != fsm.StatusConflict {
		t.Errorf("an abort after the import: %v, want conflict (the move went through)", r.Status)
	}

	if r := f.apply(t, f.src, moveCmd(fsm.KindReleaseSlots, mv)); r.Status != fsm.StatusSlots {
		t.Fatalf("release: %v", r.Status)
	}
	if n := len(rangeKeys(f.src, f.slot)); n != 0 {
		t.Errorf("the source keeps %d keys of the released range", n)
	}
	if _, ok := f.src.Get([]byte(f.other)); !ok {
		t.Errorf("the release deleted a key outside the range")
	}
	if r := f.apply(t, f.src, grant(f.lock, "late", 0, matchFree)); r.Status != fsm.StatusSlotMoved {
		t.Errorf("a grant in the source after the release: %v, want slot-moved", r.Status)
	}
	if r := f.apply(t, f.src, moveCmd(fsm.KindReleaseSlots, mv)); r.Status != fsm.StatusSlots {
		t.Errorf("a retried release: %v, want slots", r.Status)
	}
	if r := f.apply(t, f.src, moveCmd(fsm.KindUnfreezeSlots, mv)); r.Status != fsm.StatusConflict {
		t.Errorf("an unfreeze after the release: %v, want conflict", r.Status)
	}
	if _, moving := f.src.Slots().Moving(); moving {
		t.Errorf("the source still has a move in flight")
	}
	// The slot moves back: the source's counter is lifted to the target's in turn.
	back := fsm.Move{ID: 9, First: f.slot, Last: f.slot, Source: 1, Target: 0, Epoch: 2}
	f.apply(t, f.dst, moveCmd(fsm.KindFreezeSlots, back))
	backImp := importOf(t, f.dst, back, 500)
	if r := f.apply(t, f.src, backImp); r.Status != fsm.StatusSlots {
		t.Fatalf("import back: %v", r.Status)
	}
	f.apply(t, f.dst, moveCmd(fsm.KindReleaseSlots, back))
	if r := f.apply(t, f.src, grant(key0("{user1}newer"), "x", 0, matchFree)); r.Status != fsm.StatusGranted || r.Token <= backImp.Token {
		t.Errorf("a grant after the move back: %v token %d, floor %d", r.Status, r.Token, backImp.Token)
	}
	if owner, _, _ := f.owner(); owner != 0 {
		t.Errorf("owner after the move back: group %d", owner)
	}
}

func TestSlotMoveAbortedThenRetried(t *testing.T) {
	f := newMoveFixture(t)
	mv := f.move(7, 1)
	f.apply(t, f.src, moveCmd(fsm.KindFreezeSlots, mv))
	imp := importOf(t, f.src, mv, 1000)
	if r := f.apply(t, f.dst, moveCmd(fsm.KindAbortSlots, mv)); r.Status != fsm.StatusSlots {
		t.Fatalf("abort: %v", r.Status)
	}
	if r := f.apply(t, f.dst, imp); r.Status != fsm.StatusConflict {
		t.Fatalf("an import after its abort: %v, want conflict", r.Status)
	}
	if n := len(rangeKeys(f.dst, f.slot)); n != 0 {
		t.Errorf("a refused import stored %d keys", n)
	}
	if r := f.apply(t, f.src, moveCmd(fsm.KindUnfreezeSlots, mv)); r.Status != fsm.StatusSlots {
		t.Fatalf("unfreeze: %v", r.Status)
	}
	if r := f.apply(t, f.src, release(f.lock, byToken(f.lockToken))); r.Status != fsm.StatusReleased {
		t.Errorf("a release after the unfreeze: %v", r.Status)
	}
	owner, rec, _ := f.owner()
	if owner != 0 || rec.Epoch != 1 {
		t.Errorf("owner after the undone move: group %d %+v, want group 0 at epoch 1", owner, rec)
	}
	// The next move needs an epoch above the undone one's.
	if r := f.apply(t, f.src, moveCmd(fsm.KindFreezeSlots, f.move(8, 1))); r.Status != fsm.StatusConflict {
		t.Errorf("a freeze at the undone move's epoch: %v, want conflict", r.Status)
	}
	mv2 := f.move(8, 2)
	f.apply(t, f.src, moveCmd(fsm.KindFreezeSlots, mv2))
	if r := f.apply(t, f.dst, importOf(t, f.src, mv2, 1000)); r.Status != fsm.StatusSlots {
		t.Errorf("the retried move's import: %v", r.Status)
	}
}

func TestSlotOwnershipInSnapshots(t *testing.T) {
	f := newMoveFixture(t)
	if v := snapshotBytes(t, f.src)[4]; v != 8 {
		t.Errorf("a table no move named wrote snapshot version %d, want 8", v)
	}
	mv := f.move(7, 1)
	f.apply(t, f.src, moveCmd(fsm.KindFreezeSlots, mv))
	b := snapshotBytes(t, f.src)
	if b[4] != 9 {
		t.Fatalf("snapshot version %d, want 9", b[4])
	}
	m := restore(t, b)
	m.SetGroup(0, 2, 0)
	if got, ok := m.Slots().Moving(); !ok || got != mv {
		t.Errorf("restored move in flight %+v %v, want %+v", got, ok, mv)
	}
	for _, slot := range []int{0, f.slot, 8191, 8192, 16383} {
		if got, want := m.Slots().Of(slot), f.src.Slots().Of(slot); got != want {
			t.Errorf("slot %d restored as %+v, want %+v", slot, got, want)
		}
	}
	if r := m.Apply(f.si, grant(f.lock, "x", 0, matchFree)); r.Status != fsm.StatusSlotFrozen {
		t.Errorf("a grant in the restored frozen range: %v", r.Status)
	}
	// Corrupt slot records are refused, not half-read.
	for i := len(b) - 12; i < len(b)-4; i++ {
		c := append([]byte(nil), b...)
		c[i] ^= 0xff
		if _, err := fsm.Restore(bytes.NewReader(c)); err == nil {
			t.Errorf("a snapshot with byte %d flipped restored", i)
		}
	}
}

func TestSlotMoveRefusals(t *testing.T) {
	f := newMoveFixture(t)
	mv := f.move(7, 1)
	// The import's keys must all be in its range.
	f.apply(t, f.src, moveCmd(fsm.KindFreezeSlots, mv))
	wide := importOf(t, f.src, fsm.Move{ID: 7, First: 0, Last: 8191, Source: 0, Target: 1, Epoch: 1}, 1000)
	wide.Key = fsm.EncodeMove(mv)
	before := table(f.dst)
	if r := f.apply(t, f.dst, wide); r.Status != fsm.StatusConflict {
		t.Errorf("an import with keys outside its range: %v", r.Status)
	}
	if d := diffTables(table(f.dst), before); d != "" {
		t.Errorf("a refused import changed the table: %s", d)
	}
	// Only the move's own source and target act on it.
	if r := f.apply(t, f.dst, moveCmd(fsm.KindReleaseSlots, mv)); r.Status != fsm.StatusConflict {
		t.Errorf("a release in the target: %v", r.Status)
	}
	if r := f.apply(t, f.src, moveCmd(fsm.KindReleaseSlots, f.move(99, 1))); r.Status != fsm.StatusConflict {
		t.Errorf("a release of another move: %v", r.Status)
	}
	// A move command in an entry whose other command fails changes nothing.
	g := fsm.New()
	g.SetGroup(0, 2, 0)
	res := g.ApplyEntry(nil, 1, []fsm.Command{moveCmd(fsm.KindFreezeSlots, mv), release(f.lock, byToken(5))})
	if !fsm.Aborted(res) {
		t.Fatalf("results %v, want aborted", res)
	}
	if g.Slots().Moved() {
		t.Errorf("an aborted entry's freeze stayed")
	}
	// A node that still runs one group while its cluster converts to more decides a move as
	// the nodes that run every group do: only the move's bytes and the table count.
	one, two := fsm.New(), fsm.New()
	one.SetGroup(0, 1, 0)
	two.SetGroup(0, 2, 1)
	r1, r2 := one.Apply(1, moveCmd(fsm.KindFreezeSlots, mv)), two.Apply(1, moveCmd(fsm.KindFreezeSlots, mv))
	if r1.Status != r2.Status || r1.Status != fsm.StatusSlots {
		t.Errorf("a freeze on a node of one group: %v, of two: %v", r1, r2)
	}
	// Malformed moves are invalid commands.
	for _, bad := range []fsm.Move{
		{ID: 0, First: 1, Last: 2, Source: 0, Target: 1, Epoch: 1},
		{ID: 1, First: 3, Last: 2, Source: 0, Target: 1, Epoch: 1},
		{ID: 1, First: 1, Last: fsm.HashSlots, Source: 0, Target: 1, Epoch: 1},
		{ID: 1, First: 1, Last: 2, Source: 1, Target: 1, Epoch: 1},
		{ID: 1, First: 1, Last: 2, Source: 0, Target: 1, Epoch: 0},
	} {
		if err := moveCmd(fsm.KindFreezeSlots, bad).Validate(); err == nil {
			t.Errorf("move %+v validated", bad)
		}
	}
	c := moveCmd(fsm.KindFreezeSlots, mv)
	c.Owner = []byte("x")
	if c.Validate() == nil {
		t.Errorf("a freeze with keys validated")
	}
}

func TestSlotMoveCommandsInTheLog(t *testing.T) {
	f := newMoveFixture(t)
	mv := f.move(7, 1)
	f.apply(t, f.src, moveCmd(fsm.KindFreezeSlots, mv))
	imp := importOf(t, f.src, mv, 1000)
	if got := fsm.NeedsFormat([]fsm.Command{imp}); got != fsm.FormatFunctions {
		t.Errorf("an import needs format %d, want %d", got, fsm.FormatFunctions)
	}
	back, err := fsm.DecodeEntry(nil, encode(imp))
	if err != nil || len(back) != 1 {
		t.Fatalf("decode: %v", err)
	}
	if back[0].Kind != fsm.KindImportSlots || back[0].Token != imp.Token || string(back[0].Owner) != string(imp.Owner) {
		t.Errorf("decoded %v floor %d, want %v floor %d", back[0].Kind, back[0].Token, imp.Kind, imp.Token)
	}
	if got, err := fsm.DecodeMove(back[0].Key); err != nil || got != mv {
		t.Errorf("decoded move %+v %v, want %+v", got, err, mv)
	}
}

// A move whose import went through and whose range then moved on from the target is decided
// as moved by a late abort: the abort is refused, so the source releases rather than unfreezes
// (which would have made it serve the slot beside the range's new owner).
func TestSlotMoveLateAbortAfterAnOnwardMove(t *testing.T) {
	f := newMoveFixture(t)
	third := fsm.New() // a third group, which owns none of the slots by default
	third.SetGroup(2, 3, 0)
	third.NoteFormat(fsm.FormatFunctions)
	mv := f.move(7, 1)
	f.apply(t, f.src, moveCmd(fsm.KindFreezeSlots, mv))
	f.apply(t, f.dst, importOf(t, f.src, mv, 1000))
	// The source's mover stops here; the range moves on from the target to a third group.
	on := fsm.Move{ID: 8, First: f.slot, Last: f.slot, Source: 1, Target: 2, Epoch: 2}
	f.apply(t, f.dst, moveCmd(fsm.KindFreezeSlots, on))
	if r := third.Apply(1, importOf(t, f.dst, on, 1000)); r.Status != fsm.StatusSlots {
		t.Fatalf("the onward import: %v", r.Status)
	}
	f.apply(t, f.dst, moveCmd(fsm.KindReleaseSlots, on))
	if r := f.apply(t, f.dst, moveCmd(fsm.KindAbortSlots, mv)); r.Status != fsm.StatusConflict {
		t.Fatalf("a late abort of the first move: %v, want conflict (it went through)", r.Status)
	}
	if r := f.apply(t, f.src, moveCmd(fsm.KindReleaseSlots, mv)); r.Status != fsm.StatusSlots {
		t.Fatalf("the source's release: %v", r.Status)
	}
	if r := f.apply(t, f.src, grant(f.lock, "x", 0, matchFree)); r.Status != fsm.StatusSlotMoved {
		t.Errorf("a grant in the source after all: %v, want slot-moved", r.Status)
	}
}

// An entry of several commands, one of them on a frozen slot, applies as nothing, even when
// none of its commands has a guard that can fail otherwise.
func TestSlotRefusalAbortsTheWholeEntry(t *testing.T) {
	f := newMoveFixture(t)
	f.apply(t, f.src, moveCmd(fsm.KindFreezeSlots, f.move(7, 1)))
	before := table(f.src)
	res := f.src.ApplyEntry(nil, f.si, []fsm.Command{grant(f.other, "a", 0, matchAny), grant(key0("{user1}b"), "b", 0, matchAny)})
	f.si++
	if !fsm.Aborted(res) || res[1].Status != fsm.StatusSlotFrozen {
		t.Fatalf("results %v, want the first aborted and the second slot-frozen", res)
	}
	if d := diffTables(table(f.src), before); d != "" {
		t.Errorf("the entry changed the table: %s", d)
	}
}

// A retried unfreeze (its first attempt's outcome unknown to the mover) is a no-op, not a
// refusal.
func TestSlotMoveUnfreezeRetried(t *testing.T) {
	f := newMoveFixture(t)
	mv := f.move(7, 1)
	f.apply(t, f.src, moveCmd(fsm.KindFreezeSlots, mv))
	f.apply(t, f.dst, moveCmd(fsm.KindAbortSlots, mv))
	for i := range 2 {
		if r := f.apply(t, f.src, moveCmd(fsm.KindUnfreezeSlots, mv)); r.Status != fsm.StatusSlots {
			t.Errorf("unfreeze %d: %v", i, r.Status)
		}
	}
	if r := f.apply(t, f.dst, moveCmd(fsm.KindAbortSlots, mv)); r.Status != fsm.StatusSlots {
		t.Errorf("a retried abort: %v", r.Status)
	}
}

// A move back (target to source) started while the source still has the first move frozen:
// its import is refused there, its abort fences the source even though the source serves the
// slot, the new owner unfreezes, the first move is released; a late copy of the aborted
// import must not then make the old source a second owner of the slot.
func TestSlotMoveAbortFencesALateImport(t *testing.T) {
	f := newMoveFixture(t)
	m1 := f.move(7, 1)
	f.apply(t, f.src, moveCmd(fsm.KindFreezeSlots, m1))
	if r := f.apply(t, f.dst, importOf(t, f.src, m1, 1000)); r.Status != fsm.StatusSlots {
		t.Fatalf("import m1: %v", r.Status)
	}
	m2 := fsm.Move{ID: 9, First: f.slot, Last: f.slot, Source: 1, Target: 0, Epoch: 2}
	if r := f.apply(t, f.dst, moveCmd(fsm.KindFreezeSlots, m2)); r.Status != fsm.StatusSlots {
		t.Fatalf("freeze m2: %v", r.Status)
	}
	imp2 := importOf(t, f.dst, m2, 1000)
	if r := f.apply(t, f.src, imp2); r.Status != fsm.StatusConflict {
		t.Fatalf("import m2 while the old source is frozen: %v", r.Status)
	}
	if r := f.apply(t, f.src, moveCmd(fsm.KindAbortSlots, m2)); r.Status != fsm.StatusSlots {
		t.Fatalf("abort m2: %v", r.Status)
	}
	f.apply(t, f.dst, moveCmd(fsm.KindUnfreezeSlots, m2))
	if r := f.apply(t, f.dst, moveCmd(fsm.KindAbortSlots, m1)); r.Status != fsm.StatusConflict {
		t.Fatalf("abort m1: %v, want conflict (it went through)", r.Status)
	}
	f.apply(t, f.src, moveCmd(fsm.KindReleaseSlots, m1))
	if r := f.apply(t, f.src, imp2); r.Status != fsm.StatusConflict {
		t.Errorf("a late import of the aborted m2: %v, want conflict; the old source %+v, the owner %+v",
			r.Status, f.src.Slots().Of(f.slot), f.dst.Slots().Of(f.slot))
	}
	if owner, rec, _ := f.owner(); owner != 1 || rec.State != fsm.SlotOwned {
		t.Errorf("owner %d %+v, want group 1", owner, rec)
	}
}

// CheckOwnership accepts the tables of a moment (read during a move too) and refuses those read
// on both sides of a move: the slot in two groups, or in none.
func TestCheckOwnershipAcrossAMove(t *testing.T) {
	f := newMoveFixture(t)
	owners := func(a, b *fsm.Machine) error { return fsm.CheckOwnership([]fsm.Slots{a.Slots(), b.Slots()}) }
	before := fsm.New()
	before.SetGroup(1, 2, 0) // the target as read before the import: a fresh table of group 1
	srcBefore := restore(t, snapshotBytes(t, f.src))
	srcBefore.SetGroup(0, 2, 0)
	if err := owners(f.src, f.dst); err != nil {
		t.Errorf("before the move: %v", err)
	}
	mv := f.move(7, 1)
	f.apply(t, f.src, moveCmd(fsm.KindFreezeSlots, mv))
	if err := owners(f.src, before); err != nil {
		t.Errorf("frozen, not imported: %v", err)
	}
	f.apply(t, f.dst, importOf(t, f.src, mv, 1000))
	if err := owners(f.src, f.dst); err != nil {
		t.Errorf("frozen and imported: %v", err)
	}
	if err := owners(srcBefore, f.dst); err == nil {
		t.Errorf("the source read before the freeze and the target after the import passed")
	}
	f.apply(t, f.src, moveCmd(fsm.KindReleaseSlots, mv))
	if err := owners(f.src, before); err == nil {
		t.Errorf("the source read after the release and the target before the import passed")
	}
	if err := owners(f.src, f.dst); err != nil {
		t.Errorf("after the move: %v", err)
	}
}
