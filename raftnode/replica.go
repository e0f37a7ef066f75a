package raftnode

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
)

// Stores are the raft storage a Replica runs on: store.Store in production, raft's in-memory
// stores in fast tests.
type Stores struct {
	Log       raft.LogStore
	Stable    raft.StableStore
	Snapshots raft.SnapshotStore
	// Health, when not nil, says whether the log store takes writes now (store.Store.Health):
	// while it does not, the leader refuses writes before raft appends them (disk.go).
	Health func() error
}

// logCacheEntries is how many of the newest log entries stay in memory: several batches of
// MaxAppendEntries, so replication and apply never read the store in steady state.
// logCacheBytes bounds their data (logcache.go): 32 group commits of the largest size, where
// 4,096 entries of small batches hold a few megabytes. Replication and apply trail the newest
// entry by a batch or two; the bound is live heap on every node, counted twice over by the
// collector's headroom.
const (
	logCacheEntries = 4096
	logCacheBytes   = 8 << 20
)

// Replica is the replication core of one raft group: raft, the lock table it applies to, and
// the leader's view.
type Replica struct {
	cfg Config
	// selfID is cfg.ID, the origin of the locks this node's own clients take (originOf).
	selfID []byte
	log    *slog.Logger
	raft   *raft.Raft
	// format is the table's log format (fsm.Machine.Format), for proposers that do not hold mu;
	// formatChange is notified when it changes (format.go).
	format       atomic.Uint32
	formatChange changeSignal
	// slots is the table's ownership of the hash slots (fsm.Machine.Slots), for routing without
	// mu: stored when the table is made or restored and after an entry that moved slots.
	slots atomic.Pointer[fsm.Slots]
	// plan is the table's groups plan (fsm.Machine.GroupsPlan), nil while it has none: stored
	// when the table is made or restored and after an entry that planned groups.
	plan atomic.Pointer[fsm.GroupsPlan]

	// mu guards the view: the applied table and the pending proposals.
	// Requests are evaluated and registered under it, and raft applies under it, so a request
	// never sees a half-applied batch and never races an apply on the key it evaluates. Only
	// evaluation runs under it (the request's Eval, a script included): change hooks run after
	// the apply lets go of it, and nothing under it logs, blocks or does I/O.
	mu struct {
		sync.Mutex
		machine *fsm.Machine
		// pending holds the marks of the keys with proposals in flight, by markOf: a hash,
		// not the key, so a mark costs no copy of its key and no string compare. Two keys whose
		// hashes collide share a mark: a request on one then waits for the other's proposals
		// too, which costs it time, never correctness (a mark only ever makes a request wait).
		pending map[uint64]*pendingKey
		// wideMarks counts the marks that stand for a key no longer than a byte: a FLUSHDB's
		// mark on its database's byte, a FLUSHALL's on "" (or a key that is the empty string).
		// With none, a request looks its own keys up alone (pendingOnLocked).
		wideMarks int
		// freeKeys are pendingKeys that went out of use, for the next keys in flight: one
		// allocation fewer per request (at most maxFreeKeys kept).
		freeKeys []*pendingKey
		// view is the node.View handed to evaluations, which run under mu: one value reused,
		// so passing it as an interface allocates nothing (one allocation fewer per request).
		view viewReader
	}

	// ready is true while this node is the leader and has applied everything committed before
	// its term (the barrier after each election). Only then may it evaluate requests.
	ready atomic.Bool
	// readyTerm is the term whose barrier completed the table when this node last became
	// ready. Leading in another term means another leader may have committed in between, and
	// the table may miss it until the watcher notices the change (runVerifier).
	readyTerm  atomic.Uint64
	leaderGen  atomic.Uint64
	verifyReqs chan chan error
	// locks is the lock policy (Config.Locks); inFlight is pendingLocked as a func value made
	// once, for its hand-off hook.
	locks    LockPolicy
	inFlight func(key []byte) bool
	// markSeed seeds markOf's hashes of the pending marks' keys.
	markSeed maphash.Seed
	// logs is raft's log store, through the cache: where the log ends (LogEnd).
	logs *logCache
	// stable is raft's stable store, where keepAppliedFloor records an index this node has
	// applied; appliedFloor is the one it found there at its start (LogEnd).
	stable       raft.StableStore
	appliedFloor uint64
	// cluster is told what cluster management watches (Config.Cluster, or noCluster).
	cluster ClusterPolicy
	// epoch is where the lease clock starts (leaseClock): the table's lease deadlines count
	// nanoseconds from it.
	epoch time.Time

	stats counters
	// applyScratch is ApplyBatch's buffer of decoded commands, kept between batches: only
	// raft's FSM goroutine touches it.
	applyScratch []fsm.Command
	// publishScratch is ApplyBatch's buffer of messages to deliver (lock ends among them: one per
	// release), kept between batches as applyScratch is.
	publishScratch []message
	// group is the leader's queue of requests waiting for a group commit; writes tells its
	// sender when the batch it gave raft is written (groupcommit.go).
	group  groupCommit
	writes *writeWatch
	// keys is the table's key count, stored after every apply (Keys).
	keys atomic.Int64
	// watch holds the hooks told of what each applied batch did (Watch): they run on raft's
	// apply goroutine after mu is released and before the batch's futures resolve.
	watch atomic.Pointer[node.Watchers]

	// fsmRaft is raft for the goroutines raft.NewRaft starts before New sets n.raft (the FSM's,
	// the log store's on a disk that fails at start: a plain read of n.raft there would race
	// that write), and for Raft: nil until NewRaft has returned.
	fsmRaft atomic.Pointer[raft.Raft]
	// leaderChange is notified whenever the leader, this node's readiness or the member table
	// may have changed (LeaderChanged).
	leaderChange changeSignal
	// disk is what the node knows of its disk's faults (disk.go): the store's health, the
	// failure that stopped raft, and the signal that wakes the hand-off for a full disk.
	disk struct {
		health  func() error
		failed  atomic.Pointer[error]
		full    chan struct{}
		stopped chan struct{} // closed once raft has stopped for a failed disk
	}
	// retired is set once cluster management found this node removed (Retire): it never
	// becomes a ready leader again.
	retired   atomic.Bool
	goMu      sync.Mutex
	goClosed  bool // under goMu: goFunc starts nothing more
	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// pendingKey counts the proposals in flight on one key. Requests on the key wait for done.
type pendingKey struct {
	n int
	// wide: a key no longer than a byte was marked here (counted in wideMarks).
	wide bool
	// done is closed when the last of them has applied. It is made by the first request that
	// waits for them (pendingOnLocked): most keys in flight have no one waiting.
	done chan struct{}
}

// maxFreeKeys bounds Replica.mu.freeKeys: the keys one burst had in flight at once, up to this.
const maxFreeKeys = 4096

// wait returns the channel closed when the proposals in flight on the key have applied. The
// caller holds Replica.mu.
func (p *pendingKey) wait() <-chan struct{} {
	if p.done == nil {
		p.done = make(chan struct{})
	}
	return p.done
}

// New starts a core on the given stores and transport, resuming from whatever state they
// hold. It neither bootstraps nor checks who it is: cluster management (package cluster) does
// that around it, and owns the transport.
func New(cfg Config, st Stores, trans raft.Transport) (*Replica, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	n := &Replica{
		cfg:     cfg,
		selfID:  []byte(cfg.ID),
		log:     cfg.Logger.With("component", "raftnode", "id", cfg.ID),
		locks:   cfg.Locks,
		cluster: cfg.Cluster,
		epoch:   cfg.Now(),
		// Buffered so many requests can queue for one batched leadership check.
		verifyReqs: make(chan chan error, 1024),
		group:      groupCommit{finish: make(chan struct{}, 1)},
		stop:       make(chan struct{}),
	}
	if n.cluster == nil {
		n.cluster = noCluster{}
	}
	n.stats.init()
	n.mu.machine = fsm.New()
	n.mu.machine.SetGroup(cfg.Group, cfg.Groups, cfg.Layout)
	n.noteSlotsLocked()
	n.notePlanLocked()
	n.format.Store(uint32(n.mu.machine.Format()))
	n.mu.pending = make(map[uint64]*pendingKey)
	n.markSeed = maphash.MakeSeed()
	n.inFlight = n.pendingLocked
	// The cache keeps the newest entries in memory (logcache.go).
	n.disk.health = st.Health
	n.disk.full = make(chan struct{}, 1)
	n.disk.stopped = make(chan struct{})
	n.writes = &writeWatch{LogStore: st.Log, written: n.batchSettled, failed: n.logStoreFailed}
	logs, err := newLogCache(n.writes, logCacheEntries, logCacheBytes)
	if err != nil {
		return nil, fmt.Errorf("log cache: %w", err)
	}
	n.logs = logs
	n.stable = st.Stable
	// A missing key is an error whose text is "not found" in every raft.StableStore (raft's
	// own convention, store.ErrKeyNotFound's text), or 0 from raft's in-memory store. The floor
	// is advice: one that cannot be read is 0 (replayed messages, never lost ones).
	if n.appliedFloor, err = st.Stable.GetUint64(appliedFloorKey); err != nil {
		if err.Error() != "not found" {
			n.log.Warn("reading the applied floor failed; starting without it", "err", err)
		}
		n.appliedFloor = 0
	}
	if err := checkLogContinuity(st); err != nil {
		return nil, err
	}
	n.locks.Start(n)
	r, err := startRaft(cfg.RaftConfig(), machineFSM{n}, logs, st.Stable, st.Snapshots, trans)
	if err != nil {
		n.locks.Close()
		return nil, fmt.Errorf("start raft: %w", err)
	}
	n.raft = r
	n.fsmRaft.Store(r)
	n.goFunc(n.watchLeadership)
	n.goFunc(n.watchLeaders)
	n.goFunc(n.runVerifier)
	n.goFunc(n.handOffWhenFull)
	n.goFunc(n.keepAppliedFloor)
	go n.runFinisher() // not goFunc: see there
	return n, nil
}

// Raft is the raft this core runs (nil while raft.NewRaft is starting it). Cluster management
// changes its configuration, bootstraps it and observes it through it; requests never do.
func (n *Replica) Raft() *raft.Raft { return n.fsmRaft.Load() }

// goFunc runs f on a goroutine Close waits for. Once Close has begun it starts nothing: a
// late start would race Close's Wait.
func (n *Replica) goFunc(f func()) {
	n.goMu.Lock()
	defer n.goMu.Unlock()
	if n.goClosed {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		f()
	}()
}

// Close hands leadership to another voter if there is one, and stops raft and every goroutine
// the core started. The transport is its owner's to close (package cluster). It is idempotent.
func (n *Replica) Close() error {
	n.closeOnce.Do(func() {
		n.ready.Store(false)
		if n.raft.State() == raft.Leader && n.voters() > 1 && !n.raftStopped() {
			if err := awaitWithin(n.raft.LeadershipTransfer(), handOffWithin); err != nil {
				n.log.Warn("leadership transfer before shutdown failed", "err", err)
			}
		}
		n.closeErr = n.shutdownRaft()
		close(n.stop)
		n.goMu.Lock()
		n.goClosed = true
		n.goMu.Unlock()
		n.wg.Wait()
		n.locks.Close()
	})
	return n.closeErr
}

// handOffWithin bounds Close's wait for its leadership hand-off. raft answers it within an
// election timeout while its main loop runs, and never when the loop exited meanwhile: a
// candidate that wins as raft shuts down reports itself leader afterwards, and a transfer
// request queued then is not drained (awaitFuture).
const handOffWithin = 5 * time.Second

// awaitWithin is awaitFuture bounded by d: an error saying so once d has passed.
func awaitWithin(f raft.Future, d time.Duration) error {
	stop := make(chan struct{})
	t := time.AfterFunc(d, func() { close(stop) })
	defer t.Stop()
	if err := awaitFuture(f, stop); !errors.Is(err, node.ErrShutdown) {
		return err
	}
	return fmt.Errorf("no answer within %v", d)
}

// shutdownGrace is how long Close lets raft's shutdown wait for its replication goroutines
// before it cuts the connections they may be blocked on.
const shutdownGrace = 2 * time.Second

// shutdownRaft stops raft. raft's Shutdown waits for every replication goroutine, and one
// blocked writing to a peer that reads nothing (partitioned, paused) would hold it until the
// transport's write deadline; after shutdownGrace the cluster policy, whose transport it is, is
// told (ShutdownStalled) and may cut those connections, which fails the writes at once.
func (n *Replica) shutdownRaft() error {
	done := make(chan error, 1)
	go func() { done <- n.raft.Shutdown().Error() }()
	select {
	case err := <-done:
		return err
	case <-time.After(shutdownGrace):
	}
	n.cluster.ShutdownStalled(shutdownGrace)
	return <-done
}

func (n *Replica) voters() int { return voterCount(n.raft) }

// voterCount counts the voters of r's newest configuration (hashicorp/raft keeps a copy of it in an
// atomic value: no trip through raft's main loop).
func voterCount(r *raft.Raft) int {
	f := r.GetConfiguration()
	if f.Error() != nil {
		return 0
	}
	c := 0
	for _, s := range f.Configuration().Servers {
		if s.Suffrage == raft.Voter {
			c++
		}
	}
	return c
}

// watchLeadership follows raft's leadership changes. On gaining it, the node first waits for a
// barrier (every entry of earlier terms applied) before it serves: no answer may come from a
// table that misses a committed write.
func (n *Replica) watchLeadership() {
	ch := n.raft.LeaderCh()
	for {
		select {
		case <-n.stop:
			return
		case isLeader := <-ch:
			gen := n.leaderGen.Add(1)
			n.group.wakeFinisher() // raft answers the batches in flight now, unapplied
			n.ready.Store(false)
			lost := n.notLeader()
			n.mu.Lock()
			n.locks.Demote(lost) // no waiter is left without an answer
			n.mu.Unlock()
			n.leaderChange.notify()
			if !isLeader {
				n.log.Info("lost leadership")
				continue
			}
			n.goFunc(func() { n.becomeReady(gen) })
		}
	}
}

func (n *Replica) becomeReady(gen uint64) {
	var term uint64
	for n.leaderGen.Load() == gen {
		// The barrier completes the table for the term it was appended in: the term read before
		// and after it pins that term down.
		term = n.raft.CurrentTerm()
		err := n.waitFuture(n.raft.Barrier(n.cfg.ApplyTimeout))
		if err == nil && n.raft.CurrentTerm() == term {
			break
		}
		if err == nil {
			continue // leadership was lost and won again meanwhile: a barrier in the new term
		}
		if errors.Is(err, raft.ErrNotLeader) || errors.Is(err, raft.ErrLeadershipLost) || errors.Is(err, raft.ErrRaftShutdown) {
			return
		}
		n.log.Warn("barrier after election failed; retrying", "err", err)
		select {
		case <-n.stop:
			return
		case <-time.After(50 * time.Millisecond):
		}
	}
	n.mu.Lock()
	if n.leaderGen.Load() != gen {
		n.mu.Unlock()
		return
	}
	if n.retired.Load() || n.diskFailed() != nil {
		n.mu.Unlock()
		return
	}
	n.locks.Promote()
	n.readyTerm.Store(term)
	n.ready.Store(true)
	n.mu.Unlock()
	n.leaderChange.notify()
	n.cluster.Ready() // a new leader records its own client address (forwarding, redirects)
	n.log.Info("leader ready", "term", term, "applied", n.raft.AppliedIndex())
}

// NotLeader is the error a request gets while this node is not a ready leader: it names the
// leader this node knows of.
func (n *Replica) NotLeader() error { return n.notLeader() }

// leaseClock is now on the clock of the table's lease deadlines (fsm.Lock.Deadline): nanoseconds
// since this node started. Every node keeps its own: a lease ends LeaseMs after the node applied
// the entry that set it.
func (n *Replica) leaseClock(now time.Time) int64 { return int64(now.Sub(n.epoch)) }

// LeaseNow is leaseClock at Config.Now's now.
func (n *Replica) LeaseNow() int64 { return n.leaseClock(n.cfg.Now()) }

func (n *Replica) notLeader() error {
	select {
	case <-n.stop:
		return node.ErrShutdown
	default:
	}
	if err := n.diskFailed(); err != nil {
		return err // raft is stopped: no leader this node knows of is worth naming
	}
	addr, id := n.raft.LeaderWithID()
	if id == raft.ServerID(n.cfg.ID) {
		// We are the leader but not ready yet (barrier pending): say there is none for now.
		return &node.NotLeaderError{}
	}
	return &node.NotLeaderError{LeaderID: string(id), LeaderAddr: string(addr)}
}

// IsLeader reports whether this node is the leader and ready to serve.
func (n *Replica) IsLeader() bool { return n.ready.Load() }

// Leader returns the ID and raft address of the leader this node knows of.
func (n *Replica) Leader() (id, raftAddr string) {
	addr, sid := n.raft.LeaderWithID()
	return string(sid), string(addr)
}

// Snapshot asks raft for a snapshot now (and the log compaction that follows it).
func (n *Replica) Snapshot() error {
	if err := n.waitFuture(n.raft.Snapshot()); err != nil && !errors.Is(err, raft.ErrNothingNewToSnapshot) {
		return fmt.Errorf("snapshot: %w", err)
	}
	return nil
}

// TableDump writes this node's applied table in the snapshot encoding (key order, so equal
// tables give equal bytes). Tests compare nodes with it; it reads local state, possibly stale.
func (n *Replica) TableDump(w io.Writer) error {
	n.mu.Lock()
	snap := n.mu.machine.Snapshot()
	n.mu.Unlock()
	_, err := snap.WriteTo(w)
	return err
}

// ReadTable calls fn with this node's applied table under the view lock: cluster management
// reads the member table, the cluster ID and the applied index with it, and a backup takes
// its snapshot. fn must be quick, must not block, and must not keep m.
func (n *Replica) ReadTable(fn func(m *fsm.Machine)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	fn(n.mu.machine)
}

// LocalLookup reads key from this node's applied table without any leadership check: stale on
// a follower, for READONLY connections and tests.
func (n *Replica) LocalLookup(key []byte) (fsm.Lock, time.Duration, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return viewReader{n: n, now: n.cfg.Now()}.Lookup(key)
}

// ExecLocal evaluates a read against this node's applied table without any leadership check:
// stale on a follower. eval must not block.
func (n *Replica) ExecLocal(eval func(node.View)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	eval(n.viewLocked())
}

// Digest returns this node's applied index and a SHA-256 of its lock table and member
// addresses (the snapshot encoding without the applied index): equal tables, equal digests.
func (n *Replica) Digest() (applied uint64, sum string) {
	n.mu.Lock()
	snap := n.mu.machine.Snapshot()
	applied = n.mu.machine.Applied()
	n.mu.Unlock()
	h := sha256.New()
	if _, err := snap.WriteTableTo(h); err != nil {
		return applied, ""
	}
	return applied, hex.EncodeToString(h.Sum(nil))
}
