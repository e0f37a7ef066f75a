package ops

import (
	"context"
	"embed"
	"encoding/json"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/raftlock/raftlock/metrics"
	"github.com/raftlock/raftlock/node"
)

// Members lists the cluster with each member's figures (cluster.Member.MemberStatus).
type Members interface {
	MemberStatus(ctx context.Context) ([]node.MemberStatus, error)
}

// The status page: web/index.html, status.js and status.css, served by the binary itself (no
// CDN; the page's Content-Security-Policy lets it load nothing from elsewhere). The script polls
// /status.json every two seconds.
//
//go:embed web/index.html web/status.js web/status.css
var web embed.FS

// statusEvery bounds how often the document is built (and the members asked for their figures)
// whatever the number of open pages: requests in between get the last one.
const statusEvery = time.Second

// rateWindow is the span request rates are averaged over (samples are kept that long).
const rateWindow = 10 * time.Second

// lockRatesWindow is the span the lock chart covers. Its points are one per build, so at most
// lockRatesPoints of them (two builds racing past statusEvery are both kept, within that bound).
const (
	lockRatesWindow = 5 * time.Minute
	lockRatesPoints = int(lockRatesWindow / statusEvery)
)

// status is /status.json. Figures are this node's unless a field says otherwise.
type status struct {
	Time          time.Time       `json:"time"`
	Node          statusNode      `json:"node"`
	Members       []statusMember  `json:"members"`
	MembersError  string          `json:"members_error,omitempty"`
	LeaderChanges uint64          `json:"leader_changes"`
	RecentLeaders []statusLeader  `json:"recent_leaders"`
	Databases     []statusDB      `json:"databases"`
	Totals        statusDB        `json:"totals"`
	Rates         statusRates     `json:"rates"`
	Latency       []statusLatency `json:"latency"`
	Raft          []statusLatency `json:"raft"`
	Refused       []statusCount   `json:"refused"`
	AuthFailures  uint64          `json:"auth_failures"`
	Contended     []statusKey     `json:"contended"`
	ContendedSecs float64         `json:"contended_window_seconds"`
	LockRates     statusLockRates `json:"lock_rates"`
	// Groups is each raft group's figures on a node of several (docs/groups.md); Node is then
	// group 0's, and Databases, Totals and the lock chart count every group's.
	Groups []statusGroup `json:"groups,omitempty"`
}

// statusGroup is one raft group as this node sees it.
type statusGroup struct {
	Group int    `json:"group"`
	Slots string `json:"slots"`
	raftFigures
	Keys int `json:"keys"`
}

type statusNode struct {
	ID        string `json:"id"`
	ClusterID string `json:"cluster_id"`
	raftFigures
	LastContactMs int64 `json:"last_contact_ms"` // -1: never; 0 on the leader
	Voters        int   `json:"voters"`
	Clients       int   `json:"clients"`
}

