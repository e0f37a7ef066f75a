package server

// Pub/sub: SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE and their UNSUBSCRIBEs, PUBLISH, SPUBLISH, PUBSUB.
// A message is replicated (fsm.KindPublish) so that it reaches the subscribers of every node in
// log order with the changes around it: each node delivers it from its apply path (the node's
// Published hook, hub.deliver) to its own subscribers, through their connections' push queues
// (push.go). A connection with subscriptions in RESP2 is in Redis's subscribed mode.

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/resp"
)

// subKind is what a subscription names.
type subKind uint8

const (
	subChannel subKind = iota // SUBSCRIBE
	subPattern                // PSUBSCRIBE
	subShard                  // SSUBSCRIBE
	subKinds
)

// subscriptions are one connection's, by kind (part of its session: RESET drops them).
type subscriptions [subKinds]map[string]struct{}

// count is what a (un)subscribe reply reports: channels and patterns together, as Redis counts
// them, or the shard channels for the shard commands.
func (s *subscriptions) count(k subKind) int64 {
	if k == subShard {
		return int64(len(s[subShard]))
	}
	return int64(len(s[subChannel]) + len(s[subPattern]))
}

// active reports whether the connection has any subscription: in RESP2 it is then in
// subscribed mode.
func (s *subscriptions) active() bool {
	return len(s[subChannel])+len(s[subPattern])+len(s[subShard]) > 0
}

// SubscriptionLimits bound subscriptions (DESIGN.md §10; Redis has no such bounds). Past one,
// a SUBSCRIBE, PSUBSCRIBE or SSUBSCRIBE subscribes to none of its names and replies an error
// that names the bound. The pattern bounds also bound what a PUBLISH costs on every node's apply
// goroutine: at most Patterns patterns, each of at most PatternName bytes, matched in
// O(len(channel)·⌈PatternName/64⌉) word operations each (glob.go): a few tens of milliseconds
// for a 4096-byte channel and a node full of the costliest patterns.
type SubscriptionLimits struct {
	Name        int // longest channel name, in bytes (default 1024)
	PatternName int // longest pattern, in bytes (default 256)
	PerConn     int // subscriptions of one connection, all kinds together (default 10,000)
	PerNode     int // subscriptions on this node, each connection's counted (default 100,000)
	Patterns    int // distinct patterns subscribed on this node (default 1,000)
}

// DefaultSubscriptionLimits returns the default subscription bounds.
func DefaultSubscriptionLimits() SubscriptionLimits {
	return SubscriptionLimits{Name: 1024, PatternName: 256, PerConn: 10_000, PerNode: 100_000, Patterns: 1_000}
}

// maxChannel is the longest channel a PUBLISH may name (Config.MaxKeyBytes's default); a
// pattern is compiled for it (a longer one would compile it again).
const maxChannel = 4096

// hub maps channels and patterns to the connections subscribed on this node. Its lock nests
// inside nothing but a connection's baton and the node's view lock (PUBSUB called from a
// script); nothing under it blocks, logs or writes a socket.
type hub struct {
	log    *slog.Logger
	limits SubscriptionLimits // set before the hub is used
	mu     struct {
		sync.Mutex
		// subs maps each channel, pattern and shard channel to its subscribers here, each with
		// where each raft group's log ended when it subscribed (index = group): it does not
		// hear the messages of the entries a log held then (a restarted node applies them
		// again), published before.
		subs  [subKinds]map[string]map[*conn][]node.LogEnd
		globs map[string]*glob // each subscribed pattern, compiled
		count int              // subscriptions, each connection's counted
	}
	// lockNames counts the channels and patterns with a subscriber that start with
	// lockChannelPrefix, the lock channels' audience (lockwatch.go): read on the apply path for
	// every lock end, without the hub's lock; written under it.
	lockNames atomic.Int32
}

func newHub(log *slog.Logger) *hub {
	h := &hub{log: log, limits: DefaultSubscriptionLimits()}
	for k := range h.mu.subs {
		h.mu.subs[k] = map[string]map[*conn][]node.LogEnd{}
	}
	h.mu.globs = map[string]*glob{}
	return h
}

