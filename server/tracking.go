package server

import (
	"sync"
)

// Client-side caching (CLIENT TRACKING): a RESP3 connection that turned tracking on is told,
// with an "invalidate" push, when a key it read changes. Every node applies every change, so a
// follower invalidates its own clients' keys without asking the leader, forwarded reads included.

// trackMode is a connection's CLIENT TRACKING mode.
type trackMode uint8

const (
	trackOff    trackMode = iota
	trackOn               // every key read is tracked
	trackOptIn            // only reads right after CLIENT CACHING yes
	trackOptOut           // every read except right after CLIENT CACHING no
	trackBcast            // every change to a key with one of the prefixes
)

// maxTrackedPerConn bounds the keys tracked for one connection; past it the connection is told
// to drop its whole cache (an invalidate with a null key) and tracking starts afresh.
const maxTrackedPerConn = 1 << 16

// pushQueue bounds the invalidations waiting for one connection's writer. A client that does
// not read them is disconnected rather than allowed to keep a stale cache.
const pushQueue = 1024

// tracker maps keys to the connections that must hear of their next change.
type tracker struct {
	mu     sync.Mutex
	byKey  map[string]map[*conn]struct{}
	perCon map[*conn]map[string]struct{}
	bcast  map[*conn][]string // prefixes; an empty list matches every key
	// writing: keys a NOLOOP connection's command in flight is changing (not to be pushed to it)
	writing map[*conn]map[string]int
}

func newTracker() *tracker {
	return &tracker{byKey: map[string]map[*conn]struct{}{}, perCon: map[*conn]map[string]struct{}{}, bcast: map[*conn][]string{}}
}

// read records that c read key and should hear when it changes.
func (t *tracker) read(c *conn, key []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	keys := t.perCon[c]
	if keys == nil {
		keys = map[string]struct{}{}
		t.perCon[c] = keys
	}
	if len(keys) >= maxTrackedPerConn {
		t.dropLocked(c)
		c.push(nil)
		keys = map[string]struct{}{}
		t.perCon[c] = keys
	}
	k := string(key)
	keys[k] = struct{}{}
	conns := t.byKey[k]
	if conns == nil {
		conns = map[*conn]struct{}{}
		t.byKey[k] = conns
	}
	conns[c] = struct{}{}
}

// broadcast registers c for every change to keys with one of prefixes (all keys when none).
func (t *tracker) broadcast(c *conn, prefixes []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.bcast[c] = prefixes
}

// forget stops all tracking for c (tracking turned off, connection closed).
func (t *tracker) forget(c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropLocked(c)
	delete(t.bcast, c)
	delete(t.writing, c)
}

func (t *tracker) dropLocked(c *conn) {
	for k := range t.perCon[c] {
		if conns := t.byKey[k]; conns != nil {
			delete(conns, c)
			if len(conns) == 0 {
				delete(t.byKey, k)
			}
		}
	}
	delete(t.perCon, c)
}

// changed is the node's change hook: it queues an invalidation for every connection tracking
// key (nil: everything changed) and forgets the read ones, as Redis does (one push per read).
func (t *tracker) changed(key []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if key == nil {
		for c := range t.perCon {
			c.push(nil)
		}
		for c := range t.bcast {
			c.push(nil)
		}
		clear(t.byKey)
		clear(t.perCon)
		return
	}
	k := string(key)
	for c := range t.byKey[k] {
		if t.writing[c][k] == 0 {
			c.push(key)
		}
		if keys := t.perCon[c]; keys != nil {
			delete(keys, k)
		}
	}
	delete(t.byKey, k)
	for c, prefixes := range t.bcast {
		if matchesPrefix(k, prefixes) && t.writing[c][k] == 0 {
			c.push(key)
		}
	}
}

func matchesPrefix(k string, prefixes []string) bool {
	if len(prefixes) == 0 {
		return true
	}
	for _, p := range prefixes {
		if len(k) >= len(p) && k[:len(p)] == p {
			return true
		}
	}
	return false
}

// push queues an invalidation for this connection's writer without blocking (it runs in the
// node's apply path). A nil key means "drop your whole cache".
func (c *conn) push(key []byte) {
	var k []byte
	if key != nil {
		k = append([]byte{}, key...)
	}
	select {
	case c.pushes <- invalidation{key: k, all: key == nil}:
	default:
		// The client is not reading its pushes: its cache can no longer be kept right.
		c.s.log.Warn("invalidation queue full; closing the connection", "client", c.id)
		c.cancel()
		c.nc.Close()
	}
}

type invalidation struct {
	key []byte
	all bool
}

// writePush writes one invalidate push (RESP3 >2 "invalidate" [key] or null).
func (c *conn) writePush(inv invalidation) {
	c.out.Push(2)
	c.out.BulkString("invalidate")
	if inv.all {
		c.out.Null()
		return
	}
	c.out.Array(1)
	c.out.Bulk(inv.key)
}

// trackRead records the keys of a read command if this connection's tracking mode says so.
func (c *conn) trackRead(cmd *command, args [][]byte) {
	mode := c.tracking
	caching := c.caching
	c.caching = 0
	switch {
	case mode == trackOn, mode == trackOptIn && caching > 0, mode == trackOptOut && caching >= 0:
	default:
		return
	}
	if cmd.movable {
		// A script's reads are tracked as its read commands run (scriptCaller.Call), or, when
		// a follower forwards it, its declared keys once the leader replied (trackScriptKeys).
		c.trackScript = true
		return
	}
	if cmd.write || !cmd.leader {
		return
	}
	for _, k := range cmd.keyArgs(args) {
		c.s.tracker.read(c, k)
	}
}

