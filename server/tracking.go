package server

import (
	"log/slog"
	"sync"

	"github.com/raftlock/raftlock/fsm"
)

// Client-side caching (CLIENT TRACKING): a RESP3 connection that turned tracking on is told,
// with an "invalidate" push, when a key it read changes. Every node applies every change, so a
// follower invalidates its own clients' keys without asking the leader, forwarded reads included.

// tracking is a connection's CLIENT TRACKING state (part of its session).
type tracking struct {
	mode trackMode
	// caching is CLIENT CACHING's one-shot yes (1) or no (-1), for the next command.
	caching int8
	noloop  bool // CLIENT TRACKING ... NOLOOP
}

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

// The tracking table (the keys read by tracking connections on this node) is bounded as Redis's
// tracking-table-max-keys bounds it: past the bound, keys are evicted from it, and every
// connection tracking an evicted key is sent its invalidation, as if it had changed (Redis does
// the same). Redis counts keys only (default 1,000,000); a raftlock key may be 4096 bytes, so
// the table is bounded in bytes too: each key's length plus trackedKeyOverhead, and
// trackedPairOverhead for each connection tracking it (estimates of what the maps hold besides
// the key: the entries, their headers and the maps' spare slots).
const (
	defaultTrackingTableMaxKeys  = 1_000_000
	defaultTrackingTableMaxBytes = 64 << 20
	trackedKeyOverhead           = 240
	trackedPairOverhead          = 64
)

// tracker maps keys to the connections that must hear of their next change. Its lock is taken
// under Replica.mu only by a script's tracked reads (scriptCaller.Call); nothing under it blocks,
// logs or does I/O: a connection whose push queue is full is closed after the lock is released.
type tracker struct {
	log *slog.Logger
	// maxKeys and maxBytes bound the table (set before the tracker is used).
	maxKeys, maxBytes int
	mu                struct {
		sync.Mutex
		byKey  map[string]map[*conn]struct{}
		bytes  int // what the table holds: see trackedKeyOverhead
		perCon map[*conn]map[string]struct{}
		bcast  map[*conn][]string // prefixes; an empty list matches every key
		// writing: keys a NOLOOP connection's command in flight is changing (not to be
		// pushed to it)
		writing map[*conn]map[string]int
	}
}

func newTracker(log *slog.Logger) *tracker {
	t := &tracker{log: log, maxKeys: defaultTrackingTableMaxKeys, maxBytes: defaultTrackingTableMaxBytes}
	t.mu.byKey = map[string]map[*conn]struct{}{}
	t.mu.perCon = map[*conn]map[string]struct{}{}
	t.mu.bcast = map[*conn][]string{}
	t.mu.writing = map[*conn]map[string]int{}
	return t
}

// read records that c read key and should hear when it changes.
func (t *tracker) read(c *conn, key []byte) {
	var full []*conn
	t.mu.Lock()
	keys := t.mu.perCon[c]
	if keys == nil {
		keys = map[string]struct{}{}
		t.mu.perCon[c] = keys
	}
	if len(keys) >= maxTrackedPerConn {
		t.dropLocked(c)
		full = c.queuePush(invalidate(nil), full)
		keys = map[string]struct{}{}
		t.mu.perCon[c] = keys
	}
	k := string(key)
	if _, ok := t.mu.byKey[k][c]; !ok {
		full = t.makeRoomLocked(t.mu.byKey[k] == nil, len(k)+trackedKeyOverhead+trackedPairOverhead, full)
		conns := t.mu.byKey[k] // nil again if it was evicted
		if conns == nil {
			conns = map[*conn]struct{}{}
			t.mu.byKey[k] = conns
			t.mu.bytes += len(k) + trackedKeyOverhead
		}
		conns[c] = struct{}{}
		t.mu.bytes += trackedPairOverhead
		keys[k] = struct{}{}
	}
	t.mu.Unlock()
	// read may run under the node's view lock (a script's tracked reads): no logging or socket
	// I/O here. Cancelling ends the connection's serve loop, which closes the socket.
	for _, c := range full {
		c.cancel()
	}
}

// broadcast registers c for every change to keys with one of prefixes (all keys when none).
func (t *tracker) broadcast(c *conn, prefixes []string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.mu.bcast[c] = prefixes
}

// prefixes returns c's broadcast prefixes.
func (t *tracker) prefixes(c *conn) []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.bcast[c]
}

// forget stops all tracking for c (tracking turned off, connection closed).
func (t *tracker) forget(c *conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.dropLocked(c)
	delete(t.mu.bcast, c)
	delete(t.mu.writing, c)
}

