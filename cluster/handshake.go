package cluster

import (
	"bufio"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/certs"
	"github.com/raftlock/raftlock/fsm"
)

// The raft handshake (DESIGN.md §10: peers are members). Before a raft frame crosses a
// connection, after its TLS handshake if any, the dialing node sends a hello and the accepting
// node answers:
//
//	hello:  "RLKH" version(1) | len(1) cluster ID | len(1) from node ID | len(1) to node ID
//	        [version 2: groups(2, big-endian) | layout(2, big-endian)]
//	answer: status(1: 0 ok, 1 refused) | len(1) cluster ID | len(1) reason
//
// Version 1 is followed by one raft group's frames. Version 2 is sent by a node that runs
// several raft groups (transport_mux.go), and says how many, and how many its cluster was
// created with (its layout: which groups own which slots by default): the connection then
// carries a yamux session whose streams each name their group. Nodes of different layouts
// never talk (a node started with another --groups would serve a slot from another group than
// its peers); nodes of one layout may run different numbers of groups while their cluster
// converts to more (RAFT GROUPS), and a stream of a group the accepting node does not run yet
// is refused. A single-group node refuses a session (errOneGroup): a node of several groups of
// a cluster created with one dials it again with version 1, for group 0, and takes its version
// 1 hellos as group 0's connections.
//
// The accepting node refuses a hello of another cluster (both sides know their cluster ID and
// they differ), one meant for another node ID, one whose sender is not a member of its
// configuration (unless it has none yet: it is being added), and, over TLS, one whose sender is
// not the node its certificate names. The dialing node checks the answer's cluster ID the same
// way and, over TLS, that the certificate names the member it meant to dial. A node that has no
// cluster ID yet (a new joiner) takes the first one a member's hello or answer names and
// refuses any other from then on.
//
// Over TLS the certificate is the proof (certs.NodeID); over plain TCP the hello is only a
// claim, which stops operator mistakes (a node of another cluster, a stray node formed without
// --peers on a member's address), not attackers: plain raft is for loopback or --insecure-raft.
//
// Rolling upgrades: v0.2.0 and older, which read no format newer than FormatTyped, speak raft
// frames from the first byte. The hello is sent, and required, once the cluster's log format
// is FormatBatch (or this node's stable store remembers it was: identity's Handshake), which
// the leader switches to only when every member runs a binary that reads it (format.go);
// FormatBatch and the hello both came in v0.3.0, so every such binary knows the hello. Until then an accepting node
// takes both (a raft frame's first byte is its RPC type, 0 to 3, never the hello's 'R').
const (
	helloMagic = "RLKH"
	// helloVersion is followed by one raft group's frames, helloMuxVersion by a yamux session.
	helloVersion    = 1
	helloMuxVersion = 2
	// helloFormat is the log format from which the hello is sent and required.
	helloFormat = fsm.FormatBatch
)

// Why a raft connection is refused. Each is wrapped with the details.
var (
	errForeignCluster = errors.New("raft peer of another cluster")
	errNotMember      = errors.New("raft peer is not a member")
	errWrongNode      = errors.New("raft peer is not the node expected")
	errNoHello        = errors.New("raft peer sent no handshake, which every member of this cluster sends")
	errNotStarted     = errors.New("raft is not running yet")
	errGroupsDiffer   = errors.New("raft peer's cluster was created with another number of raft groups")
	// errOneGroup is a single-group node's refusal of a session (its text starts the answer's
	// reason, which the dialer recognizes: peerRunsOneGroup).
	errOneGroup = errors.New("raft peer runs one raft group")
)

// peerRunsOneGroup reports whether err is a refusal of a session by a node that runs one group.
func peerRunsOneGroup(err error) bool { return errors.Is(err, errOneGroup) }

// hello is what the dialing node says; groups, above 0, makes it version 2 (a yamux session of
// that many raft groups, of a cluster created with layout of them, follows).
type hello struct {
	cluster, from, to string
	groups, layout    int
}

func (h hello) append(b []byte) []byte {
	b = append(b, helloMagic...)
	if h.groups > 0 {
		b = append(b, helloMuxVersion)
	} else {
		b = append(b, helloVersion)
	}
	for _, s := range []string{h.cluster, h.from, h.to} {
		b = appendShort(b, s)
	}
	if h.groups > 0 {
		b = binary.BigEndian.AppendUint16(b, uint16(h.groups))
		b = binary.BigEndian.AppendUint16(b, uint16(h.layout))
	}
	return b
}

