package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
)

// Config is one chaos run.
type Config struct {
	Bin     string // raftlock binary
	Dir     string // parent of the run folder
	Seed    uint64 // drives faults and clients
	Nodes   int    // cluster size (3 or 5)
	Clients int    // concurrent workload clients (plus one on durable keys)
	// MultiClients make multi-key requests (default 3); Publishers publish after changes
	// (default 2). Each node has a RESP3 subscriber, and the first one a RESP2 one too.
	MultiClients, Publishers int
	Duration                 time.Duration // workload time under faults
	Faults                   []string      // fault kinds to draw from (default AllFaults)
	Mixed                    bool          // up to two faults at once, at random moments
	Snapshots                bool          // run nodes with tiny snapshot thresholds
	// TypedClients work on counters, sorted sets and lists (default 4); KindsClients on shares,
	// plain locks, MLOCKs, semaphore permits and lock-delays (default 2).
	TypedClients, KindsClients int
	// LinTimeout bounds porcupine per key (default 30s); a key it cannot decide in time is
	// reported as inconclusive, not as passed.
	LinTimeout time.Duration
	Keep       bool // keep the run folder even when the run passed
	// NodeArgs are more flags for every node (after the harness's own), such as
	// "--group-commit no".
	NodeArgs []string
	Logf     func(format string, args ...any)
}

// snapshotFlags make raft snapshot and compact its log every few seconds under the workload
// (about 15 entries a second), keeping only 8 entries behind: a follower down for a second or
// more, and a node re-added afresh, catch up by installing the leader's snapshot.
var snapshotFlags = []string{"--snapshot-threshold", "32", "--trailing-logs", "8", "--snapshot-interval", "1s"}

// Result is what a run found.
type Result struct {
	Seed                 uint64
	Ops, Faults, Unknown int
	Violations           []string
	Inconclusive         []string // keys porcupine could not decide in time
	// UnfencedOverlap counts accesses to the unfenced resource that overlapped another holder's:
	// expected above 0 under pauses, it shows the faults bite (and why fencing exists).
	UnfencedOverlap int
	OverlapNoPause  int // of those, overlaps where no holder paused on its own
	FencedOff       int // accesses the fenced resource rejected (stale tokens)
	SnapshotInstall int // snapshots installed by followers, from the node logs
	// FaultKinds counts the faults injected by kind. DiskExits counts the nodes that exited on a
	// disk fault (a known issue: docs/known-issues.md, "Disk faults"), DiskFailStops those that
	// fail-stopped and stayed up, DiskFullReached the disk-full faults the node reported.
	FaultKinds      map[string]int
	DiskExits       int
	DiskFailStops   int
	DiskFullReached int
	Typed           TypedCounts
	Kinds           KindsCounts
	Waits           WaitCounts
	Multi           AtomicityResult
	PubSub          PubSubResult
	Folder          string
}

// Summary is the one-line summary of a run.
func (r Result) Summary() string {
	m, p, d, k, q := r.Multi, r.PubSub, r.Typed, r.Kinds, r.Waits
	return fmt.Sprintf("chaos: ops=%d faults=%d unknown=%d violations=%d unfenced_overlap=%d (%d without a client pause) fenced_off=%d inconclusive=%d snapshot_installs=%d"+
		" counter_ops=%d zset_ops=%d list_ops=%d typed_unknown=%d"+
		" kinds_ops=%d shares=%d permits=%d kinds_locks=%d mlocks=%d (refused %d) delays_seen=%d kinds_unknown=%d"+
		" waits=%d granted=%d wait_timeouts=%d wait_failed=%d wait_unknown=%d observed_places=%d pairs_checked=%d (mixed %d) shares_batched=%d reads_after_grant=%d"+
		" waits_by_kind(waits/granted/observed)=lock:%s,shared:%s,sem:%s,mlock:%s"+
		" multikey=%d (collections %d) multikey_reads=%d (collections %d) aborted=%d partial=%d (collections %d)"+
		" published=%d delivered=%d expected=%d duplicates=%d lost=%d lost_in_snapshot=%d order_violations=%d stale_reads=%d"+
		" faults_by_kind=%s disk_exits=%d disk_failstops=%d disk_full_reached=%d seed=%d",
		r.Ops, r.Faults, r.Unknown, len(r.Violations), r.UnfencedOverlap, r.OverlapNoPause, r.FencedOff, len(r.Inconclusive), r.SnapshotInstall,
		d.Counter, d.ZSet, d.List, d.Unknown,
		k.Ops, k.Shares, k.Permits, k.Locks, k.MLocks, k.MLocksRefused, k.DelaysSeen, k.Unknown,
		q.Waits, q.Granted, q.TimedOut, q.Failed, q.Unknown, q.Observed, q.Pairs, q.MixedPairs, q.Batches, q.AfterGrant,
		q.Lock, q.Shared, q.Sem, q.MLock,
		m.Requests, m.CollRequests, m.Reads, m.CollReads, m.Aborted, m.Partial, m.CollPartial,
		p.Published, p.Delivered, p.Expected, p.Duplicates, p.Lost, p.LostInSnapshot, p.OrderViolation, p.Stale,
		byKind(r.FaultKinds), r.DiskExits, r.DiskFailStops, r.DiskFullReached, r.Seed)
}

