package cluster

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/store"
)

// The cluster's identity (DESIGN.md §10). Every node keeps, in its stable store (identityKey),
// the node ID its data dir was created with and the ID of the cluster it belongs to:
//
//   - the node ID is written on the first start, bootstrap or join, and checked on every start:
//     a data dir is never resumed under another --id;
//   - the cluster ID is chosen at random by the first leader and replicated through the log, as
//     a SetCluster command (fsm.KindSetCluster) it proposes once it is ready and finds none in
//     the table. Through the log, not at each node's bootstrap: the nodes of a --peers cluster
//     bootstrap independently, so only a committed entry can make them agree, and a joiner then
//     learns it with everything else (the entry, or a snapshot's member table). A single node's
//     first start picks its candidate at bootstrap, writes it at once and proposes that one; an
//     older cluster without one gets one from its next leader. The first applied wins: the FSM
//     refuses any other, so a cluster's ID never changes;
//   - a node with data started with --join asks that address for its cluster ID and refuses to
//     start when it is another cluster's (joinCheck); a leader asked to add a node whose client
//     address answers with another cluster ID refuses (AddServer), and never promotes a
//     non-voter whose reported cluster ID differs (Promote).

// identity is what identityKey holds (JSON).
type identity struct {
	NodeID    string `json:"node_id"`
	ClusterID string `json:"cluster_id,omitempty"`
	// BootstrapFormat is the log format of the version that created this cluster, when this
	// node bootstrapped it (or restored it from a backup): every member of a new cluster runs
	// that version, so its leader need not ask them before writing that format (format.go).
	BootstrapFormat byte `json:"bootstrap_format,omitempty"`
	// Handshake is set once this node saw its cluster in the log format from which members
	// send and require the raft handshake (handshake.go): after a restart, before it has
	// applied its log again, it still knows to send it.
	Handshake bool `json:"handshake,omitempty"`
	// Unlisted is set when the node started without state and without bootstrapping (it is to
	// be added: a --join, or a group its leader adds), and cleared once a configuration listed
	// it: until then a configuration without it, replayed after a restart, is one from before its
	// arrival, not its removal.
	Unlisted bool `json:"unlisted,omitempty"`
}

// newClusterID returns a random cluster ID: 16 random bytes in hex.
func newClusterID() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// loadIdentity reads the identity from the stable store; ok is false when none was written
// (a new dir, or one from a binary older than identities).
func loadIdentity(s raft.StableStore) (id identity, ok bool, err error) {
	b, err := s.Get(identityKey)
	switch {
	// raft's InmemStore answers a missing key with an error whose text is "not found", the
	// text raft itself matches; our store's is store.ErrKeyNotFound (same text).
	case err != nil && (errors.Is(err, store.ErrKeyNotFound) || err.Error() == "not found"):
		return identity{}, false, nil
	case err != nil:
		return identity{}, false, fmt.Errorf("read node identity: %w", err)
	case len(b) == 0:
		return identity{}, false, nil
	}
	if err := json.Unmarshal(b, &id); err != nil {
		return identity{}, false, fmt.Errorf("node identity unreadable: %w", err)
	}
	return id, true, nil
}

func saveIdentity(s raft.StableStore, id identity) error {
	b, _ := json.Marshal(id)
	if err := s.Set(identityKey, b); err != nil {
		return fmt.Errorf("write node identity: %w", err)
	}
	return nil
}