// appendShort appends s with a one-byte length, cut at 255 bytes (IDs are at most 128).
func appendShort(b []byte, s string) []byte {
	s = s[:min(len(s), 255)]
	b = append(b, byte(len(s)))
	return append(b, s...)
}

func readShort(r io.Reader) (string, error) {
	var n [1]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return "", err
	}
	b := make([]byte, n[0])
	_, err := io.ReadFull(r, b)
	return string(b), err
}

// readHello reads a hello after its first byte (helloMagic[0]), which the caller has read.
func readHello(r io.Reader) (hello, error) {
	var head [len(helloMagic)]byte
	if _, err := io.ReadFull(r, head[1:]); err != nil {
		return hello{}, err
	}
	head[0] = helloMagic[0]
	if string(head[:]) != helloMagic {
		return hello{}, fmt.Errorf("not a raftlock raft handshake: %q", head)
	}
	var v [1]byte
	if _, err := io.ReadFull(r, v[:]); err != nil {
		return hello{}, err
	}
	if v[0] != helloVersion && v[0] != helloMuxVersion {
		return hello{}, fmt.Errorf("raft handshake version %d; this node speaks %d and %d", v[0], helloVersion, helloMuxVersion)
	}
	var h hello
	for _, p := range []*string{&h.cluster, &h.from, &h.to} {
		s, err := readShort(r)
		if err != nil {
			return hello{}, err
		}
		*p = s
	}
	if v[0] == helloMuxVersion {
		var g [4]byte
		if _, err := io.ReadFull(r, g[:]); err != nil {
			return hello{}, err
		}
		h.groups, h.layout = int(binary.BigEndian.Uint16(g[:2])), int(binary.BigEndian.Uint16(g[2:]))
		if h.groups == 0 || h.layout == 0 || h.layout > h.groups {
			return hello{}, fmt.Errorf("raft handshake version 2 of %d raft groups created with %d", h.groups, h.layout)
		}
	}
	return h, nil
}

// peerGate is what the stream layer asks the node about the other end of a raft connection.
// Member implements it; until one is attached (NewTransport's caller passes the transport to
// Start), every connection is refused.
type peerGate interface {
	// helloRequired reports whether the cluster's members all know the hello.
	helloRequired() bool
	// handshakeCluster is this node's cluster ID, "" while it has none.
	handshakeCluster() string
	// adoptCluster makes id this node's cluster ID for handshakes if it has none yet, or
	// refuses id if it is another.
	adoptCluster(id string) error
	// localID is this node's ID.
	localID() string
	// admits refuses a node that is not a member of the newest configuration, unless this
	// node has none yet (it is being added).
	admits(id string) error
	// memberAt is the ID of the member at raft address addr, "" if none.
	memberAt(addr string) string
}

// checkCluster compares the cluster IDs of both ends: only two known and different IDs refuse;
// a node without one adopts the other's.
func checkCluster(g peerGate, theirs string) error {
	ours := g.handshakeCluster()
	switch {
	case theirs == "" || theirs == ours:
		return nil
	case ours == "":
		return g.adoptCluster(theirs)
	}
	return fmt.Errorf("%w: it is in cluster %s, this node in cluster %s", errForeignCluster, theirs, ours)
}

// acceptedPeer is what acceptPeer learned: the byte it read ahead when the connection starts
// with a raft frame (a legacy peer), for the connection to hand raft first, the node at the
// other end ("" for a legacy peer without TLS), and, on a node of several groups, whether one
// group's frames follow (a peer that runs one group) rather than a session.
type acceptedPeer struct {
	ahead []byte
	from  string
	bare  bool
}

