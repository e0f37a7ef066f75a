package powerloss

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/raft"
)

// What a node's stores acknowledged, across its incarnations, and the wrappers that record it.
// A store call counts as acknowledged when it returned success while the node's power was on
// (fence.up after the call): its syncs then ran before any crash clone of the node's
// filesystem, so every clone taken later must hold what it wrote. Calls still running when the
// power goes are attempts: a clone may hold them or not.

// fence is one incarnation's power switch. Everything the incarnation does that others could
// observe (a reply to a peer, an acknowledgement to a client, a record of a durable write)
// counts only if it happened while the power was on, checked under the read lock; cut takes the
// write lock, so a crash clone taken inside it comes after every such observation.
type fence struct {
	mu   sync.RWMutex
	dead bool
}

// up runs fn (if any) and reports true if the power is on; false, without running fn, if it
// is off.
func (f *fence) up(fn func()) bool {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if f.dead {
		return false
	}
	if fn != nil {
		fn()
	}
	return true
}

// stableKey is what a node's stable store acknowledged for one key.
type stableKey struct {
	acked    []byte   // the last acknowledged value; nil if none
	attempts [][]byte // values set since, not (yet) acknowledged
}

// durability is one node's record of its acknowledged writes, kept across its incarnations,
// and what its votes were.
type durability struct {
	id string
	mu struct {
		sync.Mutex
		stable   map[string]*stableKey
		voteTerm uint64            // the last acknowledged LastVoteTerm, which a vote pairs with
		votes    map[uint64]string // term -> candidate this node acknowledged a vote for
		logLast  uint64            // the last log index acknowledged and not cut off since
		logTerm  uint64            // its entry's term, 0 when unknown (after a tail cut)
		cutting  bool              // a tail cut runs,
		cutFloor uint64            // and this is the index before its first
		snapshot uint64            // the newest acknowledged snapshot's last index
	}
	// storeChecks: checkRestored reports lost writes (else only a log raft cannot replay).
	storeChecks bool
	violations  func(format string, args ...any)
}

func newDurability(id string, storeChecks bool, report func(format string, args ...any)) *durability {
	d := &durability{id: id, storeChecks: storeChecks, violations: report}
	d.mu.stable = map[string]*stableKey{}
	d.mu.votes = map[uint64]string{}
	return d
}

// Raft's stable keys (raft.go): a vote is LastVoteTerm then LastVoteCand.
const (
	keyCurrentTerm  = "CurrentTerm"
	keyLastVoteTerm = "LastVoteTerm"
	keyLastVoteCand = "LastVoteCand"
)

func (d *durability) attemptSet(key string, val []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := d.mu.stable[key]
	if k == nil {
		k = &stableKey{}
		d.mu.stable[key] = k
	}
	k.attempts = append(k.attempts, bytes.Clone(val))
}

// ackSet records an acknowledged Set; a LastVoteCand is a vote for the candidate in the term
// of the LastVoteTerm before it, and two different candidates in one term are a violation.
func (d *durability) ackSet(key string, val []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	k := d.mu.stable[key]
	k.acked, k.attempts = bytes.Clone(val), nil
	switch key {
	case keyLastVoteTerm:
		if len(val) == 8 {
			d.mu.voteTerm = binary.BigEndian.Uint64(val)
		}
	case keyLastVoteCand:
		term, cand := d.mu.voteTerm, string(val)
		if prev, ok := d.mu.votes[term]; ok && prev != cand {
			d.violations("%s voted twice in term %d: for %s, then for %s", d.id, term, prev, cand)
		}
		d.mu.votes[term] = cand
	}
}

// checkRestored compares what a restarted node's stores hold with what they acknowledged
// before the cut, and makes the restored state the new base. get reads a stable key (nil,
// false if missing); first and last are the log's bounds; snap is the newest snapshot's last
// index (0 if none). It returns false if raft could not start on these stores: a log that
// starts after the newest snapshot ends has a hole raft cannot replay (it would panic).
func (d *durability) checkRestored(get func(key string) ([]byte, bool), first, last, snap uint64, termAt func(index uint64) (uint64, bool)) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	for key, k := range d.mu.stable {
		got, ok := get(key)
		allowed := k.acked == nil && !ok || k.acked != nil && ok && bytes.Equal(got, k.acked)
		for _, a := range k.attempts {
			allowed = allowed || ok && bytes.Equal(got, a)
		}
		if !allowed && d.storeChecks {
			d.violations("%s's stable store lost an acknowledged write: %s is %s after the cut, acknowledged %s",
				d.id, key, stableText(key, got, ok), stableText(key, k.acked, k.acked != nil))
		}
		k.acked, k.attempts = nil, nil
		if ok {
			k.acked = got
		}
		if key == keyLastVoteTerm && ok && len(got) == 8 {
			d.mu.voteTerm = binary.BigEndian.Uint64(got)
		}
	}
	want := d.mu.logLast
	if d.mu.cutting {
		want = min(want, d.mu.cutFloor)
	}
	if max(last, snap) < want && d.storeChecks {
		d.violations("%s's log lost acknowledged entries: it ends at %d (newest snapshot %d) after the cut, %d were acknowledged",
			d.id, last, snap, want)
	}
	// The index alone is not enough: a tail cut whose deletion was not durable brings back the
	// older entries it removed, at the indexes of the newer ones acknowledged since.
	if !d.mu.cutting && d.mu.logTerm != 0 && want > snap && last >= want && d.storeChecks {
		if term, ok := termAt(want); !ok || term != d.mu.logTerm {
			d.violations("%s's log entry %d has term %d after the cut (readable %v), term %d was acknowledged",
				d.id, want, term, ok, d.mu.logTerm)
		}
	}
	if snap < d.mu.snapshot && d.storeChecks {
		d.violations("%s's snapshot store lost an acknowledged snapshot: newest is %d after the cut, %d was acknowledged",
			d.id, snap, d.mu.snapshot)
	}
	d.mu.logLast, d.mu.cutting, d.mu.snapshot = last, false, snap
	d.mu.logTerm, _ = termAt(last)
	if first > 1 && snap+1 < first {
		d.violations("%s cannot recover: its log starts at %d but its newest snapshot ends at %d", d.id, first, snap)
		return false
	}
	return true
}