// checkIdentity runs in Start before raft starts: it refuses a data dir created for another node
// ID, records the identity of a new dir (and of one from before identities), and on a node that
// bootstraps alone chooses the cluster ID candidate. It returns the identity now stored.
func (n *Member) checkIdentity(existing bool) (identity, error) {
	id, ok, err := loadIdentity(n.stable)
	if err != nil {
		return identity{}, err
	}
	if ok && id.NodeID != n.cfg.Core.ID {
		return identity{}, fmt.Errorf("data dir belongs to node %q, not %q: start it with --id %s, or give this node its own empty --dir",
			id.NodeID, n.cfg.Core.ID, id.NodeID)
	}
	if ok {
		return id, nil
	}
	id = identity{NodeID: n.cfg.Core.ID}
	switch {
	case existing:
		n.log.Info("recording the node identity of a data dir created before identities", "node_id", n.cfg.Core.ID)
	case n.cfg.Bootstrap:
		id.BootstrapFormat = fsm.FormatCurrent
		if len(n.cfg.Peers) == 0 {
			id.ClusterID = newClusterID()
		}
	default:
		id.Unlisted = true
	}
	return id, saveIdentity(n.stable, id)
}

// reportStartFlags says, once raft has loaded its configuration, what this start does with
// --peers and --join and why: a node with data resumes and ignores both, and says so when they
// ask for something else; a node that forms a new cluster alone says so loudly, since that is
// also what a node meant to join does when --join was forgotten.
func (n *Member) reportStartFlags(id identity) {
	switch {
	case n.hadStateAtStart && len(n.cfg.Peers) > 0:
		cur := n.raft().GetConfiguration()
		if cur.Error() != nil {
			return
		}
		if samePeers(cur.Configuration(), n.cfg.Peers) {
			n.log.Info("--peers ignored: this node resumes from its data dir, whose configuration is the same")
			return
		}
		n.log.Warn("--peers differs from this node's configuration and is IGNORED: the node resumes from its data dir. "+
			"Change membership on the running cluster instead: RAFT ADD id raftaddr, RAFT REMOVE id (see RAFT MEMBERS)",
			"peers", peersString(n.cfg.Peers), "configuration", configString(cur.Configuration()))
	case !n.hadStateAtStart && n.cfg.Bootstrap && len(n.cfg.Peers) == 0:
		n.log.Warn("forming a NEW single-node cluster with its own identity: if this node was meant to join an existing "+
			"cluster, stop it, empty its --dir and start it with --join <client address of a member>",
			"cluster_id", id.ClusterID, "node_id", n.cfg.Core.ID)
	case !n.hadStateAtStart && n.cfg.Bootstrap:
		n.log.Info("bootstrapping a new cluster with --peers; its first leader chooses the cluster ID",
			"peers", peersString(n.cfg.Peers))
	}
}

func samePeers(c raft.Configuration, peers []Peer) bool {
	if len(c.Servers) != len(peers) {
		return false
	}
	for _, p := range peers {
		if !slices.ContainsFunc(c.Servers, func(s raft.Server) bool {
			return string(s.ID) == p.ID && string(s.Address) == p.RaftAddr
		}) {
			return false
		}
	}
	return true
}

func peersString(peers []Peer) string {
	var parts []string
	for _, p := range peers {
		parts = append(parts, p.ID+"="+p.RaftAddr)
	}
	return strings.Join(parts, ",")
}

