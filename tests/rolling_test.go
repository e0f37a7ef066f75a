package tests

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/resp"
	"github.com/raftlock/raftlock/tests/testutil"
)

// Rolling restart and upgrade bounds.
const (
	catchUpTimeout = 30 * time.Second // a restarted node applies what it missed
	progressOps    = 30               // operations each worker of a node must get answered after it restarts
	progressWait   = 30 * time.Second
	// rollTrailingLogs is --trailing-logs in the upgrade test: a node stopped for a few hundred
	// entries finds the leader's log compacted past it, and must install a snapshot.
	rollTrailingLogs = 64
)

// TestRollingRestart restarts every node of a 3-node cluster in turn (SIGTERM, then a start on
// the same directory and ports, waiting until it has caught up and serves before the next one),
// then kills the leader with SIGKILL and restarts it, under a steady lock load through every
// node. Nothing acknowledged is lost and no lock is granted twice (rollLoad.verify).
func TestRollingRestart(t *testing.T) {
	began := time.Now()
	c := newCluster(t, 3)
	load := startRollLoad(t, "rr", addrs(c.nodes), "3 nodes up")
	load.waitProgress("", progressOps, progressWait)
	for i := range c.nodes {
		n := c.nodes[i]
		load.setPhase(fmt.Sprintf("SIGTERM %s (%s)", n.id, c.role(n)))
		c.cycle(load, n, "", false)
	}
	l := c.leader()
	load.setPhase(fmt.Sprintf("kill -9 %s (leader)", l.id))
	c.cycle(load, l, "", true)
	load.setPhase("all restarted")
	load.waitProgress("", progressOps, progressWait)
	load.verify(c)
	t.Logf("rolling restart: %v in all", time.Since(began).Round(time.Millisecond))
}

// TestRollingUpgrade starts a 3-node cluster on the previous version's binary (previousVersion,
// built from git history) and replaces its nodes one at a time with this tree's binary, on the
// same directories and ports, under a steady lock load through every node. On the way it makes
// each binary read the other's snapshot: a follower stopped while the old leader snapshots and
// compacts its log comes back on the new binary and installs the old snapshot; then, with a new
// node leading, an old follower is made to lag the same way and comes back on the old binary to
// install the new leader's snapshot (which must still be in the old format: not every member runs
// the new binary yet). The old leader is upgraded last. Nothing acknowledged is lost and no lock
// is granted twice.
func TestRollingUpgrade(t *testing.T) {
	began := time.Now()
	oldBin := binaryAt(t, previousCommit)
	t.Logf("previous version %s (%s) built (or found in the cache) in %v", previousVersion, previousCommit[:12], time.Since(began).Round(time.Millisecond))
	c := newClusterOf(t, oldBin, 3, "--trailing-logs", strconv.Itoa(rollTrailingLogs))
	load := startRollLoad(t, "ru", addrs(c.nodes), "3 nodes of "+previousVersion)
	load.waitProgress("", progressOps, progressWait)
	formats := &formatWatch{t: t}
	formats.look(c, "old cluster")

	oldLeader := c.leader()
	f := c.others(oldLeader)
	a, b := f[0], f[1]

	// New reads old: a comes back on the new binary behind the old leader's compacted log.
	load.setPhase(fmt.Sprintf("upgrade %s, installs an old snapshot", a.id))
	a = c.lagAndRestart(load, a, oldLeader, raftlockBin)
	formats.look(c, "1 of 3 upgraded")

	// A new node leads a mixed cluster.
	load.setPhase(fmt.Sprintf("new %s leads old %s, %s", a.id, oldLeader.id, b.id))
	if v, err := call(oldLeader.addr, "RAFT", "TRANSFER", a.id); err != nil || v != "OK" {
		t.Fatalf("RAFT TRANSFER %s on the old leader %s: %v, %v", a.id, oldLeader.id, v, err)
	}
	if l := c.leader(); l != a {
		t.Fatalf("after RAFT TRANSFER %s: %s leads", a.id, l.id)
	}
	load.waitProgress("", progressOps, progressWait)
	c.checkReplicated()

	// Old reads new: b, still old, comes back behind the new leader's compacted log.
	load.setPhase(fmt.Sprintf("restart old %s, installs a new leader's snapshot", b.id))
	b = c.lagAndRestart(load, b, a, oldBin)
	formats.look(c, "new leader, 2 old followers")

	load.setPhase(fmt.Sprintf("upgrade %s", b.id))
	b = c.cycle(load, b, raftlockBin, false)
	formats.look(c, "2 of 3 upgraded")

	load.setPhase(fmt.Sprintf("upgrade %s (the old leader)", oldLeader.id))
	c.cycle(load, oldLeader, raftlockBin, false)

	load.setPhase("all upgraded")
	formats.settled(c)
	// Snapshots in the format the whole cluster now writes: the leader's, and a follower's own,
	// which it restores when it restarts.
	c.snapshot(c.leader())
	f = c.followers()
	c.snapshot(f[0])
	load.setPhase(fmt.Sprintf("restart %s on its new snapshot", f[0].id))
	c.cycle(load, f[0], raftlockBin, false)
	load.setPhase("end")
	load.waitProgress("", progressOps, progressWait)
	load.verify(c)
	t.Logf("rolling upgrade: %v in all", time.Since(began).Round(time.Millisecond))
}

