package chaos

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
)

// The two disk faults a process harness can inject (docs/disk-faults.md):
//   - disk-fail: the node's data directory starts failing every write and sync with EIO, for
//     good. Nodes run with --test-disk-faults (a test build): SIGUSR2 flips their store's
//     filesystem to failing (cmd/raftlock/diskfault_on.go), since a device that fails on demand
//     needs device-mapper, which these machines may lack. The node must fail-stop and stay up to
//     say so: INFO persistence disk_state:failed, and a write through it refused with MISCONF,
//     never OK. Then it is restarted on the same data, as an operator does once the disk is
//     repaired, and must catch up.
//   - disk-full: the node's own filesystem (a tmpfs per node, mounted when the harness may)
//     filled to the last byte for a few seconds, then freed. The node must take writes again by
//     itself.
// A node that exits on the fault instead is a known limitation (pebble's own writes end the
// process when they fail: docs/known-issues.md), counted (disk_exits), not a violation; it is
// restarted.
// Either way, the histories' checks judge every reply: a MISCONF that says nothing was written
// is a certain failure (certainFailure), so a refused write that applied would be a violation.

// diskSize is each node's tmpfs: room for a run's log segments (8 MiB each), snapshots and
// pebble, never used up by the run itself; tmpfs takes memory only for what is written.
const diskSize = "512m"

// mountDisks gives each node's folder (its data directory's parent) a tmpfs of its own, so that
// disk-full can fill one node's filesystem. It reports false, with why, when mounting is not
// permitted (not root, a container without CAP_SYS_ADMIN): the run then has no disk-full fault.
func (c *cluster) mountDisks() (bool, string) {
	for _, n := range c.nodes {
		dir := filepath.Dir(n.dir)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return false, err.Error()
		}
		if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+diskSize, "tmpfs", dir).CombinedOutput(); err != nil {
			return false, fmt.Sprintf("mount a tmpfs on %s: %v: %s", dir, err, strings.TrimSpace(string(out)))
		}
		c.mounted = append(c.mounted, dir)
	}
	return true, ""
}

// unmountDisks unmounts the node folders' tmpfs, once their processes stopped (lazily: a process
// that would not stop must not keep the run from ending).
func (c *cluster) unmountDisks() {
	for _, dir := range c.mounted {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			c.logf("umount %s: %v: %s", dir, err, strings.TrimSpace(string(out)))
		}
	}
	c.mounted = nil
}

// diskFailNoticed bounds how long a node whose disk failed may take to notice: its next write
// comes with the next append, which another fault running at the same time (a partition, slow
// links, a paused leader) can hold back for several seconds.
const diskFailNoticed = 30 * time.Second

// diskState is the node's INFO persistence disk_state (ok, full or failed), or why it is unknown.
func diskState(n *node) string {
	v, err := query(n.clientAddr, "INFO", "persistence")
	if err != nil {
		return "unknown (" + err.Error() + ")"
	}
	s, _ := v.(string)
	for _, line := range strings.Split(s, "\r\n") {
		if state, ok := strings.CutPrefix(line, "disk_state:"); ok {
			return state
		}
	}
	return "unknown (no disk_state in INFO persistence)"
}

// diskTarget claims a node for a disk fault (the leader half the time), once it serves: a
// process signalled before it set up its handler would die of SIGUSR2 (Go's default). It
// returns the node, its process and its log's size (what the fault's checks read past), or nil
// and why the fault is skipped. The caller releases the node.
func (nm *nemesis) diskTarget(rng *rand.Rand) (nd *node, p *testutil.Proc, logFrom int64, skip string) {
	i := nm.claim(rng, 0.5, -1)
	if i < 0 {
		return nil, nil, 0, "no node free for a disk fault"
	}
	nd = nm.c.nodes[i]
	if err := nd.waitServing(10 * time.Second); err != nil {
		nm.release(i)
		return nil, nil, 0, fmt.Sprintf("%s not serving, disk left alone: %v", nd.id, err)
	}
	return nd, nd.current(), logSize(nd.logPath), ""
}

