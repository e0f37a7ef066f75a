package powerloss

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/locks"
	"github.com/raftlock/raftlock/raftnode"
	"github.com/raftlock/raftlock/store"
	"github.com/raftlock/raftlock/tests/testutil"
)

// The directories of a node's stores on its filesystem: one store for all three (as
// cmd/raftlock runs it), or one store per role, so that a broken run can drop the syncs of
// one role's pebble alone (syncfs_test.go).
const (
	dirShared    = "data"
	dirLog       = "log"
	dirStable    = "stable"
	dirSnapshots = "snap"
)

// Timings: elections in tens of milliseconds, a snapshot every few dozen entries and the log
// cut right behind it, so that cuts land in every phase.
const (
	heartbeat         = 30 * time.Millisecond
	election          = 30 * time.Millisecond
	leaderLease       = 15 * time.Millisecond
	commitTimeout     = 2 * time.Millisecond
	snapshotThreshold = 48
	snapshotInterval  = 10 * time.Millisecond
	trailingLogs      = 16
	segmentSize       = 16 << 10 // a few dozen records a segment: rollovers under every cut
	inmemTimeout      = 100 * time.Millisecond
	waitReady         = 10 * time.Second
)

// options shape one round.
type options struct {
	nodes int
	split bool     // one store per role instead of one for all three
	drop  dropRule // the sync a broken run drops
	// membership: a node is removed and added back again and again during the round.
	membership bool
	// storeChecks: compare each store with what it acknowledged after every restart.
	storeChecks bool
}

// cluster is one round's in-process cluster.
type cluster struct {
	opts   options
	logger *slog.Logger
	nodes  []*pnode
	report func(format string, args ...any)
	stats  *cutStats
	// changing is set while a configuration change runs (membership_test.go).
	changing atomic.Bool
}

// pnode is one node: its identity, its record of acknowledged writes across incarnations and
// the incarnation running now.
type pnode struct {
	id   string
	addr raft.ServerAddress
	d    *durability
	mu   sync.Mutex
	cur  *incarnation // nil while the node is down
}

// incarnation is one life of a node: from a start on a filesystem to the power cut that ends it.
type incarnation struct {
	fence  *fence
	mem    *vfs.MemFS
	stores []*store.Store
	rep    *raftnode.Replica
	inmem  *raft.InmemTransport
	busy   *inFlight
}

func (n *pnode) current() *incarnation {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cur
}

// fenceOf is the fence of the incarnation at addr, or nil if it is down.
func (c *cluster) fenceOf(addr raft.ServerAddress) *fence {
	for _, n := range c.nodes {
		if n.addr == addr {
			if inc := n.current(); inc != nil {
				return inc.fence
			}
			return nil
		}
	}
	return nil
}

func newCluster(opts options, report func(format string, args ...any), stats *cutStats) (*cluster, error) {
	c := &cluster{opts: opts, logger: testutil.RaftLogger(), report: report, stats: stats}
	var servers []raft.Server
	for i := 1; i <= opts.nodes; i++ {
		id := fmt.Sprintf("n%d", i)
		n := &pnode{id: id, addr: raft.ServerAddress("inmem-" + id)}
		n.d = newDurability(id, opts.storeChecks, report)
		c.nodes = append(c.nodes, n)
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(id), Address: n.addr})
	}
	for _, n := range c.nodes {
		if err := c.start(n, vfs.NewCrashableMem(), false); err != nil {
			c.close()
			return nil, err
		}
		// The nodes bootstrapped before n may already have elected a leader and replicated
		// the same configuration to n: its state then came from that leader, which is what
		// bootstrapping would have written.
		err := n.current().rep.Raft().BootstrapCluster(raft.Configuration{Servers: servers}).Error()
		if err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			c.close()
			return nil, fmt.Errorf("bootstrap %s: %w", n.id, err)
		}
	}
	// Switch to the current log format, as cluster management does once every member reads it;
	// with elections this short, the leader may change under the switch.
	err := testutil.Poll(waitReady, 2*time.Millisecond, func() error {
		l := c.readyLeader()
		if l == nil {
			return errors.New("no ready leader")
		}
		if l.rep.Format() >= fsm.FormatCurrent {
			return nil
		}
		return l.rep.SwitchFormat(fsm.FormatCurrent)
	})
	if err != nil {
		c.close()
		return nil, fmt.Errorf("switch to the current log format: %w", err)
	}
	return c, nil
}

