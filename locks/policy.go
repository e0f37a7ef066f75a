// Package locks holds raftlock's lock rules on top of the replication core: what LOCK, UNLOCK,
// RENEW and the SET NX family propose (evals.go), the lease timers that make the leader propose
// Expire (leases.go, expire.go), the FIFO hand-off of LOCK ... WAIT (handoff.go), and the
// release of locks granted to clients that hung up (ghosts.go).
//
// A Policy plugs into the core (raftnode) through the hooks of raftnode.LockPolicy: at apply,
// under the core's view lock, it arms lease timers and notes keys left free; at proposal it adds
// hand-off grants to an entry; it hears when this node gains and loses leadership (as etcd's
// lessor hears Promote and Demote). It proposes through node.Replica, so it imports nothing of
// the core. Its own mutex guards its timers and queues; it is taken inside the view lock, never
// the other way round, and nothing under it calls the core.
package locks

import (
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// Config is what a Policy needs of its surroundings.
type Config struct {
	// ApplyTimeout bounds the proposals the policy makes of its own (expiries, hand-offs, ghost
	// releases); 5 s when zero.
	ApplyTimeout time.Duration
	// Logger is where the policy logs; slog.Default() when nil.
	Logger *slog.Logger
}

// Policy is the lock rules of one replication core.
type Policy struct {
	applyTimeout time.Duration
	log          *slog.Logger
	replica      node.Replica // set by Start, before the first call that needs it

	// mu guards the timers. It nests inside the core's view lock.
	mu struct {
		sync.Mutex
		leases leases
	}
	// leading is set while the core is a ready leader (Promote, Demote): only then are timers
	// acted on and waiters queued.
	leading  atomic.Bool
	wake     chan struct{}
	expired  atomic.Uint64
	ghosts   atomic.Uint64
	handoffs atomic.Uint64 // waiters served while this node led (Applied)
	stop     chan struct{}
	wg       sync.WaitGroup
	goMu     sync.Mutex
	goClosed bool // under goMu: goFunc starts nothing more
	once     sync.Once
}

// New returns a policy with no timers and no waiters; Start sets it going.
func New(cfg Config) *Policy {
	if cfg.ApplyTimeout == 0 {
		cfg.ApplyTimeout = 5 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	return &Policy{
		applyTimeout: cfg.ApplyTimeout,
		log:          cfg.Logger.With("component", "locks"),
		// One buffered wake-up is enough: the lease loop rereads the queue when it runs.
		wake: make(chan struct{}, 1),
		stop: make(chan struct{}),
	}
}

// Start gives the policy the replica it proposes through and starts its lease loop. The core
// calls it once, before raft applies anything.
func (p *Policy) Start(r node.Replica) {
	p.replica = r
	p.goFunc(p.runLeases)
}

// Close stops the lease loop and waits for the proposals the policy made of its own. The core
// calls it once raft has stopped, so those end at once.
func (p *Policy) Close() {
	p.once.Do(func() {
		close(p.stop)
		p.goMu.Lock()
		p.goClosed = true
		p.goMu.Unlock()
		p.wg.Wait()
	})
}

// goFunc runs f on a goroutine Close waits for; once Close has begun it starts nothing (a late
// start would race Close's Wait: ghost releases come from request goroutines).
func (p *Policy) goFunc(f func()) {
	p.goMu.Lock()
	defer p.goMu.Unlock()
	if p.goClosed {
		return
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		f()
	}()
}

// Promote tells the policy its core became a ready leader: its timers are acted on from now.
// Timers armed as a follower keep running, so a new leader neither resets leases to their full
// length nor ends them early.
// The queues are the table's: it looks at every one of them, to serve the waiters that fit (a
// key may have been freed while no leader could serve them).
func (p *Policy) Promote() {
	p.leading.Store(true)
	p.wakeLeases()
	p.goFunc(func() { p.handOff(nil) })
}

// Demote tells the policy its core no longer leads, under the core's view lock. Waiters need
// nothing: they wait in the replicated queues, for the next leader to serve.
func (p *Policy) Demote(error) {
	p.leading.Store(false)
}

// Stats is how many leases the leader ended through committed Expires, how many ghost locks it
// released, and how many waiters it granted a lock by a hand-off, since this process started.
func (p *Policy) Stats() (expired, ghostReleases, handoffs uint64) {
	return p.expired.Load(), p.ghosts.Load(), p.handoffs.Load()
}

// Applied arms the timer of the lease that the entry at index set on key, as res says, under
// the core's view lock; m (which holds the lock's deadline, fsm.Lock.Deadline) is the table it
// applied to. A lease that ended (released, expired, dropped, flushed) needs nothing: its queue
// entry is stale and the lease loop skips it.
func (p *Policy) Applied(m *fsm.Machine, key []byte, index uint64, res fsm.Result) {
	switch res.Status {
	case fsm.StatusGranted, fsm.StatusRenewed, fsm.StatusWritten:
	case fsm.StatusExpired: // a lock-delay's lease, when it set one (fsm.LeaseKey)
	case fsm.StatusQueued: // a waiter's wait
	case fsm.StatusSlots:
		// A slot move: keys came with their leases (an import), or went (a release). Every
		// timer is armed again from the table: a rare, whole-table step.
		p.mu.Lock()
		p.mu.leases.armAll(m)
		p.mu.Unlock()
		p.wakeLeases()
		return
	default:
		return
	}
	if res.Served != 0 && p.leading.Load() {
		p.handoffs.Add(1)
	}
	// res.LeaseRev != index: SET ... KEEPTTL, or a Write that kept a collection's lease: the lease
	// set by an earlier entry goes on, perhaps for a new holder (due reads the holder's token
	// from the table), with the timer it has.
	if res.LeaseMs == 0 || res.LeaseRev != index {
		return
	}
	stored, deadline, ok := leaseSet(m, key, index, res)
	if !ok {
		return
	}
	p.mu.Lock()
	earliest := p.mu.leases.arm(m, stored, deadline)
	p.mu.Unlock()
	// The lease loop sleeps until the earliest deadline (a leader's), or until this node becomes
	// a ready leader (which wakes it): only a lease that ends before every other needs it awake,
	// which spares a goroutine hand-off per LOCK.
	if earliest && p.leading.Load() {
		p.wakeLeases()
	}
}

// leaseSet is the table's own copy of key and the deadline of the lease the entry at index set
// on it (res its result), false if a later command of the entry released or replaced it. A
// grant of key itself says both (fsm.Result.Stored): its timer is armed even when a later
// command of its entry (a MULTI's) changed the lease, since a stale timer finds the table's
// lease gone or later when it fires (leases.due) and compaction drops it. Any other lease (a
// renewal, a share, a waiter's) is looked up.
func leaseSet(m *fsm.Machine, key []byte, index uint64, res fsm.Result) (stored string, deadline int64, ok bool) {
	if res.Stored != "" && res.Stored == string(key) {
		return res.Stored, res.Deadline, true
	}
	stored, l, ok := m.Entry(key)
	if !ok || l.LeaseRev != index {
		return "", 0, false
	}
	return stored, l.Deadline, true
}

// Restored arms a timer for every lease of m, a table a snapshot replaced, under the core's
// view lock. The deadlines are full leases from the restore (fsm.RestoreAt): this node cannot
// know how much of each had run, so they end late, never early.
func (p *Policy) Restored(m *fsm.Machine) {
	p.mu.Lock()
	p.mu.leases.armAll(m)
	p.mu.Unlock()
	p.wakeLeases()
}

// Timers is how many lease timers are queued, stale ones (of leases since renewed, re-granted or
// released) included: compaction keeps it within twice the live leases plus a constant, which
// the core's replication tests check on followers.
func (p *Policy) Timers() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.mu.leases.queue)
}