// raftFigures are a raft instance's state and indexes as this node has them: the node's (group
// 0's) and each group's.
type raftFigures struct {
	State        string `json:"state"`
	Ready        bool   `json:"ready"`
	LeaderID     string `json:"leader_id"`
	Term         uint64 `json:"term"`
	LastIndex    uint64 `json:"last_index"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	ApplyLag     uint64 `json:"apply_lag"`
}

func raftFiguresOf(ns node.Stats) raftFigures {
	return raftFigures{State: ns.State, Ready: ns.Ready, LeaderID: ns.LeaderID, Term: ns.Term, LastIndex: ns.LastIndex,
		CommitIndex: ns.CommitIndex, AppliedIndex: ns.AppliedIndex, ApplyLag: ns.CommitIndex - min(ns.AppliedIndex, ns.CommitIndex)}
}

// statusMember is one member and what it reported when asked. Lag is the newest commit index
// any member reported minus the member's applied index: how far behind what the cluster
// committed its table is, as of the poll (asked one after another within a second, so a busy
// cluster shows a few entries of lag that are only the poll's own skew).
type statusMember struct {
	ID           string `json:"id"`
	RaftAddr     string `json:"raft_addr"`
	ClientAddr   string `json:"client_addr"`
	Voter        bool   `json:"voter"`
	Leader       bool   `json:"leader"`
	State        string `json:"state"`
	Term         uint64 `json:"term"`
	CommitIndex  uint64 `json:"commit_index"`
	AppliedIndex uint64 `json:"applied_index"`
	Lag          uint64 `json:"lag"`
	Error        string `json:"error,omitempty"`
}

type statusLeader struct {
	At       time.Time `json:"at"`
	LeaderID string    `json:"leader_id"` // empty: no leader known
	Term     uint64    `json:"term"`
}

type statusDB struct {
	DB      int `json:"db"`
	Keys    int `json:"keys"`
	Leases  int `json:"leases"`
	Waiters int `json:"waiters"`
}

// statusRates are per second over the last rateWindow (or since the first sample).
type statusRates struct {
	Seconds  float64 `json:"seconds"` // the span they cover; 0 until two samples exist
	Commands float64 `json:"commands"`
	Errors   float64 `json:"errors"`
	Grants   float64 `json:"grants"`
	Refusals float64 `json:"refusals"`
	Commits  float64 `json:"commits"`
}

// statusLockRates is the lock chart: per-second rates between each build of this document and
// the one before it, for the builds of the last lockRatesWindow, oldest first. A document is
// built when a page (or anything else) asks, at most once per statusEvery: one open page makes a
// point every 2 s, and a spell nobody asked in is one point, the average over it.
//
// Grants and refusals are the server's (LOCK, SEMACQUIRE, MLOCK, SET NX), counted where requests
// are evaluated: the leader (a follower forwards them). Expiries (leases ended by a committed
// expiry, node.Stats.Expired) and hand-offs (waiters granted by a hand-off, node.Stats.Handoffs)
// are counted on the leader that proposed them. So a follower's series are about 0, and after an
// election the new leader's start from what it counted itself.
type statusLockRates struct {
	WindowSeconds   float64   `json:"window_seconds"`
	SecondsPerPoint float64   `json:"seconds_per_point"` // the least between two points: statusEvery
	AgoSeconds      []float64 `json:"ago_seconds"`       // when each point ends, before time
	Grants          []float64 `json:"grants"`
	Refusals        []float64 `json:"refusals"`
	Expiries        []float64 `json:"expiries"`
	Handoffs        []float64 `json:"handoffs"`
}

// statusLatency is a histogram's figures: all-time count, and the count, rate and quantiles
// over the rate window (0 quantiles when none fell in it).
type statusLatency struct {
	Name        string  `json:"name"`
	Count       uint64  `json:"count"`
	WindowCount uint64  `json:"window_count"`
	Rate        float64 `json:"rate"`
	P50Ms       float64 `json:"p50_ms"`
	P99Ms       float64 `json:"p99_ms"`
}

type statusCount struct {
	Reason string `json:"reason"`
	Count  uint64 `json:"count"`
}

type statusKey struct {
	DB    int    `json:"db"`
	Key   string `json:"key"`
	Count uint64 `json:"count"`
	Err   uint64 `json:"err"`
}

// statusSource builds the document, at most once per statusEvery, keeping the samples rates
// are computed from.
type statusSource struct {
	node    Stats
	server  ServerStats // may be nil
	members Members     // may be nil
	groups  []Group     // nil for a node of one raft group
	now     func() time.Time

	mu struct {
		sync.Mutex
		doc     []byte
		built   time.Time
		samples []sample // oldest first, within rateWindow of the newest
		// lockRates are the lock chart's points, oldest first, within lockRatesWindow of the
		// newest and at most lockRatesPoints.
		lockRates []lockRatePoint
	}
}

// lockRatePoint is the lock chart's rates, per second, from one build to the next, at.
type lockRatePoint struct {
	at                                   time.Time
	grants, refusals, expiries, handoffs float64
}

// sample is the counters one document was built from.
type sample struct {
	at       time.Time
	commands uint64
	errors   uint64
	grants   uint64
	refusals uint64
	expired  uint64
	handoffs uint64
	latency  []node.FamilyStats
	commit   metrics.Snapshot
	sync     metrics.Snapshot
}

func newStatusSource(n Stats, s ServerStats, m Members) *statusSource {
	return &statusSource{node: n, server: s, members: m, now: time.Now}
}

// document returns /status.json's body, built anew when the last is older than statusEvery.
// The members are asked outside the lock; two requests racing past it both build one, and the
// later stored wins.
func (src *statusSource) document(ctx context.Context) []byte {
	now := src.now()
	src.mu.Lock()
	if src.mu.doc != nil && now.Sub(src.mu.built) < statusEvery {
		doc := src.mu.doc
		src.mu.Unlock()
		return doc
	}
	src.mu.Unlock()
	doc := src.build(ctx, now)
	src.mu.Lock()
	defer src.mu.Unlock()
	src.mu.doc, src.mu.built = doc, now
	return doc
}

func (src *statusSource) build(ctx context.Context, now time.Time) []byte {
	ns := src.node.Stats()
	var ss node.ServerStats
	if src.server != nil {
		ss = src.server.ServerStats()
	}
	st := status{
		Time: now,
		Node: statusNode{
			ID: ns.ID, ClusterID: ns.ClusterID, raftFigures: raftFiguresOf(ns), LastContactMs: ns.LastContact.Milliseconds(),
			Voters: ns.Voters, Clients: ss.Clients,
		},
		LeaderChanges: ns.LeaderChanges,
		AuthFailures:  ss.AuthFailures,
		ContendedSecs: ss.ContendedWindow.Seconds(),
	}
	if ns.LastContact < 0 {
		st.Node.LastContactMs = -1
	}
	st.Members, st.MembersError = src.memberFigures(ctx, ns)
	for _, c := range ns.RecentLeaders {
		st.RecentLeaders = append(st.RecentLeaders, statusLeader{At: c.At, LeaderID: c.LeaderID, Term: c.Term})
	}
	// On a node of several groups, the tables' figures are every group's (group 0's are ns's).
	expired, handoffs := ns.Expired, ns.Handoffs
	for g, grp := range src.groups {
		gs := ns
		if g > 0 {
			gs = grp.Stats.Stats()
			for db := range ns.DBKeys {
				ns.DBKeys[db] += gs.DBKeys[db]
				ns.DBLeases[db] += gs.DBLeases[db]
			}
			expired += gs.Expired
			handoffs += gs.Handoffs
		}
		st.Groups = append(st.Groups, statusGroup{Group: g, Slots: grp.Slots(), raftFigures: raftFiguresOf(gs), Keys: gs.Locks})
	}
	st.Databases = []statusDB{}
	for db := range ns.DBKeys {
		d := statusDB{DB: db, Keys: ns.DBKeys[db], Leases: ns.DBLeases[db], Waiters: ss.DBWaiters[db]}
		st.Totals.Keys += d.Keys
		st.Totals.Leases += d.Leases
		st.Totals.Waiters += d.Waiters
		if db == 0 || d.Keys > 0 || d.Leases > 0 || d.Waiters > 0 {
			st.Databases = append(st.Databases, d)
		}
	}
	st.Totals.DB = -1
	for _, r := range ss.Refused {
		st.Refused = append(st.Refused, statusCount{Reason: r.Reason, Count: r.Count})
	}
	st.Contended = []statusKey{}
	for _, k := range ss.Contended {
		st.Contended = append(st.Contended, statusKey{DB: k.DB, Key: k.Key, Count: k.Count, Err: k.Err})
	}

	cur := sample{at: now, commands: ss.Commands, errors: ss.Errors, grants: ss.Grants, refusals: ss.Refusals,
		expired: expired, handoffs: handoffs, latency: ss.Families, commit: ns.CommitLatency, sync: ns.Store.SyncLatency}
	old, chart := src.remember(cur)
	secs := cur.at.Sub(old.at).Seconds()
	rate := func(a, b uint64) float64 {
		if secs <= 0 {
			return 0
		}
		return float64(a-min(b, a)) / secs
	}
	st.Rates = statusRates{Seconds: secs, Commands: rate(cur.commands, old.commands), Errors: rate(cur.errors, old.errors),
		Grants: rate(cur.grants, old.grants), Refusals: rate(cur.refusals, old.refusals),
		Commits: rate(cur.commit.Count(), old.commit.Count())}
	lat := func(name string, now, then metrics.Snapshot) statusLatency {
		d := now.Sub(then)
		return statusLatency{Name: name, Count: now.Count(), WindowCount: d.Count(), Rate: rate(now.Count(), then.Count()),
			P50Ms: d.Quantile(0.5) * 1e3, P99Ms: d.Quantile(0.99) * 1e3}
	}
	for i, f := range cur.latency {
		var then metrics.Snapshot
		if i < len(old.latency) {
			then = old.latency[i].Latency
		}
		st.Latency = append(st.Latency, lat(f.Name, f.Latency, then))
	}
	st.Raft = []statusLatency{lat("commit", cur.commit, old.commit), lat("log fsync", cur.sync, old.sync)}
	st.LockRates = lockRatesDoc(now, chart)
	doc, _ := json.Marshal(st) // nothing in status fails to encode
	return doc
}

// remember keeps cur and returns the oldest sample within rateWindow (cur itself at first), and
// the lock chart's points with the one from the newest sample to cur added (a copy).
func (src *statusSource) remember(cur sample) (sample, []lockRatePoint) {
	src.mu.Lock()
	defer src.mu.Unlock()
	if n := len(src.mu.samples); n > 0 && cur.at.After(src.mu.samples[n-1].at) {
		src.mu.lockRates = addLockRates(src.mu.lockRates, src.mu.samples[n-1], cur)
	}
	keep := src.mu.samples[:0]
	for _, s := range src.mu.samples {
		if cur.at.Sub(s.at) <= rateWindow {
			keep = append(keep, s)
		}
	}
	src.mu.samples = append(keep, cur)
	return src.mu.samples[0], slices.Clone(src.mu.lockRates)
}

// addLockRates appends the rates from prev to cur to points and drops the points that fell out
// of lockRatesWindow, or past lockRatesPoints. Slicing the front off keeps the backing array
// bounded: append copies only the points kept when it grows it.
func addLockRates(points []lockRatePoint, prev, cur sample) []lockRatePoint {
	secs := cur.at.Sub(prev.at).Seconds()
	rate := func(now, then uint64) float64 { return float64(now-min(then, now)) / secs }
	points = append(points, lockRatePoint{at: cur.at, grants: rate(cur.grants, prev.grants), refusals: rate(cur.refusals, prev.refusals),
		expiries: rate(cur.expired, prev.expired), handoffs: rate(cur.handoffs, prev.handoffs)})
	drop := max(len(points)-lockRatesPoints, 0)
	for drop < len(points) && cur.at.Sub(points[drop].at) >= lockRatesWindow {
		drop++
	}
	return points[drop:]
}

// lockRatesDoc is the lock chart's part of the document built at now.
func lockRatesDoc(now time.Time, points []lockRatePoint) statusLockRates {
	n := len(points)
	doc := statusLockRates{WindowSeconds: lockRatesWindow.Seconds(), SecondsPerPoint: statusEvery.Seconds(),
		AgoSeconds: make([]float64, 0, n), Grants: make([]float64, 0, n), Refusals: make([]float64, 0, n),
		Expiries: make([]float64, 0, n), Handoffs: make([]float64, 0, n)}
	// Three decimals are more than a chart shows, and keep the document a few kilobytes.
	round := func(x float64) float64 { return math.Round(x*1000) / 1000 }
	for _, p := range points {
		doc.AgoSeconds = append(doc.AgoSeconds, round(now.Sub(p.at).Seconds()))
		doc.Grants = append(doc.Grants, round(p.grants))
		doc.Refusals = append(doc.Refusals, round(p.refusals))
		doc.Expiries = append(doc.Expiries, round(p.expiries))
		doc.Handoffs = append(doc.Handoffs, round(p.handoffs))
	}
	return doc
}

// memberFigures asks the members for their figures (ns: this node's, when there is no
// Members source) and computes each one's lag.
func (src *statusSource) memberFigures(ctx context.Context, ns node.Stats) ([]statusMember, string) {
	var list []node.MemberStatus
	if src.members != nil {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		var err error
		if list, err = src.members.MemberStatus(ctx); err != nil {
			return []statusMember{}, err.Error()
		}
	} else {
		list = []node.MemberStatus{{Member: node.Member{ID: ns.ID, Leader: ns.State == "Leader", Voter: true},
			State: ns.State, Term: ns.Term, LastIndex: ns.LastIndex, CommitIndex: ns.CommitIndex, AppliedIndex: ns.AppliedIndex}}
	}
	var commit uint64
	for _, m := range list {
		commit = max(commit, m.CommitIndex)
	}
	out := make([]statusMember, 0, len(list))
	for _, m := range list {
		sm := statusMember{ID: m.ID, RaftAddr: m.RaftAddr, ClientAddr: m.ClientAddr, Voter: m.Voter, Leader: m.Leader,
			State: m.State, Term: m.Term, CommitIndex: m.CommitIndex, AppliedIndex: m.AppliedIndex, Error: m.Err}
		if m.Err == "" {
			sm.Lag = commit - min(m.AppliedIndex, commit)
		}
		out = append(out, sm)
	}
	return out, ""
}

// serveStatus serves the page at / (only /: other paths are 404) and /status.json, each
// through guard.
func serveStatus(mux *http.ServeMux, guard func(http.HandlerFunc) http.Handler, src *statusSource) {
	file := func(name, kind string) http.HandlerFunc {
		body, err := web.ReadFile("web/" + name)
		if err != nil {
			panic("ops: " + name + " not embedded") // go:embed above names it
		}
		return func(w http.ResponseWriter, _ *http.Request) {
			h := w.Header()
			h.Set("Content-Type", kind)
			h.Set("Cache-Control", "no-cache")
			// Nothing from elsewhere: the page works on a machine with no way out.
			h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; frame-ancestors 'none'")
			h.Set("X-Content-Type-Options", "nosniff")
			w.Write(body)
		}
	}
	mux.Handle("GET /{$}", guard(file("index.html", "text/html; charset=utf-8")))
	mux.Handle("GET /status.js", guard(file("status.js", "text/javascript; charset=utf-8")))
	mux.Handle("GET /status.css", guard(file("status.css", "text/css; charset=utf-8")))
	mux.Handle("GET /status.json", guard(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.Write(src.document(r.Context()))
	}))
}