// CLIENT TRACKING ON|OFF [BCAST] [PREFIX p ...] [OPTIN] [OPTOUT] [NOLOOP] [REDIRECT id]
func (c *conn) clientTracking(args [][]byte) {
	if len(args) < 3 {
		c.w.Error("ERR wrong number of arguments for 'client|tracking' command")
		return
	}
	var on bool
	switch {
	case is(args[2], "on"):
		on = true
	case is(args[2], "off"):
	default:
		c.w.Error(errSyntax)
		return
	}
	var bcast, optin, optout, noloop bool
	var prefixes []string
	for j := 3; j < len(args); j++ {
		switch {
		case is(args[j], "bcast"):
			bcast = true
		case is(args[j], "optin"):
			optin = true
		case is(args[j], "optout"):
			optout = true
		case is(args[j], "noloop"):
			noloop = true
		case is(args[j], "prefix") && j+1 < len(args):
			prefixes = append(prefixes, string(args[j+1]))
			j++
		case is(args[j], "redirect") && j+1 < len(args):
			c.w.Error("ERR raftlock does not support REDIRECT: turn tracking on over RESP3 (HELLO 3) to receive invalidations on the same connection")
			return
		default:
			c.w.Error(errSyntax)
			return
		}
	}
	switch {
	case optin && optout:
		c.w.Error("ERR You can't use both OPTIN and OPTOUT")
		return
	case (optin || optout) && bcast:
		c.w.Error("ERR OPTIN and OPTOUT are not compatible with BCAST")
		return
	case len(prefixes) > 0 && !bcast:
		c.w.Error("ERR PREFIX option requires BCAST mode to be enabled")
		return
	case on && c.w.Protocol() != 3:
		c.w.Error("ERR raftlock sends invalidations only over RESP3: send HELLO 3 first (REDIRECT is not supported)")
		return
	}
	c.s.tracker.forget(c)
	c.tracking, c.caching, c.noloop = trackOff, 0, false
	if on {
		c.noloop = noloop
		switch {
		case bcast:
			c.tracking = trackBcast
			c.s.tracker.broadcast(c, prefixes)
		case optin:
			c.tracking = trackOptIn
		case optout:
			c.tracking = trackOptOut
		default:
			c.tracking = trackOn
		}
	}
	c.w.SimpleString("OK")
}

// CLIENT CACHING YES|NO: applies to the next command only (OPTIN/OPTOUT modes).
func (c *conn) clientCaching(args [][]byte) {
	if len(args) != 3 {
		c.w.Error("ERR wrong number of arguments for 'client|caching' command")
		return
	}
	switch {
	case c.tracking != trackOptIn && c.tracking != trackOptOut:
		c.w.Error("ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled")
	case is(args[2], "yes") && c.tracking == trackOptIn:
		c.caching = 1
		c.w.SimpleString("OK")
	case is(args[2], "no") && c.tracking == trackOptOut:
		c.caching = -1
		c.w.SimpleString("OK")
	case is(args[2], "yes"), is(args[2], "no"):
		c.w.Error("ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.")
	default:
		c.w.Error(errSyntax)
	}
}

// CLIENT TRACKINGINFO
func (c *conn) trackingInfo() {
	flags := map[trackMode][]string{trackOff: {"off"}, trackOn: {"on"}, trackOptIn: {"on", "optin"},
		trackOptOut: {"on", "optout"}, trackBcast: {"on", "bcast"}}[c.tracking]
	c.w.Map(3)
	c.w.BulkString("flags")
	c.w.Set(len(flags))
	for _, f := range flags {
		c.w.BulkString(f)
	}
	c.w.BulkString("redirect")
	c.w.Int(map[bool]int64{true: 0, false: -1}[c.tracking != trackOff])
	c.w.BulkString("prefixes")
	c.s.tracker.mu.Lock()
	prefixes := c.s.tracker.bcast[c]
	c.s.tracker.mu.Unlock()
	c.w.Array(len(prefixes))
	for _, p := range prefixes {
		c.w.BulkString(p)
	}
}

// trackScriptKeys remembers keys for a connection whose script a follower forwarded and the
// leader ran, if its tracking mode said so when the script was sent.
func (c *conn) trackScriptKeys(keys [][]byte) {
	if !c.trackScript {
		return
	}
	c.trackScript = false
	for _, k := range keys {
		c.s.tracker.read(c, k)
	}
}

func (t *tracker) beginWrite(c *conn, keys [][]byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.writing == nil {
		t.writing = map[*conn]map[string]int{}
	}
	m := t.writing[c]
	if m == nil {
		m = map[string]int{}
		t.writing[c] = m
	}
	for _, k := range keys {
		m[string(k)]++
	}
}

func (t *tracker) endWrite(c *conn, keys [][]byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.writing[c]
	for _, k := range keys {
		if m[string(k)]--; m[string(k)] <= 0 {
			delete(m, string(k))
		}
	}
	if len(m) == 0 {
		delete(t.writing, c)
	}
}