func stableText(key string, v []byte, ok bool) string {
	switch {
	case !ok:
		return "missing"
	case key != keyLastVoteCand && len(v) == 8:
		return fmt.Sprint(binary.BigEndian.Uint64(v))
	}
	return fmt.Sprintf("%q", v)
}

// inFlight counts a store's calls that are running now, for the cut statistics.
type inFlight struct {
	appends, truncations, snapshots atomic.Int32
}

// stableWatch records the stable store's writes.
type stableWatch struct {
	raft.StableStore
	d     *durability
	fence *fence
}

func (w stableWatch) Set(key, val []byte) error {
	w.fence.up(func() { w.d.attemptSet(string(key), val) })
	err := w.StableStore.Set(key, val)
	if err == nil {
		w.fence.up(func() { w.d.ackSet(string(key), val) })
	}
	return err
}

func (w stableWatch) SetUint64(key []byte, val uint64) error {
	return w.Set(key, binary.BigEndian.AppendUint64(nil, val))
}

// logWatch records the log's appends and cuts.
type logWatch struct {
	raft.LogStore
	d     *durability
	fence *fence
	busy  *inFlight
}

func (w logWatch) StoreLog(l *raft.Log) error { return w.StoreLogs([]*raft.Log{l}) }

func (w logWatch) StoreLogs(logs []*raft.Log) error {
	w.busy.appends.Add(1)
	defer w.busy.appends.Add(-1)
	err := w.LogStore.StoreLogs(logs)
	if err == nil && len(logs) > 0 {
		last, term := logs[len(logs)-1].Index, logs[len(logs)-1].Term
		w.fence.up(func() {
			w.d.mu.Lock()
			if last >= w.d.mu.logLast {
				w.d.mu.logLast, w.d.mu.logTerm = last, term
			}
			w.d.mu.Unlock()
		})
	}
	return err
}

// DeleteRange cuts the head (compaction) or the tail (a conflict, or everything after a
// snapshot install). A tail cut lowers what must survive: from its start while it runs (a crash
// keeps a prefix), for good once acknowledged.
func (w logWatch) DeleteRange(lo, hi uint64) error {
	w.busy.truncations.Add(1)
	defer w.busy.truncations.Add(-1)
	floor := lo - min(lo, 1)
	tail := false
	w.fence.up(func() {
		w.d.mu.Lock()
		if hi >= w.d.mu.logLast {
			tail = true
			w.d.mu.cutting, w.d.mu.cutFloor = true, floor
		}
		w.d.mu.Unlock()
	})
	err := w.LogStore.DeleteRange(lo, hi)
	w.fence.up(func() {
		w.d.mu.Lock()
		if tail {
			w.d.mu.cutting = false
			if err == nil {
				w.d.mu.logLast, w.d.mu.logTerm = floor, 0
			}
		}
		w.d.mu.Unlock()
	})
	return err
}

// snapWatch records the snapshots whose sinks closed.
type snapWatch struct {
	raft.SnapshotStore
	d     *durability
	fence *fence
	busy  *inFlight
}

func (w snapWatch) Create(version raft.SnapshotVersion, index, term uint64, conf raft.Configuration,
	confIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := w.SnapshotStore.Create(version, index, term, conf, confIndex, trans)
	if err != nil {
		return nil, err
	}
	w.busy.snapshots.Add(1)
	return &sinkWatch{SnapshotSink: sink, w: w, index: index}, nil
}

type sinkWatch struct {
	raft.SnapshotSink
	w     snapWatch
	index uint64
	done  bool
}

func (s *sinkWatch) finish() {
	if !s.done {
		s.done = true
		s.w.busy.snapshots.Add(-1)
	}
}

func (s *sinkWatch) Close() error {
	defer s.finish()
	err := s.SnapshotSink.Close()
	if err == nil {
		s.w.fence.up(func() {
			s.w.d.mu.Lock()
			s.w.d.mu.snapshot = max(s.w.d.mu.snapshot, s.index)
			s.w.d.mu.Unlock()
		})
	}
	return err
}

func (s *sinkWatch) Cancel() error {
	defer s.finish()
	return s.SnapshotSink.Cancel()
}

// GetLog reports, under POWERLOSS_DEBUG, every read of a missing entry with the log's bounds:
// raft panics on one it needs to apply.
func (w logWatch) GetLog(index uint64, l *raft.Log) error {
	err := w.LogStore.GetLog(index, l)
	if err != nil && debug {
		first, _ := w.LogStore.FirstIndex()
		last, _ := w.LogStore.LastIndex()
		fmt.Fprintf(os.Stderr, "powerloss debug: %s GetLog(%d): %v; log [%d, %d], power on %v\n",
			w.d.id, index, err, first, last, w.fence.up(nil))
	}
	return err
}

var debug = os.Getenv("POWERLOSS_DEBUG") != ""