func (c *cluster) storeConfig(dir string, fs vfs.FS) store.Config {
	return store.Config{
		Dir: dir, FS: fs, Logger: c.logger,
		CacheSize: 1 << 20, MemTableSize: 1 << 20, SegmentSize: segmentSize,
	}
}

// start starts an incarnation of n on mem. restarted says mem is a crash clone: the stores are
// checked against what they acknowledged before raft sees them.
func (c *cluster) start(n *pnode, mem *vfs.MemFS, restarted bool) error {
	var fs vfs.FS = mem
	if c.opts.drop != dropNone {
		fs = syncDropFS{FS: mem, rule: c.opts.drop, dropped: &c.stats.droppedSyncs}
	}
	inc := &incarnation{fence: &fence{}, mem: mem, busy: &inFlight{}}
	dirs := []string{dirShared}
	if c.opts.split {
		dirs = []string{dirLog, dirStable, dirSnapshots}
	}
	for _, dir := range dirs {
		s, err := store.Open(c.storeConfig(dir, fs))
		if err != nil {
			closeStores(inc.stores)
			c.report("%s does not restart: %v", n.id, err)
			return fmt.Errorf("%s: open store: %w", n.id, err)
		}
		inc.stores = append(inc.stores, s)
	}
	logs, stable, snaps := inc.stores[0], inc.stores[0], inc.stores[0]
	if c.opts.split {
		stable, snaps = inc.stores[1], inc.stores[2]
	}
	snapStore := snaps.Snapshots(2)
	var newest uint64 // the newest snapshot's index after a cut
	if restarted {
		first, _ := logs.FirstIndex()
		last, _ := logs.LastIndex()
		var snap uint64
		metas, err := snapStore.List()
		if err != nil {
			c.report("%s: list snapshots after the cut: %v", n.id, err)
		} else if len(metas) > 0 {
			snap = metas[0].Index
		}
		newest = snap
		// Every listed snapshot must read back whole and decode: raft restores the newest that
		// does, and an older one under a log compacted past it is a hole it panics on.
		for _, m := range metas {
			if err := readSnapshot(snapStore, m); err != nil {
				c.report("%s's snapshot %s (index %d) is listed but unreadable after the cut: %v", n.id, m.ID, m.Index, err)
			}
		}
		ok := n.d.checkRestored(func(key string) ([]byte, bool) {
			v, err := stable.Get([]byte(key))
			return v, err == nil
		}, first, last, snap, func(index uint64) (uint64, bool) {
			var l raft.Log
			if err := logs.GetLog(index, &l); err != nil {
				return 0, false
			}
			return l.Term, true
		})
		if !ok { // raft would panic on a log it cannot replay: the node stays down
			closeStores(inc.stores)
			return fmt.Errorf("%s: stores inconsistent after the cut", n.id)
		}
	}
	_, inmem := raft.NewInmemTransportWithTimeout(n.addr, inmemTimeout)
	inc.inmem = inmem
	trans := &fencedTransport{InmemTransport: inmem, self: inc.fence, peer: c.fenceOf}
	cfg := raftnode.Config{
		ID:                 n.id,
		HeartbeatTimeout:   heartbeat,
		ElectionTimeout:    election,
		LeaderLeaseTimeout: leaderLease,
		CommitTimeout:      commitTimeout,
		MaxAppendEntries:   64,
		SnapshotThreshold:  snapshotThreshold,
		SnapshotInterval:   snapshotInterval,
		TrailingLogs:       trailingLogs,
		ApplyTimeout:       time.Second,
		Logger:             c.logger,
	}
	cfg.Locks = locks.New(locks.Config{ApplyTimeout: cfg.ApplyTimeout, Logger: c.logger})
	st := raftnode.Stores{
		Log:       logWatch{LogStore: logs, d: n.d, fence: inc.fence, busy: inc.busy},
		Stable:    stableWatch{StableStore: stable, d: n.d, fence: inc.fence},
		Snapshots: snapWatch{SnapshotStore: snapStore, d: n.d, fence: inc.fence, busy: inc.busy},
		Health:    logs.Health,
	}
	rep, err := raftnode.New(cfg, st, trans)
	if err != nil {
		inmem.Close()
		closeStores(inc.stores)
		c.report("%s does not restart: %v", n.id, err)
		return fmt.Errorf("%s: %w", n.id, err)
	}
	inc.rep = rep
	if restarted && debug {
		st := rep.Raft().Stats()
		first, _ := logs.FirstIndex()
		last, _ := logs.LastIndex()
		fmt.Fprintf(os.Stderr, "powerloss debug: %s restarted: log [%d, %d], newest snapshot %d, raft snapshot %s applied %s\n",
			n.id, first, last, newest, st["last_snapshot_index"], st["applied_index"])
	}
	if restarted && newest > 0 {
		if got := rep.Raft().Stats()["last_snapshot_index"]; got != strconv.FormatUint(newest, 10) {
			c.report("%s restarted from snapshot %s, not from the newest, %d", n.id, got, newest)
		}
	}
	// Wire before publishing: a peer that finds the fence finds the transport connected.
	for _, o := range c.nodes {
		if o == n {
			continue
		}
		if oi := o.current(); oi != nil {
			oi.inmem.Connect(n.addr, inmem)
			inmem.Connect(o.addr, oi.inmem)
		}
	}
	n.mu.Lock()
	n.cur = inc
	n.mu.Unlock()
	return nil
}