// role is "leader" or "follower".
func (c *cluster) role(n *node) string {
	if c.leader() == n {
		return "leader"
	}
	return "follower"
}

// binName says which binary a node runs, for messages.
func binName(n *node) string {
	if n.bin == "" || n.bin == raftlockBin {
		return "new"
	}
	return "old"
}

// cycle stops n (SIGTERM, or SIGKILL if kill), starts bin on its directory and ports (bin ""
// is raftlockBin), waits until it has caught up (waitCaughtUp) and its workers get answers
// through it again, and returns the new process.
func (c *cluster) cycle(load *rollLoad, n *node, bin string, kill bool) *node {
	c.t.Helper()
	began := time.Now()
	from := binName(n)
	if kill {
		n.kill9()
	} else {
		c.stopRolled(n)
	}
	stopped := time.Since(began)
	n.bin = bin
	n = c.restartObserved(n)
	c.waitCaughtUp(n)
	load.waitProgress(n.addr, progressOps, progressWait)
	c.checkReplicated()
	c.t.Logf("%s: %s binary stopped in %v, %s binary caught up and serving %v later",
		n.id, from, stopped.Round(time.Millisecond), binName(n), (time.Since(began) - stopped).Round(time.Millisecond))
	return n
}

// restartObserved restarts n with --metrics-addr, so /readyz can be asked.
func (c *cluster) restartObserved(n *node) *node {
	c.t.Helper()
	if !slices.Contains(n.args, "--metrics-addr") {
		web := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(c.t)))
		n.args = append(slices.Clone(n.args), "--metrics-addr", web)
	}
	c.checkRunning()
	return c.restart(n)
}

// metricsAddr is the node's --metrics-addr, or "".
func (n *node) metricsAddr() string {
	if i := slices.Index(n.args, "--metrics-addr"); i >= 0 && i+1 < len(n.args) {
		return n.args[i+1]
	}
	return ""
}

// waitCaughtUp waits until every live node names the same ready leader, n has applied every
// entry that leader had committed when n came back (it has caught up on what it missed; the load
// goes on meanwhile), and, on a binary that has it, n's /readyz says it is ready.
func (c *cluster) waitCaughtUp(n *node) {
	c.t.Helper()
	var (
		leader *node
		target uint64
	)
	testutil.WaitFor(c.t, catchUpTimeout, func() error {
		if leader == nil {
			l, err := c.findLeader()
			if err != nil {
				return err
			}
			if target, err = raftInt(l, "raft_commit_index"); err != nil {
				return err
			}
			leader = l
		}
		applied, err := raftInt(n, "raft_applied_index")
		if err != nil {
			return err
		}
		if applied < target {
			return fmt.Errorf("%s has applied %d; the leader %s had committed %d when it came back", n.id, applied, leader.id, target)
		}
		if _, err := c.findLeader(); err != nil {
			return err
		}
		if web := n.metricsAddr(); web != "" && binName(n) == "new" {
			return readyz(web)
		}
		return nil
	})
}