func (t *tracker) dropLocked(c *conn) {
	for k := range t.mu.perCon[c] {
		if conns := t.mu.byKey[k]; conns != nil {
			if _, ok := conns[c]; ok {
				delete(conns, c)
				t.mu.bytes -= trackedPairOverhead
			}
			if len(conns) == 0 {
				delete(t.mu.byKey, k)
				t.mu.bytes -= len(k) + trackedKeyOverhead
			}
		}
	}
	delete(t.mu.perCon, c)
}

// removeKeyLocked removes k from the table and from the lists of the connections tracking it.
func (t *tracker) removeKeyLocked(k string) {
	conns, ok := t.mu.byKey[k]
	if !ok {
		return
	}
	for c := range conns {
		if keys := t.mu.perCon[c]; keys != nil {
			delete(keys, k)
		}
	}
	t.mu.bytes -= len(k) + trackedKeyOverhead + len(conns)*trackedPairOverhead
	delete(t.mu.byKey, k)
}

// makeRoomLocked evicts keys from the table until cost more bytes (and one more key, if
// newKey) fit its bounds, and queues each evicted key's invalidation for the connections
// tracking it (Redis's trackingLimitUsedSlots). Which keys go is the map's iteration order:
// arbitrary, as Redis's random choice.
func (t *tracker) makeRoomLocked(newKey bool, cost int, full []*conn) []*conn {
	extra := 0
	if newKey {
		extra = 1
	}
	for len(t.mu.byKey) > 0 && (len(t.mu.byKey)+extra > t.maxKeys || t.mu.bytes+cost > t.maxBytes) {
		for k, conns := range t.mu.byKey {
			for c := range conns {
				// Even to a NOLOOP connection changing it: the key did not change, but the
				// connection will not hear when it does.
				full = c.queuePush(invalidate(userKey([]byte(k))), full)
			}
			t.removeKeyLocked(k)
			break
		}
	}
	return full
}

// changed is the node's change hook: it queues an invalidation for every connection tracking
// one of keys (nil: everything changed) and forgets the read ones, as Redis does (one push per
// read).
func (t *tracker) changed(keys [][]byte) {
	var full []*conn
	t.mu.Lock()
	if keys == nil {
		for c := range t.mu.perCon {
			full = c.queuePush(invalidate(nil), full)
		}
		for c := range t.mu.bcast {
			full = c.queuePush(invalidate(nil), full)
		}
		clear(t.mu.byKey)
		clear(t.mu.perCon)
		t.mu.bytes = 0
	}
	for _, key := range keys {
		full = t.changedLocked(key, full)
	}
	t.mu.Unlock()
	t.disconnect(full)
}

func (t *tracker) changedLocked(key []byte, full []*conn) []*conn {
	k := string(key)
	for c := range t.mu.byKey[k] {
		if t.mu.writing[c][k] == 0 {
			full = c.queuePush(invalidate(userKey(key)), full)
		}
	}
	t.removeKeyLocked(k)
	for c, prefixes := range t.mu.bcast {
		if matchesPrefix(string(userKey(key)), prefixes) && t.mu.writing[c][k] == 0 {
			full = c.queuePush(invalidate(userKey(key)), full)
		}
	}
	return full
}

// disconnect closes the connections whose push queue overflowed: a client that does not read
// its invalidations can no longer keep its cache right. It runs with no lock held.
func (t *tracker) disconnect(full []*conn) { disconnectSlow(t.log, full, "invalidation") }

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

// trackRead records the keys of a read command if this connection's tracking mode says so. For
// a script it records nothing and reports true instead: the script's reads are tracked as its
// read commands run (scriptCaller.Call), or, when a follower forwards it, its declared keys once
// the leader replied (route).
func (c *conn) trackRead(cmd *command, args [][]byte) (trackScript bool) {
	t := &c.sess.track
	caching := t.caching
	t.caching = 0
	switch {
	case t.mode == trackOn, t.mode == trackOptIn && caching > 0, t.mode == trackOptOut && caching >= 0:
	default:
		return false
	}
	if cmd.movable {
		return true
	}
	if cmd.write || !cmd.leader {
		return false
	}
	for _, k := range cmd.keyArgs(args) {
		c.s.tracker.read(c, fsm.DBKey(c.sess.db, k))
	}
	return false
}