func closeStores(ss []*store.Store) {
	for _, s := range ss {
		_ = s.Close()
	}
}

// cut takes the power from victims at once: under every victim's fence it takes a crash clone
// of each filesystem, keeping what was synced and, with probability unsynced[i] percent, each
// block and directory entry that was not (rng decides). Then it stops what ran on the old
// filesystems. It returns the clones, to restart on.
func (c *cluster) cut(victims []*pnode, unsynced []int, rng *rand.Rand) []*vfs.MemFS {
	incs := make([]*incarnation, len(victims))
	for i, n := range victims {
		incs[i] = n.current()
	}
	leader := c.readyLeader()
	for _, inc := range incs {
		inc.fence.mu.Lock()
	}
	clones := make([]*vfs.MemFS, len(victims))
	for i, inc := range incs {
		inc.fence.dead = true
		c.stats.noteCut(inc, inc == leader, leader == nil, c.changing.Load())
		cfg := vfs.CrashCloneCfg{UnsyncedDataPercent: unsynced[i]}
		if unsynced[i] > 0 {
			cfg.RNG = rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		}
		clones[i] = inc.mem.CrashClone(cfg)
	}
	for _, inc := range incs {
		inc.fence.mu.Unlock()
	}
	for _, n := range victims {
		n.mu.Lock()
		inc := n.cur
		n.cur = nil
		n.mu.Unlock()
		c.isolate(n, inc)
	}
	for _, inc := range incs {
		c.stop(inc)
	}
	return clones
}

// isolate cuts an incarnation's links both ways, so that peers fail fast instead of waiting for
// the in-memory transport's timeout.
func (c *cluster) isolate(n *pnode, inc *incarnation) {
	inc.inmem.DisconnectAll()
	for _, o := range c.nodes {
		if oi := o.current(); o != n && oi != nil {
			oi.inmem.Disconnect(n.addr)
		}
	}
}

// stop ends an incarnation whose power is off. The core's Close tries to hand leadership over
// first, which fails at once on the fenced transport. Not raft's Shutdown first: a candidate
// that wins its election while raft shuts down reports itself leader afterwards, and Close's
// hand-off then waits on a future nobody serves (seen under -race, seed 33) until its bound.
func stop(inc *incarnation) {
	_ = inc.rep.Close()
	inc.inmem.Close()
	closeStores(inc.stores)
}

// stopWithin bounds an incarnation's stop: a Close that does not return (it once waited for
// ever on a hand-off raft never answered; Replica.Close bounds that wait now) is reported, not
// left to the test binary's timeout.
const stopWithin = 30 * time.Second

// stop is stop(inc), reported if it takes longer than stopWithin (its goroutine is left behind).
func (c *cluster) stop(inc *incarnation) {
	done := make(chan struct{})
	go func() {
		stop(inc)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(stopWithin):
		c.report("an incarnation's Close did not return within %v%s", stopWithin, c.describe())
	}
}