// byKind writes counts by kind as kind:n,kind:n, in the kinds' alphabetical order.
func byKind(counts map[string]int) string {
	var parts []string
	for _, k := range slices.Sorted(maps.Keys(counts)) {
		parts = append(parts, fmt.Sprintf("%s:%d", k, counts[k]))
	}
	return strings.Join(parts, ",")
}

// Run starts a cluster, runs the workload under faults, heals, checks, and stops the cluster.
// A failing run keeps its folder (Result.Folder): the history, porcupine's visualization of
// every failing key, the violations and every node's log.
func Run(cfg Config) (res Result, err error) {
	if cfg.Nodes == 0 {
		cfg.Nodes = 3
	}
	if cfg.Clients == 0 {
		cfg.Clients = 2 * cfg.Nodes
	}
	if len(cfg.Faults) == 0 {
		cfg.Faults = AllFaults
	}
	if cfg.LinTimeout == 0 {
		cfg.LinTimeout = 30 * time.Second
	}
	if cfg.MultiClients == 0 {
		cfg.MultiClients = 3
	}
	if cfg.Publishers == 0 {
		cfg.Publishers = 2
	}
	if cfg.TypedClients == 0 {
		cfg.TypedClients = 4
	}
	if cfg.KindsClients == 0 {
		cfg.KindsClients = 2
	}
	logf := cfg.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	root := filepath.Join(cfg.Dir, fmt.Sprintf("chaos-seed%d-%s", cfg.Seed, time.Now().Format("150405.000")))
	if err := os.MkdirAll(root, 0o755); err != nil {
		return res, err
	}
	var extra []string
	if cfg.Snapshots {
		extra = snapshotFlags
	}
	extra = append(slices.Clip(extra), cfg.NodeArgs...)
	rec := newRecorder(cfg.Seed)
	c, err := startCluster(cfg.Bin, root, cfg.Nodes, extra, slices.Contains(cfg.Faults, DiskFull), rec, logf)
	if err != nil {
		return res, fmt.Errorf("start the cluster (node logs in %s): %w", root, err)
	}
	c.groups = groupsOf(cfg.NodeArgs)
	if len(c.mounted) == 0 {
		cfg.Faults = slices.DeleteFunc(slices.Clone(cfg.Faults), func(k string) bool { return k == DiskFull })
		if len(cfg.Faults) == 0 {
			c.stop()
			return res, errors.New("disk-full needs a tmpfs per node, and this process may not mount one")
		}
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6368616f73))
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.clientAddr
	}
	subCtx, stopSubs := context.WithCancel(context.Background())
	defer stopSubs()
	var subWG sync.WaitGroup
	var delivered atomic.Int64
	var subs []*subscriber
	for i, n := range append(c.nodes, c.nodes[0]) {
		s := &subscriber{id: i, node: n, proto: 3, pattern: i%2 == 1, rec: rec, delivered: &delivered}
		if i == len(c.nodes) {
			s.proto, s.pattern = 2, false
		}
		subs = append(subs, s)
		subWG.Add(1)
		go func() {
			defer subWG.Done()
			s.run(subCtx)
		}()
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	multi, pubs := cfg.Clients+1, cfg.Clients+1+cfg.MultiClients
	typed := pubs + cfg.Publishers
	kinds := typed + cfg.TypedClients
	// one waiting client (waits.go) comes last
	waiting := kinds + cfg.KindsClients
	workers := waiting + 1
	for i := range workers {
		w := &worker{id: i, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(i+1))), rec: rec, addrs: addrs, node: i, stop: &stop}
		wg.Add(1)
		go func() {
			defer wg.Done()
			switch {
			case i == waiting:
				w.waits()
			case i >= kinds:
				w.kinds()
			case i >= typed:
				w.dataTypes()
			case i >= pubs:
				w.publisher(0)
			case i >= multi:
				w.multiKey()
			case i == cfg.Clients:
				w.durable()
			default:
				w.run()
			}
		}()
	}

	nm := &nemesis{c: c, cfg: cfg, kinds: cfg.Faults, logf: logf, busy: map[int]bool{}}
	end := time.Now().Add(cfg.Duration)
	nm.run(rng, end)
	time.Sleep(time.Until(end))
	stop.Store(true)
	wg.Wait()
	nm.healAll()
	healed := time.Now()

	var obs observed
	obs.violations = append(obs.violations, nm.violations...)
	// recovery: a fresh acquire succeeds within 10 s of the last heal
	if err := freshAcquire(addrs, healed.Add(10*time.Second)); err != nil {
		obs.violations = append(obs.violations, "recovery: "+err.Error())
	}
	for i, n := range c.nodes {
		if err := c.waitSuffrage(i, "voter", 30*time.Second); err != nil {
			obs.violations = append(obs.violations, fmt.Sprintf("recovery: %s is not a voter 30s after healing: %v", n.id, err))
		}
	}
	if d, err := converge(c, 30*time.Second); err != nil {
		obs.violations = append(obs.violations, fmt.Sprintf("convergence: %v (last digests %v)", err, d))
	}
	// A few messages once healed, with every subscriber subscribed: a run whose last fault
	// dropped every subscription still checks that none is lost.
	if !waitSubscribed(subs, 10*time.Second) {
		obs.violations = append(obs.violations, "recovery: a subscriber could not subscribe again within 10s of healing")
	}
	var again atomic.Bool
	last := &worker{id: workers, rng: rand.New(rand.NewPCG(cfg.Seed, uint64(workers+1))), rec: rec, addrs: addrs, stop: &again}
	last.publisher(5)
	// every node applied every message: what is still on its way is in sockets and queues
	if d, err := converge(c, 10*time.Second); err != nil {
		obs.violations = append(obs.violations, fmt.Sprintf("convergence after the last messages: %v (last digests %v)", err, d))
	}
	drain(&delivered, 5*time.Second)
	stopSubs()
	subWG.Wait()
	h := rec.snapshot()
	if obs.final, err = c.finalReads(durableKeys(h.Ops)); err != nil {
		obs.violations = append(obs.violations, "final reads: "+err.Error())
	}
	if obs.groups, obs.collGroups, err = c.finalGroups(); err != nil {
		obs.violations = append(obs.violations, "final reads: "+err.Error())
	}
	if err := c.stop(); err != nil {
		obs.violations = append(obs.violations, "stop: "+err.Error())
	}
	c.net.mu.Lock()
	logf("proxies: identified sources %v, unknown sources %v", c.net.known, c.net.unknown)
	if n := c.net.unknown["raft"]; n > 0 {
		obs.violations = append(obs.violations, fmt.Sprintf("harness: %d raft connections came from an unknown source IP: link faults cannot be directed", n))
	}
	c.net.mu.Unlock()
	logs := map[string]string{}
	for _, n := range c.nodes {
		obs.logs = append(obs.logs, n.logPath)
		logs[n.id] = n.logPath
	}
	obs.restores = snapshotRestores(logs, rec.start)

	obs.raftGroups = groupsOf(cfg.NodeArgs)
	obs.movedSlots = nm.movedSlots()
	res, bad, clk := evaluate(h, obs, cfg.LinTimeout)
	res.Faults = nm.count
	res.FaultKinds = map[string]int{}
	for _, f := range h.Faults {
		res.FaultKinds[f.Kind]++
	}
	res.DiskExits, res.DiskFailStops, res.DiskFullReached = int(nm.diskExits.Load()), int(nm.diskFailStops.Load()), int(nm.diskFullReached.Load())
	if len(res.Violations) == 0 && !cfg.Keep {
		os.RemoveAll(root)
		return res, nil
	}
	res.Folder = root
	if err := writeFailure(root, h, bad, clk, res.Violations); err != nil {
		return res, fmt.Errorf("writing the failure folder %s: %w", root, err)
	}
	logf("chaos: seed %d failed; history, visualizations and node logs in %s", cfg.Seed, root)
	return res, nil
}

