package server

// The client face's figures beyond INFO's counters: request latency per command family,
// commands refused before they ran (by reason), authentication failures and the most contended
// keys. ServerStats copies them for the operator's HTTP surface (/metrics, the status page).

import (
	"cmp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/metrics"
	"github.com/raftlock/raftlock/node"
)

// family is a command's family for latency figures: each row of the command table names one.
type family uint8

const (
	famNone        family = iota // a row that names none (TestCommandFamilies fails on it)
	famLock                      // lock-table writes on strings and keys: LOCK, UNLOCK, SET, DEL, PEXPIRE, INCR ...
	famRead                      // reads of any type: GET, PTTL, LOCKINFO, HGET, ZRANGE, SCAN ...
	famCollection                // writes of hashes, sets, sorted sets and lists: HSET, ZADD, LPUSH ...
	famBlocking                  // BLPOP, BRPOP: their latency includes the wait
	famScript                    // EVAL, EVALSHA (and _RO), SCRIPT
	famTransaction               // MULTI, EXEC, DISCARD, WATCH, UNWATCH
	famPubSub                    // SUBSCRIBE, PUBLISH, PUBSUB ...
	famConnection                // PING, HELLO, AUTH, SELECT, CLIENT ...
	famAdmin                     // INFO, CONFIG, RAFT, ACL, CLUSTER, FLUSHALL ...
	numFamilies
)

var familyNames = [numFamilies]string{"none", "lock", "read", "collection", "blocking", "script", "transaction", "pubsub", "connection", "admin"}

// refusal reasons: why a command was refused before it ran (dispatch's refusal, and a request
// that found no leader).
type refusalReason uint8

const (
	refusedNone       refusalReason = iota
	refusedUnknown                  // unknown command
	refusedArity                    // wrong number of arguments
	refusedNoAuth                   // not authenticated
	refusedNoPerm                   // the ACL user may not run it (or touch its keys or channels)
	refusedOOM                      // past the key or memory bound
	refusedSubscribed               // a RESP2 connection in subscribed mode
	refusedNoLeader                 // no leader known within the wait (CLUSTERDOWN)
	refusedDiskFailed               // a subscription or a blocking command on a node whose disk failed
	refusedCrossSlot                // keys in different hash slots, in a cluster of several raft groups
	numRefusals
)

var refusalNames = [numRefusals]string{"none", "unknown_command", "wrong_arity", "noauth", "noperm", "oom", "subscribed", "no_leader", "disk_failed", "crossslot"}

// serverMetrics are the figures ServerStats reports beyond serverStats's counters.
type serverMetrics struct {
	latency      [numFamilies]*metrics.Histogram
	refused      [numRefusals]atomic.Uint64
	authFailures atomic.Uint64
	contention   contention
	// reroutes counts requests run again because their slot moved to another group (reroute).
	reroutes atomic.Uint64
}

func newServerMetrics() *serverMetrics {
	m := &serverMetrics{}
	for i := range m.latency {
		m.latency[i] = metrics.NewHistogram(metrics.Latency)
	}
	m.contention.window = contentionWindow
	return m
}

// refuse counts a refusal.
func (m *serverMetrics) refuse(why refusalReason) { m.refused[why].Add(1) }

// ServerStats copies the client face's figures (ops reads them for /metrics and the status page).
func (s *Server) ServerStats() node.ServerStats {
	st, m := &s.stats, s.metrics
	out := node.ServerStats{
		Clients:      s.Clients(),
		Blocked:      s.waiters.blocked.Load(),
		Connections:  st.connsTotal.Load(),
		Rejected:     st.connsRejected.Load(),
		Commands:     st.commands.Load(),
		Errors:       st.errors.Load(),
		Grants:       st.grants.Load(),
		Refusals:     st.refusals.Load(),
		Releases:     st.releases.Load(),
		AuthFailures: m.authFailures.Load(),
		SlotReroutes: m.reroutes.Load(),
		DBWaiters:    s.waiters.perDB(),
	}
	for f := famLock; f < numFamilies; f++ {
		out.Families = append(out.Families, node.FamilyStats{Name: familyNames[f], Latency: m.latency[f].Snapshot()})
	}
	for why := refusedUnknown; why < numRefusals; why++ {
		out.Refused = append(out.Refused, node.ReasonCount{Reason: refusalNames[why], Count: m.refused[why].Load()})
	}
	out.Contended, out.ContendedWindow = m.contention.top(time.Now(), contendedShown)
	return out
}