// readyz asks /readyz on web; nil means 200 and ready.
func readyz(web string) error {
	client := http.Client{Timeout: 2 * time.Second}
	res, err := client.Get("http://" + web + "/readyz")
	if err != nil {
		return err
	}
	defer res.Body.Close()
	var body struct {
		Ready   bool     `json:"ready"`
		Reasons []string `json:"reasons"`
	}
	if err := json.NewDecoder(res.Body).Decode(&body); err != nil {
		return fmt.Errorf("/readyz: %w", err)
	}
	if res.StatusCode != http.StatusOK || !body.Ready {
		return fmt.Errorf("/readyz: %d %v", res.StatusCode, body.Reasons)
	}
	return nil
}

// checkRunning fails the test at once if a node it started has exited on its own (an old binary
// that could not read what a new one wrote, say), naming its binary.
func (c *cluster) checkRunning() {
	c.t.Helper()
	for _, n := range c.nodes {
		// Stop of an exited process only says whether its exit was expected.
		if n.proc != nil && !n.Running() {
			if err := n.Stop(0); errors.Is(err, testutil.ErrExitedEarly) {
				c.t.Fatalf("%s (%s binary) exited on its own: %v (its log is printed below)", n.id, binName(n), err)
			}
		}
	}
}

// checkReplicated takes a lock through the leader and waits until every live node shows it in
// its own table (READONLY): each node applies what the leader writes, whichever binary either
// runs. A node whose log says it could not decode an entry fails the test at once, naming it
// (an old binary given an entry format it does not know skips the entry and falls behind).
func (c *cluster) checkReplicated() {
	c.t.Helper()
	c.checkRunning()
	l := c.leader()
	key := fmt.Sprintf("replicated/%d", time.Now().UnixNano())
	tok, err := callInt(l.addr, "LOCK", key, strconv.Itoa(rollLease), "OWNER", "replicated")
	if err != nil {
		c.t.Fatalf("LOCK %s on the leader %s: %v", key, l.id, err)
	}
	ctx := testContext(c.t, catchUpTimeout)
	for _, n := range c.live() {
		rdb := readonlyClient(c.t, n.addr)
		testutil.WaitFor(c.t, catchUpTimeout, func() error {
			if strings.Contains(n.Log(), undecodableEntry) {
				c.t.Fatalf("%s (%s binary) could not decode an entry written under the leader %s (%s binary): %q in its log (printed below)",
					n.id, binName(n), l.id, binName(l), undecodableEntry)
			}
			st, held, err := lockInfo(ctx, rdb, key)
			if err == nil && (!held || st.owner != "replicated" || st.token != tok) {
				err = fmt.Errorf("%s (%s binary): LOCKINFO %s = %s; want held by replicated with token %d (granted by the leader %s)",
					n.id, binName(n), key, showLock(st, held), tok, l.id)
			}
			return err
		})
	}
}

// undecodableEntry is what raftnode logs for a log entry it cannot decode (and skips).
const undecodableEntry = "undecodable log entry"

// raftInt reads one integer field of INFO raft on n.
func raftInt(n *node, field string) (uint64, error) {
	info, err := infoRaft(n.addr)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(info[field], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("INFO raft %s on %s: %q: %w", field, n.id, info[field], err)
	}
	return v, nil
}

