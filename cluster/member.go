// Package cluster is what belongs to a node and its cluster rather than to the replication
// core (raftnode): membership (join, announce, removal, promotion, quorum checks),
// configuration changes, the node's and the cluster's identity, the log-format switch of a
// rolling upgrade, backup, restore and offline recovery, the raft transport with its TLS guard
// and handshake, and the typed client that asks other members on their client ports.
//
// Start builds a Member around a core: it checks the data dir's identity, attaches the
// transport's peer gate, starts the core with this package's hooks (raftnode.ClusterPolicy),
// bootstraps a new cluster, and runs the membership loop (membership.go). What it needs of the
// core it gets through a few exported methods, each for one reason:
//   - Raft: configuration changes, bootstrap, observers, raft's indexes;
//   - ReadTable: the applied member table, cluster ID and applied index, under the view lock;
//   - Exec and ExecTable: proposals of member addresses and of the cluster ID;
//   - IsLeader, NotLeader and VerifyLeader: leadership as requests see it;
//   - WaitFuture and RaftError: waiting for raft's futures, and answering as proposals do;
//   - Format and SwitchFormat: the log format, and the switch to a newer one;
//   - Retire: a node found removed stops serving;
//   - Members, LeaderClient, Stats, LeaseNow, Snapshot, Digest, Close: reads and actions the
//     core has for everyone.
//
// Lock order: changes (membership changes and groups plans, on a leader) is taken first, then
// memberWrites, then the core's view lock (taken through ReadTable and ExecTable), which nests
// inside nothing else of this package; identityMu and peerState's mu nest inside nothing and
// guard no call into the core.
package cluster

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/raftnode"
)

// Config configures a Member. A zero field means the documented default.
type Config struct {
	// Core configures the replication core; its ID, Now and Logger are this node's.
	Core raftnode.Config
	// RaftAddr is the address other nodes dial for raft traffic (the transport's advertised
	// address). Required when Bootstrap is set.
	RaftAddr string
	// ClientAddr is the client (RESP) address this node advertises; the leader records its own
	// in the replicated member table so followers can forward to it.
	ClientAddr string
	// Bootstrap forms a new cluster of Peers on a node without state. A node with state ignores it.
	Bootstrap bool
	// Peers are the initial voters when bootstrapping; empty means this node alone.
	Peers []Peer
	// Join is the client (RESP) address of any member of an existing cluster: a node without
	// state adds itself through it, as a non-voter that is promoted once caught up. A node with
	// state ignores it.
	Join string
	// PeerUser and PeerPassword, when PeerPassword is set, authenticate this node's own calls to
	// other nodes' client ports (RAFT ANNOUNCE, ADD, PROMOTE, STATS, MEMBERS) with AUTH, for
	// clusters whose clients need a password. The user needs @admin.
	PeerUser     string
	PeerPassword string
	// ClientTLS, when set, is how this node dials other nodes' client ports (RAFT ADD and
	// PROMOTE on join, RAFT STATS and MEMBERS when it may have been removed): set it when the
	// cluster's client ports speak TLS. nil: plain TCP.
	ClientTLS *tls.Config
	// InsecureRaft says that this node runs raft without mutual TLS on an address that is not
	// loopback, as its operator allowed (--insecure-raft): Stats reports it (INFO raft
	// raft_insecure:1).
	InsecureRaft bool
	// AddressBook, for the member of a raft group other than 0 on a node of several groups, is
	// the same node's member of group 0, whose member table holds every member's client address
	// (members announce to group 0 alone, and every node is a member of every group under one
	// ID): this member's MemberAddr, Members and LeaderClient read their addresses there.
	AddressBook *Member
	// MaxMembers bounds the replicated member table (the client addresses members announce):
	// the leader records no address for a new member past it. Default 1024.
	MaxMembers int
}

// Peer is one initial voter.
type Peer struct {
	ID       string
	RaftAddr string
}

// defaultMaxMembers is Config.MaxMembers's default.
const defaultMaxMembers = 1024

