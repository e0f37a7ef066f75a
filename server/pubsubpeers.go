package server

// Pub/sub counts as one server: subscriptions live on the node a client subscribed on, so
// PUBSUB's counts and PUBLISH's reply add up every member's. The node asked puts the question
// to every other member (RAFT PUBSUB, which answers for that node alone) in parallel, over a few
// pooled connections per member, and merges the answers with its own. A subscription confirmed
// on one node is in that node's hub before its confirmation is written, so a count asked on
// another node afterwards includes it. A member that does not answer within peerAskTimeout (down,
// partitioned, or a release without RAFT PUBSUB) is left out of the count and not asked again
// for peerSkipFor, so that one dead member does not slow every PUBLISH.

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/raftlock/raftlock/resp"
)

const (
	// peerAskTimeout bounds one member's answer, the dial included.
	peerAskTimeout = 500 * time.Millisecond
	// peerSkipFor is how long a member that did not answer is left out before it is asked again.
	peerSkipFor = time.Second
	// peerLinks bounds the connections to each member, idle or in use: a question past them
	// waits for one to be free (within peerAskTimeout) rather than dial another.
	peerLinks = 32
	// maxPeerPubSubReply bounds one member's PUBSUB CHANNELS answer: its channel names, at most
	// SubscriptionLimits.PerNode of at most Name bytes each.
	maxPeerPubSubReply = 128 << 20
)

// peerPubSub asks the other members for their pub/sub counts.
type peerPubSub struct {
	s   *Server
	log *slog.Logger
	mu  sync.Mutex
	// idle are the connections not in use, by client address; slots bound each member's
	// connections (a token taken for each one in use or being dialled); skip is until when a
	// member that did not answer is left out, by client address.
	idle   map[string][]*resp.Client
	slots  map[string]chan struct{}
	skip   map[string]time.Time
	closed bool // Server.Close: a connection put back is closed instead
}

// errPeerBusy: every connection to the member stayed in use for the whole question's time.
var errPeerBusy = errors.New("every connection to the member is busy")

func newPeerPubSub(s *Server) *peerPubSub {
	return &peerPubSub{s: s, log: s.log, idle: map[string][]*resp.Client{}, slots: map[string]chan struct{}{}, skip: map[string]time.Time{}}
}

// ask sends args (a RAFT PUBSUB question) to every other member with a client address, in
// parallel, and returns the answers of those that gave one.
func (p *peerPubSub) ask(ctx context.Context, args ...string) []resp.Value {
	if p.s.admin == nil {
		return nil
	}
	members, err := p.s.admin.Members()
	if err != nil {
		return nil
	}
	now := time.Now()
	var addrs []string
	current := map[string]bool{}
	p.mu.Lock()
	for _, m := range members {
		if m.ID == p.s.cfg.NodeID || m.ClientAddr == "" {
			continue
		}
		current[m.ClientAddr] = true
		if now.Before(p.skip[m.ClientAddr]) {
			continue
		}
		addrs = append(addrs, m.ClientAddr)
	}
	p.pruneLocked(current)
	p.mu.Unlock()
	answers := make([]resp.Value, len(addrs))
	ok := make([]bool, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			v, err := p.askOne(ctx, addr, args)
			if errors.Is(err, errPeerBusy) {
				return // this question is left out, the member is not: it is busy, not gone
			}
			if err != nil {
				p.leaveOut(addr, err)
				return
			}
			answers[i], ok[i] = v, true
		})
	}
	wg.Wait()
	out := answers[:0]
	for i, v := range answers {
		if ok[i] {
			out = append(out, v)
		}
	}
	return out
}

// askOne asks the member at addr, on an idle connection if there is one (and, if that one
// fails, which a member's restart or --timeout does to idle links, once more on a new one).
func (p *peerPubSub) askOne(ctx context.Context, addr string, args []string) (resp.Value, error) {
	ctx, cancel := context.WithTimeout(ctx, peerAskTimeout)
	defer cancel()
	slot := p.slot(addr)
	select {
	case slot <- struct{}{}:
	case <-ctx.Done():
		return resp.Value{}, errPeerBusy
	}
	defer func() { <-slot }()
	if c := p.take(addr); c != nil {
		if v, err := c.Do(ctx, args...); err == nil {
			p.put(addr, c)
			return v, nil
		}
		c.Close()
	}
	c, err := p.dial(ctx, addr)
	if err != nil {
		return resp.Value{}, err
	}
	v, err := c.Do(ctx, args...)
	if err != nil {
		c.Close()
		return resp.Value{}, err
	}
	p.put(addr, c)
	return v, nil
}