// snapshot runs RAFT SNAPSHOT on n (again after "too soon") and returns the index the node's
// newest snapshot is at.
func (c *cluster) snapshot(n *node) uint64 {
	c.t.Helper()
	testutil.WaitFor(c.t, 15*time.Second, func() error {
		v, err := call(n.addr, "RAFT", "SNAPSHOT")
		if err != nil {
			var re *resp.ReplyError
			if errors.As(err, &re) && strings.Contains(err.Error(), "too soon") {
				return err
			}
			c.t.Fatalf("RAFT SNAPSHOT on %s (%s binary): %v", n.id, binName(n), err)
		}
		if v != "OK" {
			c.t.Fatalf("RAFT SNAPSHOT on %s: %#v", n.id, v)
		}
		return nil
	})
	idx, err := raftInt(n, "raft_last_snapshot_index")
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Logf("RAFT SNAPSHOT on %s (%s binary): at index %d", n.id, binName(n), idx)
	return idx
}

// lagAndRestart makes n install a snapshot of leader's: it stops n, takes a lock nobody else
// touches (the sentinel), waits until the load has written well past what the leader keeps
// behind a snapshot, runs RAFT SNAPSHOT on the leader (which compacts its log past n), then
// starts bin on n's directory and waits until it has caught up. n must have installed the
// snapshot (its own newest is at or past the leader's) and show the sentinel in its own table.
func (c *cluster) lagAndRestart(load *rollLoad, n, leader *node, bin string) *node {
	c.t.Helper()
	began := time.Now()
	last, err := raftInt(n, "raft_last_index")
	if err != nil {
		c.t.Fatal(err)
	}
	from := binName(n)
	c.stopRolled(n)
	sentinel := fmt.Sprintf("sentinel/%s/%d", n.id, time.Now().UnixNano())
	tok, err := callInt(leader.addr, "LOCK", sentinel, strconv.Itoa(rollLease), "OWNER", "sentinel")
	if err != nil {
		c.t.Fatalf("LOCK %s on the leader %s: %v", sentinel, leader.id, err)
	}
	testutil.WaitFor(c.t, progressWait, func() error {
		applied, err := raftInt(leader, "raft_applied_index")
		if err == nil && applied < last+4*rollTrailingLogs {
			err = fmt.Errorf("the leader %s has applied %d; waiting for %d (the stopped %s is at %d)", leader.id, applied, last+4*rollTrailingLogs, n.id, last)
		}
		return err
	})
	snap := c.snapshot(leader)
	first, err := raftInt(leader, "store_first_index")
	if err != nil {
		c.t.Fatal(err)
	}
	if first <= last+1 {
		c.t.Fatalf("after RAFT SNAPSHOT the leader %s keeps its log from %d: %s (at %d) needs no snapshot", leader.id, first, n.id, last)
	}
	n.bin = bin
	n = c.restartObserved(n)
	c.waitCaughtUp(n)
	got, err := raftInt(n, "raft_last_snapshot_index")
	if err != nil {
		c.t.Fatal(err)
	}
	if got < snap {
		c.t.Fatalf("%s (%s binary) restarted with its newest snapshot at %d, not the leader's at %d: it did not install it", n.id, binName(n), got, snap)
	}
	ctx := testContext(c.t, 10*time.Second)
	st, held, err := lockInfo(ctx, readonlyClient(c.t, n.addr), sentinel)
	if err != nil || !held || st.owner != "sentinel" || st.token != tok {
		c.t.Fatalf("%s's own table after installing %s's snapshot: LOCKINFO %s = %s, %v; want held by sentinel with token %d",
			n.id, leader.id, sentinel, showLock(st, held), err, tok)
	}
	load.waitProgress(n.addr, progressOps, progressWait)
	c.checkReplicated()
	c.t.Logf("%s: %s binary stopped at index %d; the leader %s (%s binary) snapshotted at %d and kept its log from %d; %s binary installed it and caught up in %v in all",
		n.id, from, last, leader.id, binName(leader), snap, first, binName(n), time.Since(began).Round(time.Millisecond))
	return n
}

