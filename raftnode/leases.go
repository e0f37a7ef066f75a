package raftnode

import (
	"container/heap"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// lease is the timer this node armed for a held key when it applied the entry that set the
// lease. Every node arms its own (apply happens after the client sent its request, so no node's
// timer ends before the client's), and only the leader acts on them.
type lease struct {
	token    fsm.Token
	rev      uint64
	deadline time.Time
}

// leases is the set of armed lease timers. It is guarded by Node.mu, together with the table it
// shadows, so a timer always matches the lock it was armed for.
type leases struct {
	byKey map[string]lease
	queue deadlineQueue
}

func newLeases() leases {
	return leases{byKey: make(map[string]lease)}
}

// arm sets key's timer. The queue keeps stale entries; pop skips them by comparing revisions.
func (ls *leases) arm(key string, l lease) {
	ls.byKey[key] = l
	heap.Push(&ls.queue, queued{deadline: l.deadline, key: key, rev: l.rev})
	// Renewals and re-grants leave stale entries behind, and only the leader pops due ones: on
	// a follower the queue would grow with every write. Compacting when stale entries outnumber
	// live ones keeps it within twice the live leases, at O(1) amortized per arm.
	if len(ls.queue) > 2*len(ls.byKey)+64 {
		ls.rebuild()
	}
}

// retoken moves key's timer to a new holder without changing its deadline (SET ... KEEPTTL).
func (ls *leases) retoken(key string, token fsm.Token) {
	if l, ok := ls.byKey[key]; ok {
		l.token = token
		ls.byKey[key] = l
	}
}

func (ls *leases) disarm(key string) { delete(ls.byKey, key) }

// remaining is how long key's lease has left by this node's timer.
func (ls *leases) remaining(key string, now time.Time) (time.Duration, bool) {
	l, ok := ls.byKey[key]
	if !ok {
		return 0, false
	}
	return max(l.deadline.Sub(now), 0), true
}

// expiry names one lease the leader should end with an Expire command.
type expiry struct {
	key   string
	token fsm.Token
	rev   uint64
}

// due pops up to limit timers that have ended by now. Their entries stay in byKey: only the
// applied Expire (or a Release) removes a lease, so a failed proposal is retried by requeue.
func (ls *leases) due(now time.Time, limit int) []expiry {
	var out []expiry
	for len(ls.queue) > 0 && len(out) < limit {
		top := ls.queue[0]
		if top.deadline.After(now) {
			break
		}
		heap.Pop(&ls.queue)
		l, ok := ls.byKey[top.key]
		if !ok || l.rev != top.rev {
			continue // stale: released, renewed or re-granted since
		}
		out = append(out, expiry{key: top.key, token: l.token, rev: l.rev})
	}
	return out
}

// requeue schedules another attempt for an expiry whose proposal failed.
func (ls *leases) requeue(e expiry, at time.Time) {
	if l, ok := ls.byKey[e.key]; ok && l.rev == e.rev {
		heap.Push(&ls.queue, queued{deadline: at, key: e.key, rev: e.rev})
	}
}

// next is the earliest deadline queued.
func (ls *leases) next() (time.Time, bool) {
	if len(ls.queue) == 0 {
		return time.Time{}, false
	}
	return ls.queue[0].deadline, true
}

// rebuild drops the queue's stale entries and requeues every armed timer: a new leader starts
// from the timers it kept as a follower, not from fresh full leases.
func (ls *leases) rebuild() {
	ls.queue = ls.queue[:0]
	for k, l := range ls.byKey {
		ls.queue = append(ls.queue, queued{deadline: l.deadline, key: k, rev: l.rev})
	}
	heap.Init(&ls.queue)
}

type queued struct {
	deadline time.Time
	key      string
	rev      uint64
}

// deadlineQueue is a min-heap of timers by deadline.
type deadlineQueue []queued

func (q deadlineQueue) Len() int           { return len(q) }
func (q deadlineQueue) Less(i, j int) bool { return q[i].deadline.Before(q[j].deadline) }
func (q deadlineQueue) Swap(i, j int)      { q[i], q[j] = q[j], q[i] }
func (q *deadlineQueue) Push(x any)        { *q = append(*q, x.(queued)) }
func (q *deadlineQueue) Pop() any {
	old := *q
	x := old[len(old)-1]
	*q = old[:len(old)-1]
	return x
}

// trackLeaseLocked keeps the lease timers in step with an applied result. n.mu is held.
func (n *Node) trackLeaseLocked(key string, res fsm.Result, now time.Time) {
	switch res.Status {
	case fsm.StatusGranted, fsm.StatusRenewed:
		if res.LeaseMs == 0 {
			n.leases.disarm(key)
			return
		}
		if l, ok := n.leases.byKey[key]; ok && l.rev == res.LeaseRev {
			// SET ... KEEPTTL: the same lease goes on, perhaps for a new holder.
			n.leases.retoken(key, res.Token)
			return
		}
		n.leases.arm(key, lease{token: res.Token, rev: res.LeaseRev, deadline: now.Add(msDuration(res.LeaseMs))})
		n.wakeLeases()
	case fsm.StatusReleased:
		n.leases.disarm(key)
	case fsm.StatusExpired:
		if res.Existed {
			n.leases.disarm(key)
		}
	}
}

// maxLeaseMs keeps lease arithmetic far from time.Duration's overflow (about 292 years).
const maxLeaseMs = uint64(100 * 365 * 24 * time.Hour / time.Millisecond)

func msDuration(ms uint64) time.Duration {
	return time.Duration(min(ms, maxLeaseMs)) * time.Millisecond
}
