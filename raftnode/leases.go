package raftnode

import (
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// leases are the timers this node armed for the held keys that have a lease: each ends LeaseMs
// after this node applied the entry that set it. Every node arms its own (apply happens after
// the client sent its request, so no node's timer ends before the client's), and only the
// leader acts on them. They are guarded by Node.mu, together with the table they shadow.
//
// One lease costs a map slot and a queue entry (about 70 bytes with a short key): a node holds
// a timer for every leased lock, so this is most of a lock's memory after the table itself.
// The holder's token and the lease revision are read from the table when a timer ends, not
// kept here.
type leases struct {
	// deadline is each armed key's deadline, in nanoseconds of this node's clock since epoch.
	deadline map[string]int64
	// queue holds a timer per arming, by deadline; renewals leave stale entries, which pop
	// skips by comparing revisions with the table.
	queue deadlineQueue
	epoch time.Time
	// perDB counts the armed leases of each database (a table key's first byte), for INFO.
	perDB [256]int
}

func newLeases(epoch time.Time, capacity int) leases {
	return leases{deadline: make(map[string]int64, capacity), epoch: epoch}
}

// at is a deadline in the leases' clock: ms after now.
func (ls *leases) at(now time.Time, ms uint64) int64 {
	return int64(now.Sub(ls.epoch) + msDuration(ms))
}

// arm sets key's timer, armed by the entry at index rev of table m.
func (ls *leases) arm(m *fsm.Machine, key string, rev uint64, deadline int64) {
	if _, ok := ls.deadline[key]; !ok {
		ls.perDB[key[0]]++
	}
	ls.deadline[key] = deadline
	ls.queue.push(queued{deadline: deadline, rev: rev, key: key})
	// Renewals and re-grants leave stale entries behind, and only the leader pops due ones: on
	// a follower the queue would grow with every write. Compacting when stale entries outnumber
	// live ones keeps it within twice the live leases, at O(log n) amortized per arm.
	if len(ls.queue) > 2*len(ls.deadline)+64 {
		ls.compact(m)
	}
}

// armAll arms many timers at once (a restored table): one heap build instead of a push each.
func (ls *leases) armAll(m *fsm.Machine, now time.Time) {
	m.Scan(func(key string, l fsm.Lock) bool {
		if l.LeaseMs > 0 {
			d := ls.at(now, l.LeaseMs)
			if _, ok := ls.deadline[key]; !ok {
				ls.perDB[key[0]]++
			}
			ls.deadline[key] = d
			ls.queue = append(ls.queue, queued{deadline: d, rev: l.LeaseRev, key: key})
		}
		return true
	})
	ls.queue.init()
}

func (ls *leases) disarm(key string) {
	if _, ok := ls.deadline[key]; ok {
		ls.perDB[key[0]]--
		delete(ls.deadline, key)
	}
}

func (ls *leases) armed(key string) bool {
	_, ok := ls.deadline[key]
	return ok
}

// remaining is how long key's lease has left by this node's timer.
func (ls *leases) remaining(key string, now time.Time) (time.Duration, bool) {
	d, ok := ls.deadline[key]
	if !ok {
		return 0, false
	}
	return max(time.Duration(d)-now.Sub(ls.epoch), 0), true
}

// expiry names one lease the leader should end with an Expire command.
type expiry struct {
	key   string
	token fsm.Token
	rev   uint64
}

// due pops up to limit timers that have ended by now, for the leases still in force in m. The
// leases stay armed: only the applied Expire (or a Release) disarms one, so a failed proposal
// is retried by requeue.
func (ls *leases) due(m *fsm.Machine, now time.Time, limit int) []expiry {
	var out []expiry
	t := int64(now.Sub(ls.epoch))
	for len(ls.queue) > 0 && len(out) < limit {
		top := ls.queue[0]
		if top.deadline > t {
			break
		}
		ls.queue.pop()
		if l, ok := ls.inForce(m, top); ok {
			out = append(out, expiry{key: top.key, token: l.Token, rev: top.rev})
		}
		// else stale: released, renewed or re-granted since
	}
	return out
}

// inForce returns the lock that q's timer is for, if the lease q was armed for is still the one
// in force.
func (ls *leases) inForce(m *fsm.Machine, q queued) (fsm.Lock, bool) {
	if !ls.armed(q.key) {
		return fsm.Lock{}, false
	}
	l, ok := m.Get([]byte(q.key))
	return l, ok && l.LeaseRev == q.rev && l.LeaseMs > 0
}

// requeue schedules another attempt for an expiry whose proposal failed.
func (ls *leases) requeue(e expiry, at time.Time) {
	if ls.armed(e.key) {
		ls.queue.push(queued{deadline: int64(at.Sub(ls.epoch)), rev: e.rev, key: e.key})
	}
}

// next is the earliest deadline queued.
func (ls *leases) next() (time.Time, bool) {
	if len(ls.queue) == 0 {
		return time.Time{}, false
	}
	return ls.epoch.Add(time.Duration(ls.queue[0].deadline)), true
}

// compact drops the queue's stale entries (for leases no longer in force in m).
func (ls *leases) compact(m *fsm.Machine) {
	live := ls.queue[:0]
	for _, q := range ls.queue {
		if _, ok := ls.inForce(m, q); ok {
			live = append(live, q)
		}
	}
	clear(ls.queue[len(live):]) // let go of the dropped keys
	ls.queue = live
	ls.queue.init()
}

// queued is one armed timer: 32 bytes.
type queued struct {
	deadline int64
	rev      uint64
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

// trackLeaseLocked keeps the lease timers in step with the result of the entry at index,
// applied at now. n.mu is held.
func (n *Node) trackLeaseLocked(key string, index uint64, res fsm.Result, now time.Time) {
	switch res.Status {
	case fsm.StatusGranted, fsm.StatusRenewed, fsm.StatusWritten: // a deleting Write has no lease
		switch {
		case res.LeaseMs == 0:
			n.mu.leases.disarm(key)
		case res.LeaseRev != index && n.mu.leases.armed(key):
			// SET ... KEEPTTL, or a Write that kept a collection's lease: the lease set by an
			// earlier entry goes on, perhaps for a new holder (due reads the holder's token
			// from the table).
		default:
			n.mu.leases.arm(n.mu.machine, key, res.LeaseRev, n.mu.leases.at(now, res.LeaseMs))
			n.wakeLeases()
		}
	case fsm.StatusReleased:
		n.mu.leases.disarm(key)
	case fsm.StatusExpired:
		if res.Existed {
			n.mu.leases.disarm(key)
		}
	case fsm.StatusFlushed:
		// key is the flushed database's number, or empty for every database.
		for k := range n.mu.leases.deadline {
			if key == "" || k[0] == key[0] {
				n.mu.leases.disarm(k)
			}
		}
	}
}

// maxLeaseMs keeps lease arithmetic far from time.Duration's overflow (about 292 years).
const maxLeaseMs = uint64(100 * 365 * 24 * time.Hour / time.Millisecond)

func msDuration(ms uint64) time.Duration {
	return time.Duration(min(ms, maxLeaseMs)) * time.Millisecond
}