// dial connects to a member's client port as a peer: over TLS when the node's client port
// speaks it, logged in as the peer user when there is a peer password.
func (p *peerPubSub) dial(ctx context.Context, addr string) (*resp.Client, error) {
	c, err := resp.DialAuth(ctx, addr, peerAskTimeout, p.s.cfg.PeerTLS, p.s.cfg.PeerUser, p.s.cfg.PeerPassword)
	if err != nil {
		return nil, err
	}
	c.SetMaxReply(maxPeerPubSubReply)
	return c, nil
}

// slot is addr's bound on connections.
func (p *peerPubSub) slot(addr string) chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.slots[addr]
	if s == nil {
		s = make(chan struct{}, peerLinks)
		p.slots[addr] = s
	}
	return s
}

// pruneLocked closes the idle connections to addresses that are no longer members' and forgets
// them.
func (p *peerPubSub) pruneLocked(current map[string]bool) {
	for addr, links := range p.idle {
		if current[addr] {
			continue
		}
		for _, c := range links {
			c.Close()
		}
		delete(p.idle, addr)
		delete(p.slots, addr)
		delete(p.skip, addr)
	}
}

func (p *peerPubSub) take(addr string) *resp.Client {
	p.mu.Lock()
	defer p.mu.Unlock()
	links := p.idle[addr]
	if len(links) == 0 {
		return nil
	}
	c := links[len(links)-1]
	p.idle[addr] = links[:len(links)-1]
	return c
}

func (p *peerPubSub) put(addr string, c *resp.Client) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.skip, addr)
	if p.closed || len(p.idle[addr]) >= peerLinks {
		c.Close()
		return
	}
	p.idle[addr] = append(p.idle[addr], c)
}

// leaveOut leaves a member that did not answer out of the counts for peerSkipFor.
func (p *peerPubSub) leaveOut(addr string, err error) {
	p.mu.Lock()
	_, was := p.skip[addr]
	p.skip[addr] = time.Now().Add(peerSkipFor)
	p.mu.Unlock()
	if !was {
		p.log.Warn("pub/sub counts leave out a member that does not answer", "addr", addr, "err", err, "retry_after", peerSkipFor)
	}
}

// close drops the idle connections (Server.Close).
func (p *peerPubSub) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for addr, links := range p.idle {
		for _, c := range links {
			c.Close()
		}
		delete(p.idle, addr)
	}
}

// The merged counts. Each takes this node's own answer and adds the other members'.

// numsub adds the members' subscriber counts of names (RAFT PUBSUB NUMSUB|SHARDNUMSUB: one
// integer per name) to local.
func (p *peerPubSub) numsub(ctx context.Context, sub string, names [][]byte, local []int64) []int64 {
	args := make([]string, 0, 3+len(names))
	args = append(args, "RAFT", "PUBSUB", sub)
	for _, n := range names {
		args = append(args, string(n))
	}
	for _, v := range p.ask(ctx, args...) {
		if len(v.Elems) != len(local) {
			continue
		}
		for i, e := range v.Elems {
			local[i] += e.Int
		}
	}
	return local
}

// names merges the members' channel or pattern names (RAFT PUBSUB CHANNELS|SHARDCHANNELS
// [pattern] | PATTERNS) with local's, sorted and without duplicates.
func (p *peerPubSub) names(ctx context.Context, local []string, args ...string) []string {
	all := local
	for _, v := range p.ask(ctx, append([]string{"RAFT", "PUBSUB"}, args...)...) {
		for _, e := range v.Elems {
			all = append(all, e.Text())
		}
	}
	slices.Sort(all)
	return slices.Compact(all)
}

// receivers adds to n the members' counts of connections a message on channel reaches now
// (RAFT PUBSUB RECEIVERS|SRECEIVERS channel).
func (p *peerPubSub) receivers(ctx context.Context, sub, channel string, n int64) int64 {
	for _, v := range p.ask(ctx, "RAFT", "PUBSUB", sub, channel) {
		n += v.Int
	}
	return n
}
