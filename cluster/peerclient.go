package cluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"strconv"
	"time"

	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/resp"
)

const (
	// peerTimeout bounds one question to another member (RAFT STATS, MEMBERS, MEMBER,
	// READINDEX); announceTimeout a RAFT ANNOUNCE, during which the leader calls this node back.
	peerTimeout     = time.Second
	announceTimeout = 3 * peerTimeout
	// joinTimeout bounds one RAFT ADD or PROMOTE (forwarded to the leader, committed).
	joinTimeout = 10 * time.Second
)

// peerClient asks other nodes on their client (RESP) port, as the peer user, and reads their
// answers into node's peer types (node/peer.go), which the answering server renders from. It
// holds only how to reach the peers, nothing of a Member's.
type peerClient struct {
	tls *tls.Config // nil: plain TCP
	// user and password authenticate each call with AUTH when password is set (user "" is
	// Redis's default user).
	user, password string
	// question bounds STATS, MEMBERS, MEMBER and READINDEX; announce a RAFT ANNOUNCE; change a
	// RAFT ADD or PROMOTE.
	question, announce, change time.Duration
}

// newPeerClient returns a client that dials peers with tlsConfig (nil: plain TCP) and, when
// password is set, authenticates as user.
func newPeerClient(tlsConfig *tls.Config, user, password string) *peerClient {
	return &peerClient{
		tls: tlsConfig, user: user, password: password,
		question: peerTimeout, announce: announceTimeout, change: joinTimeout,
	}
}

// State asks the node at addr what it says of itself (RAFT STATS).
func (c *peerClient) State(ctx context.Context, addr string) (node.PeerState, error) {
	f, err := c.fields(ctx, addr, "RAFT", "STATS")
	if err != nil {
		return node.PeerState{}, err
	}
	s, err := node.ParsePeerState(f)
	if err != nil {
		return node.PeerState{}, fmt.Errorf("RAFT STATS: %w", err)
	}
	return s, nil
}

// AskState asks the node at addr what it says of itself (RAFT STATS) as a node does before it
// has a Member: a node about to join learns its cluster's raft groups (node.PeerState's
// Groups, Layout and Planned). tlsConfig, user and password are as Config's ClientTLS,
// PeerUser and PeerPassword.
func AskState(ctx context.Context, addr string, tlsConfig *tls.Config, user, password string) (node.PeerState, error) {
	return newPeerClient(tlsConfig, user, password).State(ctx, addr)
}

// StateOf asks the node at addr what it says of its member of raft group g (RAFT STATS g; RAFT
// STATS for group 0, which every release answers).
func (c *peerClient) StateOf(ctx context.Context, addr string, g int) (node.PeerState, error) {
	if g == 0 {
		return c.State(ctx, addr)
	}
	f, err := c.fields(ctx, addr, "RAFT", "STATS", strconv.Itoa(g))
	if err != nil {
		return node.PeerState{}, err
	}
	s, err := node.ParsePeerState(f)
	if err != nil {
		return node.PeerState{}, fmt.Errorf("RAFT STATS %d: %w", g, err)
	}
	return s, nil
}

// groupArgs is a RAFT command about raft group g: args, then GROUP g unless g is 0 (which every
// release answers without it).
func groupArgs(g int, args ...string) []string {
	if g == 0 {
		return args
	}
	return append(args, "GROUP", strconv.Itoa(g))
}

// Members asks the node at addr for the members of the newest configuration of its raft group g
// (RAFT MEMBERS).
func (c *peerClient) Members(ctx context.Context, addr string, g int) ([]node.Member, error) {
	v, err := c.call(ctx, addr, c.question, groupArgs(g, "RAFT", "MEMBERS")...)
	if err != nil {
		return nil, err
	}
	if v.Kind != resp.KindArray {
		return nil, fmt.Errorf("RAFT MEMBERS: unexpected reply %v", v)
	}
	members := make([]node.Member, len(v.Elems))
	for i, e := range v.Elems {
		f, err := fieldsOf(e)
		if err == nil {
			members[i], err = node.ParseMember(f)
		}
		if err != nil {
			return nil, fmt.Errorf("RAFT MEMBERS: %w", err)
		}
	}
	return members, nil
}