// CLIENT TRACKING ON|OFF [BCAST] [PREFIX p ...] [OPTIN] [OPTOUT] [NOLOOP] [REDIRECT id]
func clientTracking(r *request) {
	args := r.args
	if len(args) < 3 {
		r.wrongArgs("client|tracking")
		return
	}
	var on bool
	switch {
	case is(args[2], "on"):
		on = true
	case is(args[2], "off"):
	default:
		r.w.Error(errSyntax)
		return
	}
	var bcast, optin, optout, noloop bool
	var prefixes []string
	prefixBytes := 0
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
			prefixBytes += len(args[j+1])
			j++
		case is(args[j], "redirect") && j+1 < len(args):
			r.w.Error("ERR raftlock does not support REDIRECT: turn tracking on over RESP3 (HELLO 3) to receive invalidations on the same connection")
			return
		default:
			r.w.Error(errSyntax)
			return
		}
	}
	switch {
	case optin && optout:
		r.w.Error("ERR You can't use both OPTIN and OPTOUT")
		return
	case (optin || optout) && bcast:
		r.w.Error("ERR OPTIN and OPTOUT are not compatible with BCAST")
		return
	case len(prefixes) > 0 && !bcast:
		r.w.Error("ERR PREFIX option requires BCAST mode to be enabled")
		return
	case len(prefixes) > r.s.cfg.MaxTrackingPrefixes:
		r.w.Error("ERR too many tracking prefixes (at most " + itoa(int64(r.s.cfg.MaxTrackingPrefixes)) + ")")
		return
	case prefixBytes > r.s.cfg.MaxTrackingPrefixBytes:
		r.w.Error("ERR tracking prefixes too long (at most " + itoa(int64(r.s.cfg.MaxTrackingPrefixBytes)) + " bytes in all)")
		return
	case on && r.w.Protocol() != 3:
		r.w.Error("ERR raftlock sends invalidations only over RESP3: send HELLO 3 first (REDIRECT is not supported)")
		return
	}
	c := r.c
	c.s.tracker.forget(c)
	c.sess.track = tracking{}
	if on {
		c.sess.track.noloop = noloop
		switch {
		case bcast:
			c.sess.track.mode = trackBcast
			c.s.tracker.broadcast(c, prefixes)
		case optin:
			c.sess.track.mode = trackOptIn
		case optout:
			c.sess.track.mode = trackOptOut
		default:
			c.sess.track.mode = trackOn
		}
	}
	r.w.SimpleString("OK")
}

// CLIENT CACHING YES|NO: applies to the next command only (OPTIN/OPTOUT modes).
func clientCaching(r *request) {
	if len(r.args) != 3 {
		r.wrongArgs("client|caching")
		return
	}
	t := &r.c.sess.track
	yes := r.args[2]
	switch {
	case t.mode != trackOptIn && t.mode != trackOptOut:
		r.w.Error("ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled")
	case is(yes, "yes") && t.mode == trackOptIn:
		t.caching = 1
		r.w.SimpleString("OK")
	case is(yes, "no") && t.mode == trackOptOut:
		t.caching = -1
		r.w.SimpleString("OK")
	case is(yes, "yes"), is(yes, "no"):
		r.w.Error("ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.")
	default:
		r.w.Error(errSyntax)
	}
}

// CLIENT TRACKINGINFO
func trackingInfo(r *request) {
	mode := r.c.sess.track.mode
	flags := map[trackMode][]string{trackOff: {"off"}, trackOn: {"on"}, trackOptIn: {"on", "optin"},
		trackOptOut: {"on", "optout"}, trackBcast: {"on", "bcast"}}[mode]
	r.w.Map(3)
	r.w.BulkString("flags")
	r.w.Set(len(flags))
	for _, f := range flags {
		r.w.BulkString(f)
	}
	r.w.BulkString("redirect")
	r.w.Int(trackingRedirect(mode))
	r.w.BulkString("prefixes")
	prefixes := r.s.tracker.prefixes(r.c)
	r.w.Array(len(prefixes))
	for _, p := range prefixes {
		r.w.BulkString(p)
	}
}

// trackingRedirect is CLIENT GETREDIR's answer: invalidations come on the connection itself (0)
// while tracking is on, -1 when it is off.
func trackingRedirect(mode trackMode) int64 {
	if mode != trackOff {
		return 0
	}
	return -1
}

func (t *tracker) beginWrite(c *conn, keys [][]byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.mu.writing[c]
	if m == nil {
		m = map[string]int{}
		t.mu.writing[c] = m
	}
	for _, k := range keys {
		m[string(k)]++
	}
}

func (t *tracker) endWrite(c *conn, keys [][]byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	m := t.mu.writing[c]
	for _, k := range keys {
		if m[string(k)]--; m[string(k)] <= 0 {
			delete(m, string(k))
		}
	}
	if len(m) == 0 {
		delete(t.mu.writing, c)
	}
}