// subscribe subscribes c to those of names it is not subscribed to yet (of kind k; mine is c's
// subscriptions, all kinds), all or none, to hear the messages of the entries a log that ended
// at since does not hold (since: each group's, Server.logEnds): it returns the error reply of
// the bound they would pass, or "".
func (h *hub) subscribe(c *conn, k subKind, names [][]byte, mine *subscriptions, since []node.LogEnd) string {
	lim := h.limits
	var fresh [][]byte
	for _, name := range names {
		switch {
		case k == subPattern && len(name) > lim.PatternName:
			return "ERR pattern too long: at most " + itoa(int64(lim.PatternName)) + " bytes on this node"
		case len(name) > lim.Name:
			return "ERR channel name too long: at most " + itoa(int64(lim.Name)) + " bytes on this node"
		}
		if _, ok := mine[k][string(name)]; !ok && !slices.ContainsFunc(fresh, func(f []byte) bool { return string(f) == string(name) }) {
			fresh = append(fresh, name)
		}
	}
	if int(mine.count(subChannel))+len(mine[subShard])+len(fresh) > lim.PerConn {
		return "ERR too many subscriptions: at most " + itoa(int64(lim.PerConn)) + " per connection"
	}
	var globs []*glob // compiled before the lock is taken
	if k == subPattern {
		for _, name := range fresh {
			globs = append(globs, compileGlob(name, maxChannel))
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.mu.count+len(fresh) > lim.PerNode {
		return "ERR too many subscriptions on this node: at most " + itoa(int64(lim.PerNode))
	}
	if k == subPattern {
		patterns := len(h.mu.subs[subPattern])
		for _, name := range fresh {
			if h.mu.subs[subPattern][string(name)] == nil {
				patterns++
			}
		}
		if patterns > lim.Patterns {
			return "ERR too many patterns subscribed on this node: at most " + itoa(int64(lim.Patterns))
		}
	}
	if mine[k] == nil {
		mine[k] = map[string]struct{}{}
	}
	for i, name := range fresh {
		mine[k][string(name)] = struct{}{}
		conns := h.mu.subs[k][string(name)]
		if conns == nil {
			conns = map[*conn][]node.LogEnd{}
			h.mu.subs[k][string(name)] = conns
			if k == subPattern {
				h.mu.globs[string(name)] = globs[i]
			}
			if k != subShard && bytes.HasPrefix(name, []byte(lockChannelPrefix)) {
				h.lockNames.Add(1)
			}
		}
		conns[c] = since
		h.mu.count++
	}
	return ""
}

func (h *hub) unsubscribe(c *conn, k subKind, name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.unsubscribeLocked(c, k, name)
}

func (h *hub) unsubscribeLocked(c *conn, k subKind, name string) {
	if conns := h.mu.subs[k][name]; conns != nil {
		if _, ok := conns[c]; ok {
			delete(conns, c)
			h.mu.count--
		}
		if len(conns) == 0 {
			delete(h.mu.subs[k], name)
			if k == subPattern {
				delete(h.mu.globs, name)
			}
			if k != subShard && strings.HasPrefix(name, lockChannelPrefix) {
				h.lockNames.Add(-1)
			}
		}
	}
}

// forget drops every subscription of c (RESET, connection closed).
func (h *hub) forget(c *conn, subs *subscriptions) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range subs {
		for name := range subs[k] {
			h.unsubscribeLocked(c, subKind(k), name)
		}
	}
}

// deliver is the node's publish hook: it queues the message of the entry at at of group g's
// log for every subscriber on this node that subscribed before that log held that entry, and
// returns how many there were (PUBLISH's reply on the leader).
func (h *hub) deliver(g int, at node.LogPosition, channel, body []byte, shard bool) int {
	return h.fanOut(g, at, channel, body, shard, false)
}

// fanOut is deliver, and with lockOnly deliverLock: only the patterns that start with
// lockChannelPrefix hear a lock channel's message.
func (h *hub) fanOut(g int, at node.LogPosition, channel, body []byte, shard, lockOnly bool) int {
	var full []*conn
	n := 0
	hear := func(conns map[*conn][]node.LogEnd, kind pushKind, pattern string) {
		for c, since := range conns {
			if since[g].Holds(at) {
				continue // published before it subscribed
			}
			p := &push{kind: kind, channel: clone(channel), body: clone(body)}
			if kind == pushPMessage {
				p.pattern = []byte(pattern)
			}
			full, n = c.deliver(p, full, n)
		}
	}
	h.mu.Lock()
	if shard {
		hear(h.mu.subs[subShard][string(channel)], pushSMessage, "")
	} else {
		hear(h.mu.subs[subChannel][string(channel)], pushMessage, "")
		for pattern, conns := range h.mu.subs[subPattern] {
			if lockOnly && !strings.HasPrefix(pattern, lockChannelPrefix) || !h.mu.globs[pattern].match(channel) {
				continue
			}
			hear(conns, pushPMessage, pattern)
		}
	}
	h.mu.Unlock()
	disconnectSlow(h.log, full, "pub/sub")
	return n
}

func clone(b []byte) []byte { return append([]byte{}, b...) }

// deliver queues a message for c and counts it as received, unless c's queue is full (c is
// then added to full, to be disconnected: it will not receive it).
func (c *conn) deliver(p *push, full []*conn, n int) ([]*conn, int) {
	before := len(full)
	full = c.queuePush(p, full)
	if len(full) == before && !slices.Contains(full, c) {
		n++
	}
	return full, n
}

// dropSubscribers closes every subscriber's connection: the node restored a snapshot, so the
// messages of the entries it covers will never be delivered here. A closed connection tells the
// client it may have missed some (it resubscribes); a silent gap would not.
func (h *hub) dropSubscribers() {
	h.mu.Lock()
	seen := map[*conn]bool{}
	var conns []*conn
	for k := range h.mu.subs {
		for _, cs := range h.mu.subs[k] {
			for c := range cs {
				if !seen[c] {
					seen[c] = true
					conns = append(conns, c)
				}
			}
		}
	}
	h.mu.Unlock()
	if len(conns) > 0 {
		h.log.Warn("snapshot restored: closing the subscribers' connections (they may have missed messages)", "subscribers", len(conns))
	}
	for _, c := range conns {
		c.cancel()
		c.nc.Close()
	}
}

// names lists the channels of kind k with a subscriber here that match pattern (all when nil).
func (h *hub) names(k subKind, pattern []byte) []string {
	var g *glob
	if pattern != nil {
		g = compileGlob(pattern, h.limits.Name) // not under the lock; names are channels
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for name := range h.mu.subs[k] {
		if g == nil || g.match([]byte(name)) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// receivers is how many connections here a message on channel reaches now (a shard channel's
// when shard): deliver's count, with nothing delivered.
func (h *hub) receivers(channel []byte, shard bool) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if shard {
		return len(h.mu.subs[subShard][string(channel)])
	}
	n := len(h.mu.subs[subChannel][string(channel)])
	for pattern, conns := range h.mu.subs[subPattern] {
		if h.mu.globs[pattern].match(channel) {
			n += len(conns)
		}
	}
	return n
}

// lockInterest reports whether anyone here listens to lock channels: subscribed to a channel,
// or a pattern, that starts with lockChannelPrefix.
func (h *hub) lockInterest() bool { return h.lockNames.Load() > 0 }

// deliverLock delivers a lock channel's message (lockwatch.go) of the entry at at as deliver
// does, to the subscribers of channel and of the patterns that start with lockChannelPrefix and
// match it: a pattern that only happens to match (PSUBSCRIBE *) does not hear lock channels.
func (h *hub) deliverLock(g int, at node.LogPosition, channel, body []byte) {
	h.fanOut(g, at, channel, body, false, true)
}

// subscribers is how many connections here are subscribed to name (of kind k).
func (h *hub) subscribers(k subKind, name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.mu.subs[k][name])
}

// SUBSCRIBE channel..., PSUBSCRIBE pattern..., SSUBSCRIBE channel...: one reply per name,
// [subscribe, name, count].
func cmdSubscribe(r *request)  { subscribe(r, subChannel, "subscribe") }
func cmdPSubscribe(r *request) { subscribe(r, subPattern, "psubscribe") }
func cmdSSubscribe(r *request) { subscribe(r, subShard, "ssubscribe") }

func subscribe(r *request, k subKind, verb string) {
	if r.path == onScript {
		r.w.Error("ERR This Redis command is not allowed from script")
		return
	}
	c := r.c
	subs := &c.sess.subs
	count := subs.count(k)
	had := map[string]bool{}
	for _, name := range r.args[1:] {
		_, had[string(name)] = subs[k][string(name)]
	}
	if msg := r.s.hub.subscribe(c, k, r.args[1:], subs, r.s.logEnds()); msg != "" {
		r.w.Error(msg)
		return
	}
	// Each reply counts the subscriptions up to its name, as Redis's do.
	for _, name := range r.args[1:] {
		if !had[string(name)] {
			had[string(name)] = true
			count++
		}
		writeSubReply(r.w, verb, name, count)
	}
}

// writeSubReply writes one (un)subscribe reply, [verb, name, count]: a push in RESP3, an array
// in RESP2 (a nil name: there was nothing to unsubscribe from).
func writeSubReply(w *resp.Writer, verb string, name []byte, count int64) {
	w.Push(3)
	w.BulkString(verb)
	if name == nil {
		w.Null()
	} else {
		w.Bulk(name)
	}
	w.Int(count)
}

// UNSUBSCRIBE [channel...], PUNSUBSCRIBE [pattern...], SUNSUBSCRIBE [channel...]: one reply
// per name (every subscribed one when none is named), [unsubscribe, name, count]; with nothing
// to unsubscribe from, one reply with a null name.
func cmdUnsubscribe(r *request)  { unsubscribe(r, subChannel, "unsubscribe") }
func cmdPUnsubscribe(r *request) { unsubscribe(r, subPattern, "punsubscribe") }
func cmdSUnsubscribe(r *request) { unsubscribe(r, subShard, "sunsubscribe") }

func unsubscribe(r *request, k subKind, verb string) {
	if r.path == onScript {
		r.w.Error("ERR This Redis command is not allowed from script")
		return
	}
	c := r.c
	subs := &c.sess.subs
	names := r.args[1:]
	if len(names) == 0 {
		for name := range subs[k] {
			names = append(names, []byte(name))
		}
		slices.SortFunc(names, func(a, b []byte) int { return slices.Compare(a, b) })
	}
	// Leave the hub first, then write what it queued before: no message delivered for these
	// names can come after the reply (on Redis they are already in the output buffer).
	counts := make([]int64, len(names))
	for i, name := range names {
		if _, ok := subs[k][string(name)]; ok {
			delete(subs[k], string(name))
			r.s.hub.unsubscribe(c, k, string(name))
		}
		counts[i] = subs.count(k)
	}
	c.writeQueuedPushes()
	if len(names) == 0 {
		writeSubReply(r.w, verb, nil, subs.count(k))
		return
	}
	for i, name := range names {
		writeSubReply(r.w, verb, name, counts[i])
	}
}

// PUBLISH channel message and SPUBLISH channel message -> how many subscribers of the whole
// cluster it reaches: the node that applied it first (the leader) counts its own as it delivers
// it, and adds what every other member's subscriptions reach as it proposes it
// (pubsubpeers.go). The message is replicated, so subscribers on every node get it. Inside a script or a transaction the count is
// the leader's alone: a script cannot wait on other nodes.
func cmdPublish(r *request)  { publish(r, fsm.KindPublish) }
func cmdSPublish(r *request) { publish(r, fsm.KindShardPublish) }

func publish(r *request, kind fsm.Kind) {
	channel, body := r.args[1], r.args[2]
	if !r.checkKey(channel) || !r.checkValue(body) {
		return
	}
	// The other members are asked while the message commits, not after: the question costs
	// no time of its own unless a member answers more slowly than the log syncs.
	var others chan int64
	if r.path == onNode {
		sub := "RECEIVERS"
		if kind == fsm.KindShardPublish {
			sub = "SRECEIVERS"
		}
		others = make(chan int64, 1)
		name := string(channel)
		go func() { others <- r.s.peerSubs.receivers(r.c.ctx, sub, name, 0) }()
	}
	res, err := r.exec(nil, func(node.View) []fsm.Command {
		return []fsm.Command{{Kind: kind, Key: channel, Owner: body}}
	})
	if err != nil {
		r.replyError(err)
		return
	}
	var n int64
	if len(res) == 1 {
		n = int64(res[0].Receivers)
	}
	if others != nil {
		r.await(func() { n += <-others })
	}
	r.w.Int(n)
}

// PUBSUB CHANNELS [pattern] | NUMSUB [channel...] | NUMPAT | SHARDCHANNELS [pattern] |
// SHARDNUMSUB [channel...]: the whole cluster's subscriptions, this node's and every other
// member's (pubsubpeers.go); inside a script, this node's (a script cannot wait on other
// nodes; a transaction's PUBSUB runs outside the view lock, and asks them).
func cmdPubSub(r *request) {
	sub, args := r.args[1], r.args[2:]
	cluster := r.path != onScript
	switch {
	case (is(sub, "channels") || is(sub, "shardchannels")) && len(args) <= 1:
		k, peerSub := subChannel, "CHANNELS"
		if is(sub, "shardchannels") {
			k, peerSub = subShard, "SHARDCHANNELS"
		}
		var pattern []byte
		peerArgs := []string{peerSub}
		if len(args) == 1 {
			pattern = args[0]
			peerArgs = append(peerArgs, string(pattern))
		}
		names := r.s.hub.names(k, pattern)
		if cluster {
			r.await(func() { names = r.s.peerSubs.names(r.c.ctx, names, peerArgs...) })
		}
		r.w.Array(len(names))
		for _, n := range names {
			r.w.BulkString(n)
		}
	case is(sub, "numsub"), is(sub, "shardnumsub"):
		k, peerSub := subChannel, "NUMSUB"
		if is(sub, "shardnumsub") {
			k, peerSub = subShard, "SHARDNUMSUB"
		}
		counts := localNumsub(r.s.hub, k, args)
		if cluster && len(args) > 0 {
			r.await(func() { counts = r.s.peerSubs.numsub(r.c.ctx, peerSub, args, counts) })
		}
		r.w.Map(len(args))
		for i, name := range args {
			r.w.Bulk(name)
			r.w.Int(counts[i])
		}
	case is(sub, "numpat") && len(args) == 0:
		patterns := r.s.hub.names(subPattern, nil)
		if cluster {
			r.await(func() { patterns = r.s.peerSubs.names(r.c.ctx, patterns, "PATTERNS") })
		}
		r.w.Int(int64(len(patterns)))
	case is(sub, "numpat"):
		r.wrongArgs("pubsub|numpat")
	case is(sub, "channels"), is(sub, "shardchannels"):
		r.w.Error("ERR unknown subcommand or wrong number of arguments for '" + string(appendSanitized(nil, sub, 128)) + "'. Try PUBSUB HELP.")
	default:
		r.w.Error("ERR unknown subcommand '" + string(appendSanitized(nil, sub, 128)) + "'. Try PUBSUB HELP.")
	}
}

// localNumsub is this node's subscriber count of each name (of kind k).
func localNumsub(h *hub, k subKind, names [][]byte) []int64 {
	out := make([]int64, len(names))
	for i, name := range names {
		out[i] = int64(h.subscribers(k, string(name)))
	}
	return out
}

// raftPubSub answers RAFT PUBSUB, another member's question about this node's subscriptions
// alone (pubsubpeers.go): NUMSUB|SHARDNUMSUB name... (one integer per name), CHANNELS|
// SHARDCHANNELS [pattern] and PATTERNS (names), RECEIVERS|SRECEIVERS channel (an integer).
func raftPubSub(r *request) {
	if len(r.args) < 3 {
		r.wrongArgs("raft|pubsub")
		return
	}
	sub, args := lower(r.args[2]), r.args[3:]
	writeNames := func(names []string) {
		r.w.Array(len(names))
		for _, n := range names {
			r.w.BulkString(n)
		}
	}
	switch {
	case sub == "numsub" || sub == "shardnumsub":
		k := subChannel
		if sub == "shardnumsub" {
			k = subShard
		}
		counts := localNumsub(r.s.hub, k, args)
		r.w.Array(len(counts))
		for _, n := range counts {
			r.w.Int(n)
		}
	case (sub == "channels" || sub == "shardchannels") && len(args) <= 1:
		k := subChannel
		if sub == "shardchannels" {
			k = subShard
		}
		var pattern []byte
		if len(args) == 1 {
			pattern = args[0]
		}
		writeNames(r.s.hub.names(k, pattern))
	case sub == "patterns" && len(args) == 0:
		writeNames(r.s.hub.names(subPattern, nil))
	case (sub == "receivers" || sub == "sreceivers") && len(args) == 1:
		r.w.Int(int64(r.s.hub.receivers(args[0], sub == "sreceivers")))
	default:
		r.wrongArgs("raft|pubsub")
	}
}

// allowedSubscribed reports whether cmd may run on a RESP2 connection in subscribed mode.
func allowedSubscribed(cmd *command) bool {
	switch cmd.name {
	case "subscribe", "psubscribe", "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe", "ping", "quit", "reset":
		return true
	}
	return false
}