// diskFail fails a node's disk (SIGUSR2), checks that it fail-stops and says so, and restarts it.
func (nm *nemesis) diskFail(rng *rand.Rand) string {
	c := nm.c
	nd, p, logFrom, skip := nm.diskTarget(rng)
	if nd == nil {
		return skip
	}
	defer nm.release(nd.idx)
	if err := p.Signal(syscall.SIGUSR2); err != nil {
		return fmt.Sprintf("fail %s's disk: %v", nd.id, err)
	}
	// The disk fails the node at its next write: an append from the leader, its own if it
	// leads, a term if it campaigns. Writes through it make sure appends come, once whatever
	// other fault runs (a partition cutting it off) heals.
	probe := fmt.Sprintf("chaos-disk-probe-%d", rng.Uint64())
	state := "unknown"
	deadline := time.Now().Add(diskFailNoticed)
	for next := time.Now(); time.Now().Before(deadline) && state != "failed" && p.Running(); time.Sleep(100 * time.Millisecond) {
		if time.Now().After(next) {
			query(nd.clientAddr, "SET", probe, "1")
			next = time.Now().Add(2 * time.Second)
		}
		state = diskState(nd)
	}
	if state != "failed" {
		p.WaitExit(3 * time.Second) // a node that stopped answering may be exiting
	}
	outcome := "disk_state:failed, writes refused"
	switch {
	case !p.Running():
		// Fail-stop by exit: pebble's own writes (term and vote, snapshots) end the process when
		// they fail, where the raft log's keep it up to explain (docs/known-issues.md). Only an
		// exit that says it met the disk's error is that.
		if !diskPanicIn(logTail(nd.logPath, logFrom)) {
			nm.violation("disk-fail: %s exited when its disk failed, but not with a known panic on the disk's error (see %s)", nd.id, nd.logPath)
		}
		nm.diskExits.Add(1)
		outcome = "exited on the disk's error (pebble)"
	case state != "failed":
		nm.violation("disk-fail: %s's disk failed %v ago and INFO persistence says disk_state:%s", nd.id, diskFailNoticed, state)
	default:
		nm.diskFailStops.Add(1)
		// Every write through it is refused from now on, saying so.
		v, err := query(nd.clientAddr, "SET", probe, "2")
		if err == nil || !strings.HasPrefix(err.Error(), "MISCONF disk failed") {
			nm.violation("disk-fail: a write through %s after its disk failed got %v %v, want MISCONF disk failed", nd.id, v, err)
		}
	}
	d := hold(rng, 500, 3000)
	nd.kill9()
	if err := c.start(nd); err != nil {
		return fmt.Sprintf("%s's disk failed (%s); restart after %v failed: %v", nd.id, outcome, d, err)
	}
	if err := nd.waitServing(60 * time.Second); err != nil {
		nm.violation("disk-fail: %s restarted on its data after its disk failed and does not serve: %v", nd.id, err)
	}
	return fmt.Sprintf("%s's disk failed (%s), restarted on its data after %v", nd.id, outcome, d)
}