// observed is what a run saw besides the history.
type observed struct {
	violations []string                         // found while running and healing
	final      map[string]map[string]finalRead  // node -> durable key -> its own table's view
	groups     map[string]map[string][]string   // node -> multi-key group -> its own table's values
	collGroups map[string]map[string][][]string // node -> collection group -> its own table's contents
	restores   map[string][]int64               // node -> when it installed a leader's snapshot
	logs       []string                         // every node's log
	raftGroups int                              // the nodes' --groups (0 or 1: one group)
	movedSlots map[int]bool                     // the slots slot-move faults tried to move
}

// evaluate runs every checker over a history and what the run observed.
func evaluate(h History, obs observed, linTimeout time.Duration) (Result, []LinResult, *clockTimeline) {
	res := Result{Seed: h.Seed, Ops: len(h.Ops), Faults: len(h.Faults), Typed: countTyped(h.Typed), Kinds: countKinds(h.Kinds)}
	for _, op := range h.Ops {
		if op.Outcome == Unknown {
			res.Unknown++
		}
	}
	for _, a := range h.Fenced {
		if !a.Accepted {
			res.FencedOff++
		}
	}
	res.UnfencedOverlap, res.OverlapNoPause = unfencedOverlap(h.Unfenced)
	res.SnapshotInstall = countInLogs(obs.logs, installedSnapshot)
	clk := newClockTimeline(h.Clock)

	v := append([]string(nil), obs.violations...)
	v = append(v, checkLogs(obs.logs)...)
	// every kind's grants come from the one token counter (of their key's group)
	var groupOf func(string) int
	if groups := obs.raftGroups; groups > 1 {
		groupOf = func(key string) int { return keyGroup(key, groups) }
	}
	v = append(v, checkFencing(slices.Concat(h.Ops, h.Kinds, h.Waits), counterOf(groupOf, obs.movedSlots))...)
	v = append(v, checkMLock(h.Kinds)...)
	var fifo []string
	res.Waits, fifo = checkWaitOrder(h.Waits, h.Queues)
	v = append(v, fifo...)
	v = append(v, checkResource(h.Fenced, clk)...)
	if obs.final != nil {
		v = append(v, checkDurable(h.Ops, obs.final)...)
	}
	res.Multi = checkAtomicity(h.Multi, obs.groups, obs.collGroups)
	v = append(v, res.Multi.Violations...)
	res.PubSub = checkPubSub(h.Publishes, h.Subs, obs.restores, stayedIn(groupOf, obs.movedSlots))
	v = append(v, res.PubSub.Violations...)
	if n := res.Multi.Unreported + res.PubSub.Unreported; n > 0 {
		v = append(v, fmt.Sprintf("... and %d more atomicity and pub/sub violations (counts in the summary line)", n))
	}
	var bad []LinResult
	lin := slices.Concat(checkLinearizable(h.Ops, clk, linTimeout), checkKinds(h.Kinds, clk, linTimeout), checkDataTypes(h.Typed, linTimeout))
	for _, l := range lin {
		switch l.Result {
		case porcupine.Illegal:
			what := "key "
			if l.Model != Lock {
				what = l.Model + " key "
			}
			v = append(v, "linearizability: "+what+l.Key+" has no linearization")
			bad = append(bad, l)
		case porcupine.Unknown:
			res.Inconclusive = append(res.Inconclusive, l.Key)
		}
	}
	res.Violations = v
	return res, bad, clk
}