// acceptPeer runs on an inbound connection after its TLS handshake (tc nil without TLS) and
// before raft reads from it: it checks the certificate's node, reads the hello if there is one
// (or requires it) and answers it. groups, above 0, is the number of raft groups this node
// runs, of a cluster created with layout of them: then it takes a version 2 hello of the same
// layout, and a version 1 hello when the layout is one group (group 0's frames follow). A node
// of one group (groups 0) refuses a version 2 hello.
func acceptPeer(g peerGate, c net.Conn, tc *tls.Conn, groups, layout int) (acceptedPeer, error) {
	if g == nil {
		return acceptedPeer{}, errNotStarted
	}
	certID := ""
	if tc != nil {
		chain := tc.ConnectionState().PeerCertificates
		id, ok := "", len(chain) > 0
		if ok {
			id, ok = certs.NodeID(chain[0])
		}
		if !ok {
			return acceptedPeer{}, fmt.Errorf("%w: its certificate names no node (a client certificate?)", errNotMember)
		}
		certID = id
	}
	var first [1]byte
	if _, err := io.ReadFull(c, first[:]); err != nil {
		return acceptedPeer{}, err
	}
	if first[0] != helloMagic[0] {
		if groups > 0 || g.helloRequired() {
			return acceptedPeer{}, errNoHello
		}
		if certID != "" {
			if err := g.admits(certID); err != nil {
				return acceptedPeer{}, err
			}
		}
		return acceptedPeer{ahead: first[:], from: certID}, nil
	}
	h, err := readHello(c)
	if err != nil {
		return acceptedPeer{}, err
	}
	refuse := func(err error) error {
		c.Write(appendShort(appendShort([]byte{1}, g.handshakeCluster()), err.Error()))
		return err
	}
	switch {
	case certID != "" && h.from != certID:
		return acceptedPeer{}, refuse(fmt.Errorf("%w: it says it is %q, its certificate names %q", errWrongNode, h.from, certID))
	case groups == 0 && h.groups > 0:
		return acceptedPeer{}, refuse(fmt.Errorf("%w, it runs %d", errOneGroup, h.groups))
	case groups > 0 && h.groups == 0 && layout != 1, groups > 0 && h.groups > 0 && h.layout != layout:
		return acceptedPeer{}, refuse(fmt.Errorf("%w: it runs %s, this node %s", errGroupsDiffer, groupsSaid(h.groups, h.layout), groupsSaid(groups, layout)))
	case h.to != "" && h.to != g.localID():
		return acceptedPeer{}, refuse(fmt.Errorf("%w: it dialed %q, this node is %q", errWrongNode, h.to, g.localID()))
	}
	if err := checkCluster(g, h.cluster); err != nil {
		if h.to == g.localID() {
			// Another cluster has a member of this ID at this address: most likely this node
			// was formed by mistake (started without --peers or --join, or on a wiped dir).
			err = fmt.Errorf("%w; that cluster counts this node as its member %s: if this node was meant to be it, "+
				"stop it, empty its --dir and start it with --join <client address of a member>", err, h.to)
		}
		return acceptedPeer{}, refuse(err)
	}
	if err := g.admits(h.from); err != nil {
		return acceptedPeer{}, refuse(err)
	}
	if _, err := c.Write(appendShort(appendShort([]byte{0}, g.handshakeCluster()), "")); err != nil {
		return acceptedPeer{}, err
	}
	return acceptedPeer{from: h.from, bare: groups > 0 && h.groups == 0}, nil
}

// groupsSaid names the raft groups a hello says (0: one, without a session).
func groupsSaid(groups, layout int) string {
	if groups == 0 {
		return "one raft group"
	}
	return fmt.Sprintf("%d raft groups of a cluster created with %d", groups, layout)
}

// dialPeer runs on an outbound connection to addr after its TLS handshake (tc nil without
// TLS), within deadline: it checks that the certificate names the member at addr, and sends
// the hello once the cluster requires it (always a version 2 one of groups raft groups, of a
// cluster created with layout, when groups is above 0) and checks the answer.
func dialPeer(g peerGate, c net.Conn, tc *tls.Conn, addr string, deadline time.Time, groups, layout int) error {
	if g == nil {
		return errNotStarted
	}
	want := g.memberAt(addr)
	if tc != nil {
		chain := tc.ConnectionState().PeerCertificates
		id, _ := certs.NodeID(chain[0]) // PeerConfig refused a certificate without one
		switch {
		case want != "" && id != want:
			return fmt.Errorf("%w: %s is member %q, its certificate names %q", errWrongNode, addr, want, id)
		case want == "":
			if err := g.admits(id); err != nil {
				return err
			}
		}
	}
	if groups == 0 && !g.helloRequired() {
		return nil
	}
	if err := c.SetDeadline(deadline); err != nil {
		return err
	}
	b := hello{cluster: g.handshakeCluster(), from: g.localID(), to: want, groups: groups, layout: layout}.append(nil)
	if _, err := c.Write(b); err != nil {
		return err
	}
	r := bufio.NewReaderSize(c, 16) // the answer is all the acceptor sends before raft's replies
	status, err := r.ReadByte()
	if err != nil {
		return fmt.Errorf("raft handshake with %s: %w", addr, err)
	}
	theirs, err := readShort(r)
	if err != nil {
		return err
	}
	reason, err := readShort(r)
	if err != nil {
		return err
	}
	if r.Buffered() > 0 {
		return fmt.Errorf("raft handshake with %s: unexpected bytes after the answer", addr)
	}
	if status != 0 {
		if strings.HasPrefix(reason, errOneGroup.Error()) {
			return fmt.Errorf("raft handshake refused by %s: %w%s", addr, errOneGroup, strings.TrimPrefix(reason, errOneGroup.Error()))
		}
		return fmt.Errorf("raft handshake refused by %s: %s", addr, reason)
	}
	if err := checkCluster(g, theirs); err != nil {
		return err
	}
	return c.SetDeadline(time.Time{})
}