// formatWatch follows the log format INFO raft reports (raft_log_format): while old binaries
// are members it must stay one they read (below fsm.FormatCurrent: 4 for v0.2.0, whose new
// clusters write its own format at once); once every member runs the new binary it must move
// on to fsm.FormatCurrent, the same on every node.
type formatWatch struct {
	t     *testing.T
	mixed map[string]string // field -> value reported while the cluster was mixed
}

func formatFields(info map[string]string) map[string]string {
	out := map[string]string{}
	if v, ok := info["raft_log_format"]; ok {
		out["raft_log_format"] = v
	}
	return out
}

// look logs what every live node reports, and checks, while old binaries are members, that
// every node reporting a field reports the value first seen.
func (f *formatWatch) look(c *cluster, when string) {
	f.t.Helper()
	for _, n := range c.live() {
		info, err := infoRaft(n.addr)
		if err != nil {
			f.t.Fatalf("INFO raft on %s: %v", n.id, err)
		}
		fields := formatFields(info)
		f.t.Logf("%s: %s (%s binary): log format fields %v", when, n.id, binName(n), fields)
		if f.mixed == nil {
			f.mixed = map[string]string{}
		}
		for k, v := range fields {
			if prev, ok := f.mixed[k]; !ok {
				f.mixed[k] = v
			} else if prev != v {
				f.t.Errorf("%s: %s reports %s:%s, but %s before, while old binaries are members", when, n.id, k, v, prev)
			}
		}
	}
}

// settled waits, once every node runs the new binary, until every node reports the same format
// fields; a field that exists must have moved on from its mixed-cluster value.
func (f *formatWatch) settled(c *cluster) {
	f.t.Helper()
	if mixed, err := strconv.Atoi(f.mixed["raft_log_format"]); err != nil || mixed >= int(fsm.FormatCurrent) {
		f.t.Fatalf("while old binaries were members the nodes reported raft_log_format %q, want one below %d", f.mixed["raft_log_format"], fsm.FormatCurrent)
	}
	want := map[string]string{"raft_log_format": strconv.Itoa(int(fsm.FormatCurrent))}
	testutil.WaitFor(f.t, catchUpTimeout, func() error {
		var first map[string]string
		for _, n := range c.live() {
			info, err := infoRaft(n.addr)
			if err != nil {
				return err
			}
			fields := formatFields(info)
			for k, v := range f.mixed {
				if fields[k] == v {
					return fmt.Errorf("%s still reports %s:%s with every member upgraded", n.id, k, v)
				}
			}
			if fmt.Sprint(fields) != fmt.Sprint(want) {
				return fmt.Errorf("%s reports %v, want %v", n.id, fields, want)
			}
			first = fields
		}
		f.t.Logf("every node upgraded: log format fields %v (were %v)", first, f.mixed)
		return nil
	})
}

// oldShutdownPanic is how the previous release (v0.2.0, on hashicorp/raft v1.8.0) may end at
// SIGTERM: a heartbeat that reaches raft after its store closed (docs/known-issues.md, Upgrades).
const oldShutdownPanic = `panic: failed to save current term: set "CurrentTerm": store: closed`

// stopRolled stops n with SIGTERM, as an operator does in a rolling upgrade. The previous
// release's known shutdown panic is logged and forgiven: the node stopped, which is what the
// step needs; any other unclean exit fails the test, and so does any panic of this tree's binary.
func (c *cluster) stopRolled(n *node) {
	c.t.Helper()
	err := n.stop()
	if err == nil {
		return
	}
	if n.bin == "" || n.bin == raftlockBin || !strings.Contains(n.Log(), oldShutdownPanic) {
		c.t.Fatalf("stop %s: %v", n.id, err)
	}
	n.ForgiveLog()
	c.t.Logf("stop %s (%s binary): the previous release's known shutdown panic, forgiven: %v", n.id, binName(n), err)
}