// diskFull fills a node's filesystem for a while, then frees it and checks that the node takes
// writes again by itself.
func (nm *nemesis) diskFull(rng *rand.Rand) string {
	c := nm.c
	nd, p, logFrom, skip := nm.diskTarget(rng)
	if nd == nil {
		return skip
	}
	defer nm.release(nd.idx)
	balloon := filepath.Join(filepath.Dir(nd.dir), "balloon")
	filled, err := fillDisk(balloon)
	if err != nil {
		os.Remove(balloon)
		return fmt.Sprintf("fill %s's disk: %v", nd.id, err)
	}
	// The node meets the full disk when its log needs the next segment (each is preallocated:
	// docs/disk-faults.md), which the workload alone takes minutes to fill: large writes through
	// it fill the current one, until it says its disk is full.
	during, ballast := diskState(nd), 0
	mset := []string{"MSET"}
	for k := range ballastKeys {
		mset = append(mset, fmt.Sprintf("chaos-disk-ballast-%d", k), strings.Repeat("b", ballastValue))
	}
	for during != "full" && ballast < ballastMost && p.Running() {
		ballast++
		if _, err := query(nd.clientAddr, mset...); err != nil {
			time.Sleep(100 * time.Millisecond)
		}
		during = diskState(nd)
	}
	reached := during == "full"
	if reached {
		nm.diskFullReached.Add(1)
	}
	d := hold(rng, 1500, 5000)
	if s := diskState(nd); s != "ok" {
		during = s
	}
	if err := os.Remove(balloon); err != nil {
		nm.violation("disk-full: harness: free %s's disk: %v", nd.id, err)
	}
	desc := fmt.Sprintf("%s's disk full (%d MiB filled, %d MSETs of 240 kB; disk_state:%s)", nd.id, filled>>20, ballast, during)
	if !reached {
		desc += ", the node never said full"
	}
	// Back by itself: the log retries its spare every second; a write through the node then
	// succeeds (forwarded, if it does not lead).
	state, werr := diskState(nd), errors.New("not tried")
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline) && p.Running(); time.Sleep(200 * time.Millisecond) {
		if state = diskState(nd); state == "failed" {
			break
		}
		if state != "ok" {
			continue
		}
		if _, werr = query(nd.clientAddr, "SET", fmt.Sprintf("chaos-disk-probe-%d", rng.Uint64()), "1"); werr == nil {
			break
		}
	}
	switch {
	case !p.Running():
		// pebble's own writes end the process on ENOSPC (docs/known-issues.md).
		if !diskPanicIn(logTail(nd.logPath, logFrom)) {
			nm.violation("disk-full: %s exited on a full disk, but not with a known panic on it (see %s)", nd.id, nd.logPath)
		}
		nm.diskExits.Add(1)
		desc += ": it exited (pebble on a full disk, a known issue) and was restarted"
	case state == "failed" && strings.Contains(diskError(nd), "no space left on device"):
		// ENOSPC where the log cannot tell it from a failure (the log floor in pebble: a known
		// issue) fail-stops the node: restarted as after a failed disk.
		nm.diskFailStops.Add(1)
		nd.kill9()
		desc += ": the log took it for a failed disk (ENOSPC on the log floor, a known issue) and was restarted"
	case state != "ok":
		nm.violation("disk-full: %s's disk was freed 20 s ago and INFO persistence says disk_state:%s (%s)", nd.id, state, diskError(nd))
	case werr != nil:
		nm.violation("disk-full: %s's disk was freed 20 s ago and a write through it still fails: %v", nd.id, werr)
	default:
		return desc + fmt.Sprintf(" for %v, writable again", d)
	}
	if !p.Running() || !nd.running() {
		if err := c.start(nd); err != nil {
			return desc + fmt.Sprintf("; restart failed: %v", err)
		}
	}
	return desc
}

// diskPanicIn reports whether text holds one of the panics a disk fault is known to end a node
// with (diskPanic).
func diskPanicIn(text string) bool {
	lines := strings.Split(text, "\n")
	for i := range lines {
		if diskPanic(lines, i) {
			return true
		}
	}
	return false
}

// diskError is the node's INFO persistence disk_error, or "".
func diskError(n *node) string {
	v, err := query(n.clientAddr, "INFO", "persistence")
	if err != nil {
		return ""
	}
	s, _ := v.(string)
	for _, line := range strings.Split(s, "\r\n") {
		if text, ok := strings.CutPrefix(line, "disk_error:"); ok {
			return text
		}
	}
	return ""
}

// disk-full's large writes: MSETs of ballastKeys values of ballastValue bytes (raftlock's largest
// value is 4096 bytes), the same keys each time so the table stays small; at most ballastMost
// of them, a little over a log segment's worth (8 MiB).
const (
	ballastValue = 4000
	ballastKeys  = 60
	ballastMost  = 40
)

// fillDisk creates path and allocates every free block of its filesystem to it, returning how
// many bytes it took.
func fillDisk(path string) (int64, error) {
	var st syscall.Statfs_t
	if err := syscall.Statfs(filepath.Dir(path), &st); err != nil {
		return 0, err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	// Most of it at once, leaving a little for the node's writes meanwhile and rounding; then
	// whatever is left, in smaller and smaller pieces.
	size := int64(st.Bavail)*st.Bsize - 4<<20
	if size > 0 {
		if err := syscall.Fallocate(int(f.Fd()), 0, 0, size); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				return 0, err
			}
			size = 0
		}
	}
	size = max(size, 0)
	for _, chunk := range [][]byte{make([]byte, 1<<20), make([]byte, 4096)} {
		for {
			if _, err := f.WriteAt(chunk, size); err != nil {
				break
			}
			size += int64(len(chunk))
		}
	}
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	return fi.Size(), nil
}