// Validate reports the first invalid field by name; the core's are checked by raftnode.New.
func (c Config) Validate() error {
	if c.Bootstrap && c.RaftAddr == "" && len(c.Peers) == 0 {
		return errors.New("cluster: Config.RaftAddr is required to bootstrap")
	}
	for i, p := range c.Peers {
		if p.ID == "" || p.RaftAddr == "" {
			return fmt.Errorf("cluster: Config.Peers[%d] needs an ID and a RaftAddr", i)
		}
		if !fsm.ValidNodeID(p.ID) {
			return fmt.Errorf("cluster: Config.Peers[%d].ID %q: want 1 to 128 printable characters without spaces", i, p.ID)
		}
	}
	if c.MaxMembers < 0 {
		return errors.New("cluster: Config.MaxMembers must not be negative")
	}
	return nil
}

// Member is this node's membership of its cluster, around the replication core it runs.
type Member struct {
	cfg   Config
	log   *slog.Logger
	trans raft.Transport
	// core is the replication core, set once raftnode.New returns: the hooks and the
	// transport's gate may run before (raft restores a snapshot inside NewRaft, peers dial as
	// soon as the transport listens), and find it nil then.
	core      atomic.Pointer[raftnode.Replica]
	stable    raft.StableStore
	snapshots raft.SnapshotStore
	// logs is the log store under the core, for its figures (storeStats); probe is ProbeStore's
	// last result, shared by every asker (probe.go).
	logs  raft.LogStore
	probe storeProbe
	// committedConf is the newest configuration known to be committed (removal.go).
	committedConf committedConfig
	// planRun is the number of groups of the newest groups plan every member was found to run
	// (plannedGroupsRun), on this node while it led group 0.
	planRun atomic.Int64
	// changes serializes, on a leader, the membership changes this node makes (RAFT ADD,
	// PROMOTE, REMOVE) with the plans of more groups (PlanGroups), whose voters are a
	// configuration it reads: a plan never names voters a change is replacing.
	changes sync.Mutex
	// formatWarned is set once the node said why the cluster stays in an older format
	// (format.go); bootstrapFormat is the identity's BootstrapFormat: set when this node
	// created its cluster.
	formatWarned    atomic.Bool
	bootstrapFormat byte

	// removed is closed once this node learns it was removed; member is set once a committed
	// configuration listed it (or it started with state); memberWake tells runMembership
	// something it watches changed; hints counts the member hints, for Stats.
	removed    chan struct{}
	removeOnce sync.Once
	member     atomic.Bool
	memberWake chan struct{}
	hints      atomic.Int64
	// memberWrites serializes SetMemberAddr, whose check of Config.MaxMembers and proposal
	// must not interleave with another's (two new members at the last free place).
	memberWrites sync.Mutex
	// hadState: the stores held raft state when the node started, or it bootstrapped them;
	// hadStateAtStart: they held it when the node started (identity.go).
	hadState        bool
	hadStateAtStart bool
	// storedCluster is the cluster ID this node's stable store holds (identity.go): its
	// bootstrap candidate, or the one it last applied.
	storedCluster atomic.Pointer[string]
	// adoptedCluster is the cluster ID a member's raft handshake named while this node had
	// none (handshake.go): it refuses any other from then on.
	adoptedCluster atomic.Pointer[string]
	// helloKnown: this node's cluster sends and requires the raft handshake (identity's
	// Handshake); identityMu orders the writes of the identity (rememberIdentity).
	helloKnown atomic.Bool
	identityMu sync.Mutex
	// peers tracks which voters the leader can reach, and which non-voters to promote (quorum.go).
	peers   peerState
	peerAPI *peerClient // asks the other nodes on their client ports (peerclient.go)

	closing   atomic.Bool
	stop      chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// Start checks the stores' identity, starts a core on them and trans, bootstraps a new
// cluster when cfg.Bootstrap is set and the stores hold no state (otherwise it resumes), and
// starts keeping this node's place in the cluster. The Member owns trans from then on: Close
// closes it, after the core.
func Start(cfg Config, st raftnode.Stores, trans raft.Transport) (*Member, error) {
	if err := cfg.Validate(); err != nil {
		closeTransport(trans)
		return nil, err
	}
	if cfg.MaxMembers == 0 {
		cfg.MaxMembers = defaultMaxMembers
	}
	d := raftnode.DefaultConfig()
	if cfg.Core.Logger == nil {
		cfg.Core.Logger = d.Logger
	}
	if cfg.Core.Now == nil {
		cfg.Core.Now = d.Now
	}
	if cfg.Core.ApplyTimeout == 0 {
		cfg.Core.ApplyTimeout = d.ApplyTimeout
	}
	n := &Member{
		cfg:       cfg,
		log:       cfg.Core.Logger.With("component", "cluster", "id", cfg.Core.ID),
		trans:     trans,
		stable:    st.Stable,
		snapshots: st.Snapshots,
		logs:      st.Log,
		removed:   make(chan struct{}),
		// One buffered wake-up is enough: runMembership rereads everything when it runs.
		memberWake: make(chan struct{}, 1),
		peerAPI:    newPeerClient(cfg.ClientTLS, cfg.PeerUser, cfg.PeerPassword),
		stop:       make(chan struct{}),
	}
	core, ident, err := n.start(st)
	if err != nil {
		closeTransport(trans)
		return nil, err
	}
	n.core.Store(core)
	select {
	case <-n.removed: // a configuration applied inside raft.NewRaft
		core.Retire()
	default:
	}
	if n.cfg.Bootstrap && !n.hadStateAtStart {
		if err := n.bootstrap(); err != nil {
			core.Close()
			closeTransport(trans)
			return nil, err
		}
	}
	core.StandIfSoleVoter()
	n.reportStartFlags(ident)
	n.wg.Go(n.runMembership)
	return n, nil
}

// start checks the identity and starts the core.
func (n *Member) start(st raftnode.Stores) (*raftnode.Replica, identity, error) {
	existing, err := raft.HasExistingState(st.Log, st.Stable, st.Snapshots)
	if err != nil {
		return nil, identity{}, fmt.Errorf("inspect raft state: %w", err)
	}
	n.hadStateAtStart, n.hadState = existing, existing || n.cfg.Bootstrap
	ident, err := n.checkIdentity(existing)
	if err != nil {
		return nil, ident, err
	}
	// A node with state was a member, unless it has never been listed yet: one added to a
	// cluster (or a group) and restarted before the configuration that added it reached its
	// log, which replays only configurations from before its arrival.
	n.member.Store(n.hadState && !ident.Unlisted)
	if ident.ClusterID != "" {
		n.storedCluster.Store(&ident.ClusterID)
	}
	n.bootstrapFormat = ident.BootstrapFormat
	n.helloKnown.Store(ident.Handshake)
	if existing && n.cfg.Join != "" {
		ctx, cancel := context.WithTimeout(context.Background(), 2*peerTimeout)
		err := n.joinCheck(ctx, ident)
		cancel()
		if err != nil {
			return nil, ident, err
		}
	}
	n.attachTransport(n.trans) // before raft starts: its peers are checked against its configuration
	n.seedCommittedConfig()
	cfg := n.cfg.Core
	cfg.Cluster = hooks{n}
	core, err := raftnode.New(cfg, st, n.trans)
	return core, ident, err
}

func (n *Member) bootstrap() error {
	var servers []raft.Server
	peers := n.cfg.Peers
	if len(peers) == 0 {
		peers = []Peer{{ID: n.cfg.Core.ID, RaftAddr: n.cfg.RaftAddr}}
	}
	for _, p := range peers {
		servers = append(servers, raft.Server{Suffrage: raft.Voter, ID: raft.ServerID(p.ID), Address: raft.ServerAddress(p.RaftAddr)})
	}
	n.log.Info("bootstrapping cluster", "voters", len(servers))
	if err := n.raft().BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	return nil
}

// Core is the replication core this Member runs: the server serves requests through it.
func (n *Member) Core() *raftnode.Replica { return n.core.Load() }

// Close stops the membership loop, then the core (which hands leadership over first), then
// the transport. It is idempotent.
func (n *Member) Close() error {
	n.closeOnce.Do(func() {
		n.closing.Store(true)
		close(n.stop)
		n.wg.Wait()
		n.closeErr = n.core.Load().Close()
		if err := closeTransport(n.trans); err != nil && n.closeErr == nil {
			n.closeErr = err
		}
	})
	return n.closeErr
}

// closeTransport closes trans when it can be closed (raft's in-memory transport in tests can).
func closeTransport(trans raft.Transport) error {
	if c, ok := trans.(io.Closer); ok {
		return c.Close()
	}
	return nil
}

// startedRaft is the core's raft, nil before it runs: for the hooks and the transport's gate.
func (n *Member) startedRaft() *raft.Raft {
	if core := n.core.Load(); core != nil {
		return core.Raft()
	}
	return nil
}

// raft is the core's raft.
func (n *Member) raft() *raft.Raft { return n.core.Load().Raft() }

// isLeader reports whether this node is the ready leader.
func (n *Member) isLeader() bool { return n.core.Load().IsLeader() }

// notLeader is the error a request gets while this node is not the ready leader.
func (n *Member) notLeader() error { return n.core.Load().NotLeader() }

// waitFuture waits for a raft future (raftnode.Replica.WaitFuture).
func (n *Member) waitFuture(f raft.Future) error { return n.core.Load().WaitFuture(f) }

// applyError answers a failed configuration change as a failed proposal is answered.
func (n *Member) applyError(err error) error { return n.core.Load().RaftError(err) }

// format is the cluster's log format, 0 before the core runs: the transport asks from the
// moment its gate is attached, which is before raft starts (a peer may connect at once).
func (n *Member) format() byte {
	if core := n.core.Load(); core != nil {
		return core.Format()
	}
	return 0
}

// Members lists the cluster with client addresses (raftnode.Replica.Members).
func (n *Member) Members() ([]node.Member, error) {
	members, err := n.core.Load().Members()
	if book := n.cfg.AddressBook; book != nil && err == nil {
		for i := range members {
			members[i].ClientAddr, _ = book.MemberAddr(members[i].ID)
		}
	}
	return members, err
}

// LeaderClient returns the leader's ID and client address (raftnode.Replica.LeaderClient).
func (n *Member) LeaderClient() (id, clientAddr string) {
	id, clientAddr = n.core.Load().LeaderClient()
	if book := n.cfg.AddressBook; book != nil && id != "" {
		clientAddr, _ = book.MemberAddr(id)
	}
	return id, clientAddr
}

// Snapshot asks raft for a snapshot now (RAFT SNAPSHOT).
func (n *Member) Snapshot() error { return n.core.Load().Snapshot() }

// Digest summarizes this node's applied table (RAFT DIGEST).
func (n *Member) Digest() (applied uint64, sum string) { return n.core.Load().Digest() }

// Stats is the core's figures, cluster facts included (hooks.Stats).
func (n *Member) Stats() node.Stats { return n.core.Load().Stats() }

// hooks is the Member as the core's raftnode.ClusterPolicy.
type hooks struct{ n *Member }

var _ raftnode.ClusterPolicy = hooks{}

func (h hooks) Configured(index uint64, c raft.Configuration) { h.n.noteConfiguration(index, c) }

func (h hooks) Changed(clusterID string) {
	h.n.noteClusterID(clusterID)
	h.n.wakeMembership()
}

func (h hooks) Restored(clusterID string) {
	h.n.noteClusterID(clusterID)
	h.n.seedCommittedConfig()
	h.n.wakeMembership()
}

func (h hooks) Ready() { h.n.wakeMembership() }

// connAborter is the part of Transport that a stalled shutdown uses; raft's in-memory
// transport (tests) lacks it.
type connAborter interface{ AbortConnections() int }

// ShutdownStalled cuts the transport's dialed connections, on which raft's replication
// goroutines may be blocked: the writes fail at once and the shutdown goes on.
func (h hooks) ShutdownStalled(after time.Duration) {
	if a, ok := h.n.trans.(connAborter); ok {
		cut := a.AbortConnections()
		h.n.log.Warn("raft shutdown still waiting on its peers; closed the connections to them",
			"after", after, "connections", cut)
	}
}

func (h hooks) Stats(s *node.Stats) {
	n := h.n
	if s.ClusterID == "" {
		if p := n.storedCluster.Load(); p != nil {
			s.ClusterID = *p
		}
	}
	s.MemberHints = int(n.hints.Load())
	if ss, ok := n.storeStats(); ok {
		s.Store = ss
	}
	s.RaftInsecure = n.cfg.InsecureRaft
	if s.State == "Leader" {
		if r := n.core.Load(); r != nil {
			if c, err := configurationOf(r.Raft()); err == nil {
				_, s.ReachableVoters = n.voterCount(c, "")
			}
		}
	}
}
