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
	"cmp"
	"context"
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
	// peerIdleLinks is how many idle connections are kept to each member.
	peerIdleLinks = 32
	// maxPeerPubSubReply bounds one member's PUBSUB CHANNELS answer: its channel names, at most
	// SubscriptionLimits.PerNode of at most Name bytes each.
	maxPeerPubSubReply = 128 << 20
)

// peerPubSub asks the other members for their pub/sub counts.
type peerPubSub struct {
	s   *Server
	log *slog.Logger
	mu  sync.Mutex
	// idle are the connections not in use, by client address; skip is until when a member that
	// did not answer is left out, by client address.
	idle map[string][]*resp.Client
	skip map[string]time.Time
}

func newPeerPubSub(s *Server) *peerPubSub {
	return &peerPubSub{s: s, log: s.log, idle: map[string][]*resp.Client{}, skip: map[string]time.Time{}}
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
	p.mu.Lock()
	for _, m := range members {
		if m.ID == p.s.cfg.NodeID || m.ClientAddr == "" || now.Before(p.skip[m.ClientAddr]) {
			continue
		}
		addrs = append(addrs, m.ClientAddr)
	}
	p.mu.Unlock()
	answers := make([]resp.Value, len(addrs))
	ok := make([]bool, len(addrs))
	var wg sync.WaitGroup
	for i, addr := range addrs {
		wg.Go(func() {
			v, err := p.askOne(ctx, addr, args)
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
	c, err := resp.DialTLS(ctx, addr, peerAskTimeout, p.s.cfg.PeerTLS)
	if err != nil {
		return nil, err
	}
	c.SetMaxReply(maxPeerPubSubReply)
	if pw := p.s.cfg.PeerPassword; pw != "" {
		if _, err := c.Do(ctx, "AUTH", cmp.Or(p.s.cfg.PeerUser, "default"), pw); err != nil {
			c.Close()
			return nil, err
		}
	}
	return c, nil
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
	if len(p.idle[addr]) >= peerIdleLinks {
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