// close stops every running incarnation (the end of a round).
func (c *cluster) close() {
	for _, n := range c.nodes {
		n.mu.Lock()
		inc := n.cur
		n.cur = nil
		n.mu.Unlock()
		if inc != nil {
			inc.fence.mu.Lock()
			inc.fence.dead = true
			inc.fence.mu.Unlock()
			c.isolate(n, inc)
			if inc.rep != nil {
				c.stop(inc)
			}
		}
	}
}

// readyLeader is the incarnation that leads and serves now, or nil.
func (c *cluster) readyLeader() *incarnation {
	var found *incarnation
	for _, n := range c.nodes {
		if inc := n.current(); inc != nil && inc.rep.IsLeader() {
			if found != nil {
				return nil // two think they lead: an election is settling
			}
			found = inc
		}
	}
	return found
}

// leader waits up to timeout for a ready leader.
func (c *cluster) leader(timeout time.Duration) (*incarnation, error) {
	var l *incarnation
	err := testutil.Poll(timeout, 2*time.Millisecond, func() error {
		if l = c.readyLeader(); l == nil {
			return errors.New("no ready leader")
		}
		return nil
	})
	return l, err
}

// dumpDiff says where two table dumps (snapshot bytes) first differ, with the bytes around
// it, so that a divergence can be told from a dump written in another version.
func dumpDiff(a, b []byte) string {
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	from := max(i-16, 0)
	return fmt.Sprintf("(dumps of %d and %d bytes, versions %d and %d, first differ at byte %d: %x | %x)",
		len(a), len(b), at(a, 4), at(b, 4), i, a[from:min(i+32, len(a))], b[from:min(i+32, len(b))])
}

// at is b[i], or -1 past its end.
func at(b []byte, i int) int {
	if i < len(b) {
		return int(b[i])
	}
	return -1
}

// converged waits until every node runs, has applied the same index and holds the same table,
// and returns the digest. Otherwise it says how the nodes differ.
func (c *cluster) converged(timeout time.Duration) (string, error) {
	var digest string
	err := testutil.Poll(timeout, 5*time.Millisecond, func() error {
		var applied uint64
		var desc []string
		var first []byte
		digest = ""
		same := true
		for i, n := range c.nodes {
			inc := n.current()
			if inc == nil {
				return fmt.Errorf("%s is down", n.id)
			}
			var buf bytes.Buffer
			if err := inc.rep.TableDump(&buf); err != nil {
				return fmt.Errorf("%s: table dump: %w", n.id, err)
			}
			a := inc.rep.Stats().AppliedIndex
			d := fmt.Sprintf("%x", sha256.Sum256(buf.Bytes()))[:12]
			if i == 0 {
				applied, digest, first = a, d, buf.Bytes()
			} else if a != applied || d != digest {
				same = false
			}
			desc = append(desc, fmt.Sprintf("%s applied %d digest %s", n.id, a, d))
			if i > 0 && a == applied && d != digest {
				desc = append(desc, dumpDiff(first, buf.Bytes()))
			}
		}
		if !same {
			return fmt.Errorf("nodes differ: %v", desc)
		}
		return nil
	})
	return digest, err
}

// describe says what each node's raft is doing, for a failure to elect or converge.
func (c *cluster) describe() string {
	var b strings.Builder
	for _, n := range c.nodes {
		inc := n.current()
		if inc == nil {
			fmt.Fprintf(&b, "\n    %s: down", n.id)
			continue
		}
		st := inc.rep.Raft().Stats()
		fmt.Fprintf(&b, "\n    %s: ready=%v state=%s term=%s last=%s commit=%s applied=%s leader=%s config=%s",
			n.id, inc.rep.IsLeader(), st["state"], st["term"], st["last_log_index"], st["commit_index"],
			st["applied_index"], st["last_contact"], st["latest_configuration"])
	}
	return b.String()
}

// readSnapshot reads snapshot m whole from ss and decodes it as a lock table.
func readSnapshot(ss raft.SnapshotStore, m *raft.SnapshotMeta) error {
	meta, rc, err := ss.Open(m.ID)
	if err != nil {
		return err
	}
	defer rc.Close()
	cr := &countingReader{r: rc}
	if _, err := fsm.Restore(cr); err != nil {
		return fmt.Errorf("decode: %w", err)
	}
	if rest, err := io.Copy(io.Discard, cr); err != nil || cr.n != meta.Size {
		return fmt.Errorf("read %d bytes (%d after the table), want %d: %v", cr.n, rest, meta.Size, err)
	}
	return nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
