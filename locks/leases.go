package locks

import (
	"cmp"
	"slices"
	"strings"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// leases are the timers this node armed for the held keys that have a lease: each ends LeaseMs
// after this node applied the entry that set it. Every node arms its own (apply happens after
// the client sent its request, so no node's timer ends before the client's), and only the
// leader acts on them. They are guarded by Policy.mu, and read the table they shadow under the
// core's view lock.
//
// A lease's deadline lives beside its entry in the table (fsm.Lock.Deadline, on the lease clock
// that the core gives the machine: node.Replica.LeaseClock), so the timers need no map of
// their own: one queue entry per arming (24 bytes: the deadline and the key, whose bytes are the
// table's). The holder's token and the lease revision are read from the table when a timer ends,
// and the table's Deadline says whether the lease in force has ended: a timer for a lease since
// renewed, re-granted or released is stale and does nothing.
type leases struct {
	// queue holds a timer per arming, by deadline; renewals leave stale entries, which due
	// skips: the lease in force at their key ends later than they do (or there is none).
	queue deadlineQueue
}

// arm queues the timer of a lease just set on key, held in m, ending at deadline (its
// fsm.Lock.Deadline). key is the table's own (fsm.Machine.Entry), so the queue holds no copy
// of it.
func (ls *leases) arm(m *fsm.Machine, key string, deadline int64) (earliest bool) {
	earliest = len(ls.queue) == 0 || deadline < ls.queue[0].deadline
	ls.queue.push(queued{deadline: deadline, key: key})
	// Renewals and re-grants leave stale entries behind, and only the leader pops due ones: on
	// a follower the queue would grow with every write. Compacting when stale entries outnumber
	// live ones keeps it within twice the live leases, at O(log n) amortized per arm.
	if len(ls.queue) > 2*m.Leases()+64 {
		ls.compact(m)
	}
	return earliest
}

// armAll queues a timer for every lease of m (a restored table, whose Deadlines RestoreAt set):
// one heap build instead of a push each. The queue is sized to fit with an eighth to spare: one
// filled to the brim would be copied whole by the first grant after a restart: with a million
// locks, tens of megabytes at once, for which that grant would wait on the collector.
func (ls *leases) armAll(m *fsm.Machine) {
	n := m.Leases()
	ls.queue = make(deadlineQueue, 0, n+n/8+64)
	m.Scan(func(key string, l fsm.Lock) bool {
		if l.LeaseMs > 0 {
			ls.queue = append(ls.queue, queued{deadline: l.Deadline, key: key})
		}
		return true
	})
	ls.queue.init()
}

// expiry names one lease the leader should end with an Expire command.
type expiry struct {
	key   string
	token fsm.Token
	rev   uint64
}

// due pops up to limit timers that have ended by t (the lease clock's now), for the leases
// still in force in m. The
// leases stay armed: only the applied Expire (or a Release) disarms one, so a failed proposal
// is retried by requeue.
//
// A lease whose key is in a slot being moved to another group (frozen, fsm/slotmoves.go) is
// not ended now, since its Expire would be refused: its timer is put back for after the retry
// interval, so the lease ends late, never early. The move's import re-arms it in the target.
func (ls *leases) due(m lockTable, t int64, limit int) []expiry {
	var out []expiry
	var later []queued
	slots := m.Slots()
	for len(ls.queue) > 0 && len(out) < limit {
		top := ls.queue[0]
		if top.deadline > t {
			break
		}
		ls.queue.pop()
		l, ok := leaseAt(m, top.key)
		switch {
		case !ok || l.Deadline > t:
			// stale: released, or renewed or re-granted to end later
		case slots.Moved() && slots.Of(fsm.SlotOf([]byte(top.key))).State == fsm.SlotFrozen:
			later = append(later, queued{deadline: t + int64(expireRetry), key: top.key})
		default:
			out = append(out, expiry{key: top.key, token: l.Token, rev: l.LeaseRev})
		}
	}
	for _, q := range later {
		ls.queue.push(q)
	}
	return out
}

// lockTable is the applied table as the timers read it: the core's fsm.Machine in its hooks,
// a request's view in the lease loop's evaluation (viewLocks).
type lockTable interface {
	Get(key []byte) (fsm.Lock, bool)
	Slots() fsm.Slots
}

// viewLocks reads the applied table through a request's view.
type viewLocks struct{ v node.View }

func (t viewLocks) Slots() fsm.Slots { return t.v.Slots() }

func (t viewLocks) Get(key []byte) (fsm.Lock, bool) {
	l, _, held := t.v.Lookup(key)
	return l, held
}

// leaseAt returns the lock at key if it has a lease.
func leaseAt(m lockTable, key string) (fsm.Lock, bool) {
	l, ok := m.Get([]byte(key))
	return l, ok && l.LeaseMs > 0
}

// requeue schedules another attempt at an expiry whose proposal failed, at the lease clock's
// at, after its lease's deadline (due checks again whether that lease is still in force and
// ended).
func (ls *leases) requeue(e expiry, at int64) {
	ls.queue.push(queued{deadline: at, key: e.key})
}

// next is the earliest deadline queued, on the lease clock.
func (ls *leases) next() (int64, bool) {
	if len(ls.queue) == 0 {
		return 0, false
	}
	return ls.queue[0].deadline, true
}

// compact drops the queue's stale entries: those whose key has no lease now, or a lease that
// ends after them (renewed or re-granted since; its own entry is queued), and repeats of one
// (key, deadline) (a key set twice in one entry, whose commands share the lease clock). It
// keeps the entry at the lease's deadline and any later one (a requeued expiry, or the timer of
// a lease renewed to end sooner, which then finds that lease ended and proposes a harmless
// second Expire). Sorted by deadline, the queue is a heap as it is.
func (ls *leases) compact(m *fsm.Machine) {
	live := ls.queue[:0]
	for _, q := range ls.queue {
		if l, ok := leaseAt(m, q.key); ok && q.deadline >= l.Deadline {
			live = append(live, q)
		}
	}
	clear(ls.queue[len(live):]) // let go of the dropped keys
	slices.SortFunc(live, func(a, b queued) int {
		return cmp.Or(cmp.Compare(a.deadline, b.deadline), strings.Compare(a.key, b.key))
	})
	n := len(live)
	live = slices.Compact(live)
	clear(live[len(live):n])
	ls.queue = live
}

// queued is one armed timer: 24 bytes.
type queued struct {
	deadline int64
	key      string
}

// deadlineQueue is a min-heap of timers by deadline. It is written out rather than built on
// container/heap, whose interface boxes every pushed entry (an allocation per arm).
type deadlineQueue []queued

func (q *deadlineQueue) push(x queued) {
	*q = append(*q, x)
	h := *q
	for i := len(h) - 1; i > 0; {
		parent := (i - 1) / 2
		if h[parent].deadline <= h[i].deadline {
			break
		}
		h[parent], h[i] = h[i], h[parent]
		i = parent
	}
}

func (q *deadlineQueue) pop() {
	h := *q
	last := len(h) - 1
	h[0] = h[last]
	h[last] = queued{}
	*q = h[:last]
	q.down(0)
}

func (q deadlineQueue) down(i int) {
	for {
		least, l, r := i, 2*i+1, 2*i+2
		if l < len(q) && q[l].deadline < q[least].deadline {
			least = l
		}
		if r < len(q) && q[r].deadline < q[least].deadline {
			least = r
		}
		if least == i {
			return
		}
		q[i], q[least] = q[least], q[i]
		i = least
	}
}

func (q deadlineQueue) init() {
	for i := len(q)/2 - 1; i >= 0; i-- {
		q.down(i)
	}
}