// perDB counts the requests waiting now on keys of each database (a request waiting on keys
// of one database counts once per key).
func (w *waiters) perDB() [fsm.Databases]int {
	var out [fsm.Databases]int
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, list := range w.mu.byKey {
		if db, _ := fsm.SplitDBKey([]byte(k)); db >= 0 && db < fsm.Databases {
			out[db] += len(list)
		}
	}
	return out
}

// Contention bounds: the sketch keeps contentionSlots keys per window of contentionWindow;
// ServerStats shows the contendedShown most contended of the current and the previous window.
const (
	contentionSlots  = 64
	contentionWindow = time.Minute
	contendedShown   = 10
	// contentionKeyBytes is the longest key prefix the sketch keeps (1 byte of database).
	contentionKeyBytes = 1 + 200
)

// contention finds the keys most often refused (a LOCK or SET NX that found the key held) with
// bounded memory whatever the traffic: a space-saving sketch (Metwally et al.) of
// contentionSlots keys per window. A key not in a full sketch takes the place of the least
// counted one and inherits its count, so a count may be over by at most that inherited part
// (Err), never under; a key refused more than 1/contentionSlots of a window's refusals is
// always in it. Each window starts empty; the previous one is kept for the figures.
type contention struct {
	window time.Duration
	mu     struct {
		sync.Mutex
		start     time.Time // of the current window
		cur, prev map[string]slot
	}
}

type slot struct{ count, err uint64 }

// record counts one refusal on table key k at now. A key is kept to its first
// contentionKeyBytes bytes (keys that share them count as one): the sketch's memory is bounded
// whatever the keys' size.
func (c *contention) record(k []byte, now time.Time) {
	k = k[:min(len(k), contentionKeyBytes)]
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rotateLocked(now)
	if s, ok := c.mu.cur[string(k)]; ok {
		s.count++
		c.mu.cur[string(k)] = s
		return
	}
	if len(c.mu.cur) < contentionSlots {
		c.mu.cur[string(k)] = slot{count: 1}
		return
	}
	minKey, minSlot, found := "", slot{}, false
	for key, s := range c.mu.cur {
		if !found || s.count < minSlot.count {
			minKey, minSlot, found = key, s, true
		}
	}
	delete(c.mu.cur, minKey)
	c.mu.cur[string(k)] = slot{count: minSlot.count + 1, err: minSlot.count}
}

// rotateLocked starts a new window when the current one is over.
func (c *contention) rotateLocked(now time.Time) {
	switch {
	case c.mu.cur == nil:
		c.mu.start, c.mu.cur = now, map[string]slot{}
	case now.Sub(c.mu.start) >= 2*c.window:
		c.mu.start, c.mu.cur, c.mu.prev = now, map[string]slot{}, nil
	case now.Sub(c.mu.start) >= c.window:
		c.mu.start, c.mu.prev, c.mu.cur = c.mu.start.Add(c.window), c.mu.cur, map[string]slot{}
	}
}

// top returns the n keys with the most refusals in the current and previous windows, most
// first (ties by key), and how long a span that covers.
func (c *contention) top(now time.Time, n int) ([]node.KeyCount, time.Duration) {
	c.mu.Lock()
	c.rotateLocked(now)
	sum := make(map[string]slot, len(c.mu.cur)+len(c.mu.prev))
	for _, m := range []map[string]slot{c.mu.prev, c.mu.cur} {
		for k, s := range m {
			t := sum[k]
			t.count += s.count
			t.err += s.err
			sum[k] = t
		}
	}
	span := now.Sub(c.mu.start)
	if c.mu.prev != nil {
		span += c.window
	}
	c.mu.Unlock()
	out := make([]node.KeyCount, 0, len(sum))
	for k, s := range sum {
		db, key := fsm.SplitDBKey([]byte(k))
		out = append(out, node.KeyCount{DB: db, Key: string(key), Count: s.count, Err: s.err})
	}
	slices.SortFunc(out, func(a, b node.KeyCount) int {
		if a.Count != b.Count {
			return cmp.Compare(b.Count, a.Count)
		}
		return cmp.Or(cmp.Compare(a.DB, b.DB), strings.Compare(a.Key, b.Key))
	})
	return out[:min(n, len(out))], span
}