func configString(c raft.Configuration) string {
	var parts []string
	for _, s := range c.Servers {
		part := string(s.ID) + "=" + string(s.Address)
		if s.Suffrage != raft.Voter {
			part += "(nonvoter)"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ",")
}

// ClusterID is the ID of the cluster this node belongs to: its applied table's, or before the
// table has one, the one its stable store remembers (empty while a new cluster has none yet).
func (n *Member) ClusterID() string {
	if id := n.tableClusterID(); id != "" {
		return id
	}
	if p := n.storedCluster.Load(); p != nil {
		return *p
	}
	return ""
}

// tableClusterID is the cluster ID of this node's applied table ("" before the core runs).
func (n *Member) tableClusterID() (id string) {
	if core := n.core.Load(); core != nil {
		core.ReadTable(func(m *fsm.Machine) { id = m.ClusterID() })
	}
	return id
}

// noteClusterID is told the table's cluster ID after an apply or a restore; it keeps the
// stable store's copy in step (with no lock held: it does I/O).
func (n *Member) noteClusterID(id string) {
	if id == "" {
		return
	}
	if p := n.storedCluster.Load(); p != nil && *p == id {
		return
	}
	if p := n.storedCluster.Load(); p != nil && *p != "" {
		// Only a candidate that lost to another bootstrapping peer's, or a dir from before
		// identities, gets here: a committed ID never changes.
		n.log.Warn("the log names another cluster ID than this node's stable store; adopting the log's", "stored", *p, "log", id)
	}
	if err := n.rememberIdentity(id); err != nil {
		n.log.Warn("remembering the cluster ID failed", "err", err)
		return
	}
	n.log.Info("cluster identity", "cluster_id", id, "node_id", n.cfg.Core.ID)
}

// rememberIdentity writes this node's identity to the stable store, with cluster ID cluster
// ("": the one stored), and then makes cluster the stored one. identityMu orders the writers
// (the apply path, the transport's first handshake after the format switch), so that neither
// writes over what the other recorded.
func (n *Member) rememberIdentity(cluster string) error {
	n.identityMu.Lock()
	defer n.identityMu.Unlock()
	if p := n.storedCluster.Load(); cluster == "" && p != nil {
		cluster = *p
	}
	err := saveIdentity(n.stable, identity{NodeID: n.cfg.Core.ID, ClusterID: cluster, BootstrapFormat: n.bootstrapFormat,
		Handshake: n.helloKnown.Load(), Unlisted: !n.member.Load()})
	if err == nil && cluster != "" {
		n.storedCluster.Store(&cluster)
	}
	return err
}

// ensureClusterID is run by the ready leader: a table without a cluster ID (a new cluster, or
// one from before identities) gets one, this node's candidate if it has one.
func (n *Member) ensureClusterID(ctx context.Context) bool {
	if !n.isLeader() || n.format() < fsm.FormatTyped {
		return true // an older member could not read the entry: after the switch (format.go)
	}
	if n.tableClusterID() != "" {
		return true
	}
	id := ""
	if p := n.storedCluster.Load(); p != nil {
		id = *p
	}
	if id == "" {
		id = newClusterID()
	}
	err := n.core.Load().ExecTable(ctx, nil, func(m *fsm.Machine) []fsm.Command {
		if m.ClusterID() != "" {
			return nil
		}
		return []fsm.Command{{Kind: fsm.KindSetCluster, Key: []byte(id)}}
	})
	if err != nil {
		n.log.Warn("recording the cluster ID failed; retrying", "err", err)
		return false
	}
	return true
}

// joinCheck runs in Start on a node that has data and was given Join: it asks the member at that
// address for its cluster ID and refuses to start when it is another cluster's than this
// node's. A node already in that cluster resumes (Join is ignored); an unreachable address is
// reported and the node resumes.
func (n *Member) joinCheck(ctx context.Context, id identity) error {
	st, err := n.peerAPI.State(ctx, n.cfg.Join)
	theirs := st.ClusterID
	switch {
	case err != nil:
		n.log.Warn("--join ignored: this node has data and resumes; the --join address did not answer, so its cluster was not checked",
			"join", n.cfg.Join, "err", err)
	case id.ClusterID != "" && theirs != "" && theirs != id.ClusterID:
		return fmt.Errorf("%w: this data dir belongs to cluster %s, and --join %s is a member of cluster %s. "+
			"A node cannot move between clusters with its data: to add it to cluster %s, stop it, empty its --dir "+
			"(its data is cluster %s's) and start it again with --join; to resume it in its own cluster, start it without --join",
			node.ErrForeignCluster, id.ClusterID, n.cfg.Join, theirs, theirs, id.ClusterID)
	default:
		n.log.Info("--join ignored: this node has data and resumes as a member of its cluster", "cluster_id", id.ClusterID, "join", n.cfg.Join)
	}
	return nil
}