// Membership asks the node at addr whether member id is in the newest configuration it knows
// to be committed (RAFT MEMBER id).
func (c *peerClient) Membership(ctx context.Context, addr, id string, g int) (node.Membership, error) {
	f, err := c.fields(ctx, addr, groupArgs(g, "RAFT", "MEMBER", id)...)
	if err != nil {
		return node.Membership{}, err
	}
	m, err := node.ParseMembership(f)
	if err != nil {
		return node.Membership{}, fmt.Errorf("RAFT MEMBER: %w", err)
	}
	return m, nil
}

// ReadIndex asks the leader at addr for its read index (RAFT READINDEX).
func (c *peerClient) ReadIndex(ctx context.Context, addr string) (uint64, error) {
	return c.index(ctx, addr, c.question, "RAFT", "READINDEX")
}

// ReadIndexOf asks the node at addr, leader of raft group g, for that group's read index (RAFT
// READINDEX g).
func (c *peerClient) ReadIndexOf(ctx context.Context, addr string, g int) (uint64, error) {
	return c.index(ctx, addr, c.question, "RAFT", "READINDEX", strconv.Itoa(g))
}

// Add asks the node at addr to add member id, at raft address raftAddr, as a non-voter its
// leader promotes once caught up (RAFT ADD), and returns the index of that configuration.
func (c *peerClient) Add(ctx context.Context, addr, id, raftAddr string) (uint64, error) {
	return c.index(ctx, addr, c.change, "RAFT", "ADD", id, raftAddr)
}

// Promote asks the node at addr to make the non-voter id a voter (RAFT PROMOTE).
func (c *peerClient) Promote(ctx context.Context, addr, id string) error {
	_, err := c.call(ctx, addr, c.change, "RAFT", "PROMOTE", id)
	return err
}

// Announce tells the leader at addr that member id, at raft address raftAddr, serves clients
// at clientAddr (RAFT ANNOUNCE); the leader calls clientAddr back before it records it.
func (c *peerClient) Announce(ctx context.Context, addr, id, clientAddr, raftAddr string) error {
	_, err := c.call(ctx, addr, c.announce, "RAFT", "ANNOUNCE", id, clientAddr, raftAddr)
	return err
}

// index sends a command answered with a log index: a positive integer.
func (c *peerClient) index(ctx context.Context, addr string, timeout time.Duration, args ...string) (uint64, error) {
	v, err := c.call(ctx, addr, timeout, args...)
	if err != nil {
		return 0, err
	}
	if v.Kind != resp.KindInteger || v.Int <= 0 {
		return 0, fmt.Errorf("%s %s: unexpected reply %v", args[0], args[1], v)
	}
	return uint64(v.Int), nil
}

// fields sends a command answered with a map of fields and returns each value's text by name.
func (c *peerClient) fields(ctx context.Context, addr string, args ...string) (map[string]string, error) {
	v, err := c.call(ctx, addr, c.question, args...)
	if err != nil {
		return nil, err
	}
	f, err := fieldsOf(v)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", args[0], args[1], err)
	}
	return f, nil
}

// call sends one command to the node at addr and returns its reply; an error reply is
// returned as an error.
func (c *peerClient) call(ctx context.Context, addr string, timeout time.Duration, args ...string) (resp.Value, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	conn, err := resp.DialAuth(ctx, addr, timeout, c.tls, c.user, c.password)
	if err != nil {
		return resp.Value{}, err
	}
	defer conn.Close()
	return conn.Do(ctx, args...)
}

// fieldsOf reads a reply of name/value pairs (node.Field): a map in RESP3, alternating names
// and values in RESP2.
func fieldsOf(v resp.Value) (map[string]string, error) {
	if v.Kind != resp.KindMap && v.Kind != resp.KindArray || len(v.Elems)%2 != 0 {
		return nil, fmt.Errorf("unexpected reply %v", v)
	}
	out := make(map[string]string, len(v.Elems)/2)
	for i := 0; i < len(v.Elems); i += 2 {
		out[v.Elems[i].Text()] = v.Elems[i+1].Text()
	}
	return out, nil
}