func durableKeys(ops []Op) []string {
	seen := map[string]bool{}
	var out []string
	for _, op := range ops {
		if strings.HasPrefix(op.Key, "d") && !seen[op.Key] {
			seen[op.Key] = true
			out = append(out, op.Key)
		}
	}
	sort.Strings(out)
	return out
}

func countInLogs(paths []string, s string) int {
	n := 0
	for _, p := range paths {
		if b, err := os.ReadFile(p); err == nil {
			n += strings.Count(string(b), s)
		}
	}
	return n
}

// writeFailure puts the history, porcupine's visualization of each failing key and the
// violations next to the node logs in root, and drops the nodes' data directories.
func writeFailure(root string, h History, bad []LinResult, clk *clockTimeline, violations []string) error {
	b, err := json.MarshalIndent(h, "", " ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "history.json"), b, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(root, "violations.txt"), []byte(strings.Join(violations, "\n")+"\n"), 0o644); err != nil {
		return err
	}
	for _, l := range bad {
		if err := porcupine.VisualizePath(modelOf(l.Model, clk), l.Info, filepath.Join(root, "lin-"+l.Key+".html")); err != nil {
			return err
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(root, "n*", "data"))
	for _, d := range dirs {
		os.RemoveAll(filepath.Dir(d))
	}
	return nil
}

// converge waits until every node reports the same digest.
func converge(c *cluster, timeout time.Duration) ([]string, error) {
	deadline := time.Now().Add(timeout)
	var d []string
	var err error
	for time.Now().Before(deadline) {
		d, err = c.digests()
		if err == nil && len(d) == len(c.nodes) && digestsAgree(d) {
			return d, nil
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err == nil {
		err = fmt.Errorf("digests differ after %v", timeout)
	}
	return d, err
}