// The Member's side of peerGate.

var _ peerGate = (*Member)(nil)

// helloRequired: this node created its cluster with a binary that speaks the hello (every member
// of such a cluster does: upgradeFormat), or the cluster's format is helloFormat or newer, as
// this node has applied it or as its stable store remembers from before a restart (a
// restarted node's table says less until it has applied its log again: Machine.Format). The
// first time it sees the format it records that, with no lock held. A cluster that required
// the hello only from its first format switch on would take forged frames without one until
// then.
func (n *Member) helloRequired() bool {
	if n.helloKnown.Load() {
		return true
	}
	if n.format() < helloFormat {
		return n.bootstrapFormat >= helloFormat
	}
	if n.helloKnown.CompareAndSwap(false, true) {
		if err := n.rememberIdentity(""); err != nil {
			n.log.Warn("remembering that the cluster uses the raft handshake failed", "err", err)
		}
	}
	return true
}

func (n *Member) localID() string { return n.cfg.Core.ID }

func (n *Member) handshakeCluster() string {
	if id := n.ClusterID(); id != "" {
		return id
	}
	if p := n.adoptedCluster.Load(); p != nil {
		return *p
	}
	return ""
}

// adoptCluster also makes a joining node require the hello from then on: a member sends one only
// once its cluster's format is helloFormat, which every member then reads, so a joiner need not
// wait until it has applied that format to refuse frames without one.
func (n *Member) adoptCluster(id string) error {
	if n.adoptedCluster.CompareAndSwap(nil, &id) {
		n.log.Info("raft handshake: adopting the cluster ID of the member that reached this node", "cluster_id", id)
		n.helloKnown.Store(true)
		return nil
	}
	if have := *n.adoptedCluster.Load(); have != id {
		return fmt.Errorf("%w: it is in cluster %s, this node follows cluster %s", errForeignCluster, id, have)
	}
	return nil
}

func (n *Member) admits(id string) error {
	r := n.startedRaft()
	if r == nil {
		return errNotStarted
	}
	f := r.GetConfiguration()
	if err := f.Error(); err != nil {
		return err
	}
	servers := f.Configuration().Servers
	if len(servers) == 0 {
		return nil // no configuration yet: this node is being added, by a member
	}
	for _, s := range servers {
		if string(s.ID) == id {
			return nil
		}
	}
	return fmt.Errorf("%w: %q is not in this node's configuration (%s)", errNotMember, id, configString(f.Configuration()))
}

func (n *Member) memberAt(addr string) string {
	r := n.startedRaft()
	if r == nil {
		return ""
	}
	f := r.GetConfiguration()
	if f.Error() != nil {
		return ""
	}
	for _, s := range f.Configuration().Servers {
		if string(s.Address) == addr {
			return string(s.ID)
		}
	}
	return ""
}

// IsPeer reports whether a node ID may be this node's peer on the client port's node-to-node
// links: a member of the newest configuration, or any node while this one has none yet (it is
// joining). cmd/raftlock checks the certificate of a node it dials with it.
func (n *Member) IsPeer(id string) error { return n.admits(id) }

// attachTransport lets a Transport's stream layer ask this node about its peers. With several
// raft groups, each group's member admits the streams of its group, and group 0's member
// speaks for the node in the connection's handshake (every node is a member of every group).
func (n *Member) attachTransport(trans raft.Transport) {
	t, ok := trans.(*Transport)
	if !ok {
		return
	}
	if t.group != nil {
		t.group.gate.Store(&gateRef{n})
		if t.group.id != 0 {
			return
		}
	}
	t.layer.gate.Store(&gateRef{n})
}

// gateRef holds the peerGate in an atomic.Pointer.
type gateRef struct{ peerGate }

// get returns the gate, nil before one is attached.
func (r *gateRef) get() peerGate {
	if r == nil {
		return nil
	}
	return r.peerGate
}
