package chaos

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/fsm"
)

// Fault kinds.
const (
	PartitionLeader   = "partition-leader"   // the leader alone on one side
	PartitionMinority = "partition-minority" // a random minority from the majority
	Bridge            = "bridge"             // two halves that cannot see each other; one node sees both
	Pause             = "pause"              // SIGSTOP, then SIGCONT
	Kill              = "kill"               // kill -9, restart from its data
	KillAll           = "kill-all"           // kill -9 every node, restart them all
	Slow              = "slow"               // one node's links delayed
	ClockSkew         = "clock-skew"         // one node's lease clock offset for a while
	ClockJump         = "clock-jump"         // one node's lease clock jumps forward or back
	Membership        = "membership"         // RAFT REMOVE a node (it exits), re-add it afresh with --join
	SnapshotInstall   = "snapshot-install"   // a follower down while the leader compacts past it
	DiskFail          = "disk-fail"          // a node's disk fails every write and sync (EIO), then it restarts
	DiskFull          = "disk-full"          // a node's filesystem full for a few seconds (tmpfs per node)
	// SlotMove moves the hash slot of a lock key in use to another raft group (RAFT MOVESLOTS):
	// only a cluster of several groups has one (docs/groups.md), so it is not in AllFaults.
	SlotMove = "slot-move"
)

// AllFaults lists every fault kind.
var AllFaults = []string{PartitionLeader, PartitionMinority, Bridge, Pause, Kill, KillAll, Slow,
	ClockSkew, ClockJump, Membership, SnapshotInstall, DiskFail, DiskFull}

// exclusive faults run alone even in mixed mode: they change who is in the cluster, and the
// checks they make (a removed node exits, a re-added one becomes a voter) need a working one.
var exclusive = map[string]bool{KillAll: true, Membership: true}

// nemesis injects faults into a cluster: one at a time, or in mixed mode up to two at once at
// random moments, each on nodes no other running fault is acting on.
type nemesis struct {
	c     *cluster
	cfg   Config
	kinds []string
	logf  func(string, ...any)

	mu         sync.Mutex
	busy       map[int]bool // nodes a running fault acts on
	active     int
	count      int
	violations []string
	wg         sync.WaitGroup
	// Disk faults' outcomes: nodes that exited on one, as pebble's failed writes make them (a
	// known issue, not a violation); nodes that fail-stopped and stayed up; disk-full faults
	// that the node reported as full.
	diskExits, diskFailStops, diskFullReached atomic.Int64
	// moved are the hash slots a slot-move fault tried to move (its outcome may be unknown):
	// their keys' tokens come from more than one group's counter. Guarded by mu.
	moved map[int]bool
}

// movedSlots are the slots slot-move faults tried to move.
func (nm *nemesis) movedSlots() map[int]bool {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	return maps.Clone(nm.moved)
}

func (nm *nemesis) violation(format string, args ...any) {
	nm.mu.Lock()
	nm.violations = append(nm.violations, fmt.Sprintf(format, args...))
	nm.mu.Unlock()
}

// run injects faults until end, then waits for the running ones to heal.
func (nm *nemesis) run(rng *rand.Rand, end time.Time) {
	for time.Now().Add(2 * time.Second).Before(end) {
		if nm.cfg.Mixed {
			time.Sleep(time.Duration(300+rng.IntN(1200)) * time.Millisecond)
		} else {
			time.Sleep(time.Duration(1000+rng.IntN(2000)) * time.Millisecond)
		}
		if !time.Now().Before(end) {
			break
		}
		kind := nm.kinds[rng.IntN(len(nm.kinds))]
		frng := rand.New(rand.NewPCG(rng.Uint64(), rng.Uint64()))
		if !nm.cfg.Mixed || exclusive[kind] {
			nm.wg.Wait()
			nm.inject(kind, frng)
			continue
		}
		for nm.activeCount() >= 2 {
			time.Sleep(100 * time.Millisecond)
		}
		nm.mu.Lock()
		nm.active++
		nm.mu.Unlock()
		nm.wg.Add(1)
		go func() {
			defer nm.wg.Done()
			nm.inject(kind, frng)
			nm.mu.Lock()
			nm.active--
			nm.mu.Unlock()
		}()
	}
	nm.wg.Wait()
}

func (nm *nemesis) activeCount() int {
	nm.mu.Lock()
	defer nm.mu.Unlock()
	return nm.active
}

// inject runs one fault to its end (heal included) and records it.
func (nm *nemesis) inject(kind string, rng *rand.Rand) {
	f := Fault{Kind: kind, Start: nm.c.rec.now()}
	f.Desc = nm.fault(kind, rng)
	f.End = nm.c.rec.now()
	nm.c.rec.fault(f)
	nm.mu.Lock()
	nm.count++
	nm.mu.Unlock()
	nm.logf("fault %s: %s", kind, f.Desc)
}

// claim picks a node that is up, in the cluster, not except and not acted on by another fault
// (the leader with probability leaderBias), and reserves it; -1 when there is none.
func (nm *nemesis) claim(rng *rand.Rand, leaderBias float64, except int) int {
	l := -1
	if rng.Float64() < leaderBias {
		l = nm.c.leader()
	}
	nm.mu.Lock()
	defer nm.mu.Unlock()
	free := func(i int) bool {
		n := nm.c.nodes[i]
		return i != except && !nm.busy[i] && n.up() && !n.isRemoved()
	}
	pick := -1
	if l >= 0 && free(l) {
		pick = l
	} else {
		var cand []int
		for i := range nm.c.nodes {
			if free(i) {
				cand = append(cand, i)
			}
		}
		if len(cand) > 0 {
			pick = cand[rng.IntN(len(cand))]
		}
	}
	if pick >= 0 {
		nm.busy[pick] = true
	}
	return pick
}

func (nm *nemesis) release(i int) {
	nm.mu.Lock()
	delete(nm.busy, i)
	nm.mu.Unlock()
}

func hold(rng *rand.Rand, loMs, hiMs int) time.Duration {
	d := time.Duration(loMs+rng.IntN(hiMs-loMs+1)) * time.Millisecond
	time.Sleep(d)
	return d
}

func (nm *nemesis) ids(idx []int) string {
	var s []string
	for _, i := range idx {
		s = append(s, nm.c.nodes[i].id)
	}
	return "{" + strings.Join(s, ",") + "}"
}

// fault runs one fault of kind and describes what it did.
func (nm *nemesis) fault(kind string, rng *rand.Rand) string {
	c := nm.c
	n := len(c.nodes)
	switch kind {
	case SlotMove:
		return nm.moveSlot(rng)
	case PartitionLeader, PartitionMinority, Bridge:
		perm := rng.Perm(n)
		var a, b, bridge []int
		switch kind {
		case PartitionLeader:
			l := c.leader()
			if l < 0 {
				l = perm[0]
			}
			a = []int{l}
			for i := range n {
				if i != l {
					b = append(b, i)
				}
			}
		case PartitionMinority:
			a, b = perm[:(n-1)/2], perm[(n-1)/2:]
		case Bridge:
			half := (n - 1) / 2
			a, bridge, b = perm[:half], perm[half:half+1], perm[half+1:]
		}
		heal := c.net.cut(between(a, b))
		d := hold(rng, 2000, 6000)
		heal()
		if bridge != nil {
			return fmt.Sprintf("%s and %s cut apart, %s sees both, for %v", nm.ids(a), nm.ids(b), nm.ids(bridge), d)
		}
		return fmt.Sprintf("%s cut from %s for %v", nm.ids(a), nm.ids(b), d)

	case Slow:
		i := rng.IntN(n)
		var links [][2]int
		for j := range n {
			if j != i {
				links = append(links, [2]int{i, j}, [2]int{j, i})
			}
		}
		lat := time.Duration(20+rng.IntN(180)) * time.Millisecond
		heal := c.net.slow(links, lat)
		d := hold(rng, 2000, 6000)
		heal()
		return fmt.Sprintf("links of %s slowed by ~%v per chunk for %v", c.nodes[i].id, lat, d)

	case Pause:
		i := nm.claim(rng, 0.5, -1)
		if i < 0 {
			return "no node free to pause"
		}
		defer nm.release(i)
		c.nodes[i].pause()
		d := hold(rng, 1000, 3000)
		c.nodes[i].resume()
		return fmt.Sprintf("SIGSTOP %s for %v", c.nodes[i].id, d)

	case Kill:
		i := nm.claim(rng, 0.5, -1)
		if i < 0 {
			return "no node free to kill"
		}
		defer nm.release(i)
		c.nodes[i].kill9()
		d := hold(rng, 300, 3000)
		if err := c.start(c.nodes[i]); err != nil {
			return fmt.Sprintf("kill -9 %s; restart after %v failed: %v", c.nodes[i].id, d, err)
		}
		return fmt.Sprintf("kill -9 %s, restarted after %v", c.nodes[i].id, d)

	case KillAll:
		for _, nd := range c.nodes {
			if !nd.isRemoved() {
				nd.kill9()
			}
		}
		d := hold(rng, 300, 2000)
		var errs []string
		for _, nd := range c.nodes {
			if !nd.isRemoved() {
				if err := c.start(nd); err != nil {
					errs = append(errs, err.Error())
				}
			}
		}
		return fmt.Sprintf("kill -9 every node, restarted after %v %s", d, strings.Join(errs, "; "))

	case ClockSkew:
		i := nm.claim(rng, 0.5, -1)
		if i < 0 {
			return "no node free to skew"
		}
		defer nm.release(i)
		delta := time.Duration(200+rng.IntN(800)) * time.Millisecond
		if rng.IntN(2) == 0 {
			delta = -delta
		}
		if err := c.shift(i, delta); err != nil {
			return fmt.Sprintf("skew %s by %v: %v", c.nodes[i].id, delta, err)
		}
		d := hold(rng, 2000, 6000)
		err := c.shift(i, -delta)
		return fmt.Sprintf("%s's lease clock off by %v for %v (undo: %v)", c.nodes[i].id, delta, d, err)

	case ClockJump:
		i := nm.claim(rng, 0.6, -1)
		if i < 0 {
			return "no node free to jump"
		}
		defer nm.release(i)
		nd := c.nodes[i]
		nd.mu.Lock()
		off := nd.offset
		nd.mu.Unlock()
		// forward up to 1 s or back up to 2 s, keeping the offset within a few seconds of 0
		fwd := rng.IntN(2) == 0
		if off > 1500*time.Millisecond || off < -2*time.Second {
			fwd = off < 0
		}
		delta := -time.Duration(200+rng.IntN(1800)) * time.Millisecond
		if fwd {
			delta = time.Duration(100+rng.IntN(900)) * time.Millisecond
		}
		err := c.shift(i, delta)
		hold(rng, 500, 1500)
		return fmt.Sprintf("%s's lease clock jumped %v (%v)", nd.id, delta, err)

	case SnapshotInstall:
		return nm.snapshotInstall(rng)

	case Membership:
		return nm.membership(rng)

	case DiskFail:
		return nm.diskFail(rng)

	case DiskFull:
		return nm.diskFull(rng)
	}
	return "unknown fault kind " + kind
}

// snapshotInstall keeps a follower down while the leader snapshots and compacts its log past
// it, then restarts it: it can only catch up by installing the leader's snapshot (the nodes run
// with a low --snapshot-threshold and --trailing-logs, so raft may also have done it alone).
func (nm *nemesis) snapshotInstall(rng *rand.Rand) string {
	c := nm.c
	i := nm.claim(rng, 0, c.leader())
	if i < 0 {
		return "no follower free"
	}
	defer nm.release(i)
	nd := c.nodes[i]
	nd.kill9()
	d := hold(rng, 2000, 4000) // the workload appends meanwhile
	snap := "no leader to snapshot"
	if l := c.leader(); l >= 0 {
		if _, err := query(c.nodes[l].clientAddr, "RAFT", "SNAPSHOT"); err != nil {
			snap = "RAFT SNAPSHOT: " + err.Error()
		} else {
			snap = "leader " + c.nodes[l].id + " snapshotted"
		}
	}
	before := logSize(nd.logPath)
	if err := c.start(nd); err != nil {
		return fmt.Sprintf("%s down %v, %s; restart failed: %v", nd.id, d, snap, err)
	}
	how := "caught up from the log"
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		if strings.Contains(logTail(nd.logPath, before), installedSnapshot) {
			how = "installed the leader's snapshot"
			break
		}
	}
	return fmt.Sprintf("%s down %v, %s, restarted: %s", nd.id, d, snap, how)
}

// installedSnapshot is what hashicorp/raft logs when a follower installed the leader's snapshot.
const installedSnapshot = "Installed remote snapshot"

func logSize(p string) int64 {
	fi, err := os.Stat(p)
	if err != nil {
		return 0
	}
	return fi.Size()
}

func logTail(p string, from int64) string {
	b, err := os.ReadFile(p)
	if err != nil || int64(len(b)) < from {
		return ""
	}
	return string(b[from:])
}

// removedWhileAway is what a node logs when the leader's committed configuration lacks it but
// its own log never received that configuration (raftnode's runMembership).
const removedWhileAway = "probably removed while away"

// membership removes a node (sometimes the leader) with RAFT REMOVE, checks that it leaves the
// configuration and exits, runs without it for a moment, and re-adds it with an empty data
// directory through --join (as a non-voter that catches up, then is promoted).
func (nm *nemesis) membership(rng *rand.Rand) string {
	c := nm.c
	i := nm.claim(rng, 0.3, -1)
	if i < 0 {
		return "no node free to remove"
	}
	defer nm.release(i)
	nd := c.nodes[i]
	via := -1
	for _, j := range rng.Perm(len(c.nodes)) {
		if j != i && c.nodes[j].up() && !c.nodes[j].isRemoved() {
			via = j
			break
		}
	}
	if via < 0 {
		return "no other node up to send RAFT REMOVE to"
	}
	role := "a follower"
	if c.leader() == i {
		role = "the leader"
	}
	cl := &client{addr: c.nodes[via].clientAddr}
	removeAt := c.rec.now()
	logFrom := logSize(nd.logPath)
	reply, err := cl.do(15*time.Second, "RAFT", "REMOVE", nd.id, "FORCE") // a live voter: FORCE
	cl.close()
	wait := 10 * time.Second
	if err != nil && !certainFailure(err) {
		wait = 30 * time.Second // the removal may still commit
	}
	if werr := c.waitSuffrage(i, "", wait); werr != nil {
		if err == nil {
			nm.violation("membership: RAFT REMOVE %s replied %v, but %v", nd.id, reply, werr)
		}
		desc := fmt.Sprintf("RAFT REMOVE %s via %s: %v %v; still a member", nd.id, c.nodes[via].id, reply, err)
		if c.groups > 1 {
			// A refused removal of several groups adds the member back where it had left; what
			// it could not add back an operator ends with RAFT PROMOTE (docs/groups.md).
			desc += c.repairSuffrage(i)
		}
		return desc
	}
	nd.mu.Lock()
	nd.removed = true
	nd.mu.Unlock()
	desc := fmt.Sprintf("RAFT REMOVE %s (%s) via %s (%v %v)", nd.id, role, c.nodes[via].id, reply, err)
	exited := nd.waitExit(15 * time.Second)
	switch {
	case !exited && strings.Contains(logTail(nd.logPath, logFrom), removedWhileAway):
		// Cut off when removed, it never got the configuration without it, and only a
		// committed configuration removes a node: it says so and keeps running, as documented.
		if err := nd.stopClean(); err != nil {
			nm.violation("membership: %s, removed while cut off: %v", nd.id, err)
		}
		desc += ", was cut off: said it was probably removed while away and kept running (stopped)"
	case !exited:
		nm.violation("membership: %s, %s, was removed (RAFT REMOVE via %s at %.3fs) but did not exit within 15s; goroutine dump in %s",
			nd.id, role, c.nodes[via].id, sec(removeAt), nd.logPath)
		nd.quit()
		desc += ", did not exit (goroutine dump, killed)"
	default:
		desc += ", exited"
	}
	d := hold(rng, 1000, 3000)
	if err := c.readd(i); err != nil {
		return desc + fmt.Sprintf("; re-add after %v failed: %v", d, err)
	}
	if err := c.waitSuffrage(i, "voter", 30*time.Second); err != nil {
		nm.violation("membership: %s re-added with --join is not a voter within 30s: %v", nd.id, err)
		return desc + fmt.Sprintf("; re-added after %v, not a voter: %v", d, err)
	}
	return desc + fmt.Sprintf("; re-added afresh after %v, voter again", d)
}

// healAll ends every fault: links healed, paused nodes resumed, dead ones restarted, removed
// ones re-added, and every lease clock back at offset 0.
func (nm *nemesis) healAll() {
	c := nm.c
	c.net.heal()
	readded := map[int]bool{}
	for _, nd := range c.nodes {
		nd.mu.Lock()
		paused, removed := nd.proc != nil && nd.proc.Paused(), nd.removed
		nd.mu.Unlock()
		switch {
		case removed:
			readded[nd.idx] = true
			if err := c.readd(nd.idx); err != nil {
				nm.violation("heal: re-add %s: %v", nd.id, err)
			}
		case paused:
			nd.resume()
		case !nd.running():
			if err := c.start(nd); err != nil {
				nm.violation("heal: restart %s: %v", nd.id, err)
			}
		}
	}
	// A removal whose reply was lost may have committed after all: such a node exits (again,
	// if restarted). Re-add it as a removed one.
	for _, nd := range c.nodes {
		if readded[nd.idx] {
			continue // joining: not a member until the leader adds it
		}
		if s, err := c.suffrage(nd.idx); err == nil && s == "" {
			nm.logf("heal: %s is not a member; re-adding it", nd.id)
			if err := c.readd(nd.idx); err != nil {
				nm.violation("heal: re-add %s: %v", nd.id, err)
			}
		}
	}
	for _, nd := range c.nodes {
		nd.mu.Lock()
		off := nd.offset
		nd.mu.Unlock()
		if off != 0 {
			if err := c.shift(nd.idx, -off); err != nil {
				nm.logf("heal: clock of %s: %v", nd.id, err)
			}
		}
	}
}

// moveSlot is the slot-move fault: the slot of one of the keys the workload locks now moves
// from the group that serves it to another, through a random live node (forwarded to the
// source group's leader).
func (nm *nemesis) moveSlot(rng *rand.Rand) string {
	c := nm.c
	groups := groupsOf(nm.cfg.NodeArgs)
	if groups < 2 {
		return "one raft group: no slot to move"
	}
	var live []*node
	for _, n := range c.nodes {
		if n.up() {
			live = append(live, n)
		}
	}
	if len(live) == 0 {
		return "no node up to move a slot through"
	}
	n := live[rng.IntN(len(live))]
	// A key the workload uses now: a plain lock's, or the lock kinds' (shares, lock-delays,
	// MLOCK) or the wait queues' (FIFO hand-offs), whose checks then run across the move.
	now := c.rec.now()
	var key string
	switch rng.IntN(4) {
	case 0:
		key = rwKey(now, 0)
	case 1:
		key = waitKey(now, 0)
	default:
		key = fmt.Sprintf("k%d.%d", now/int64(keyEpoch), rng.IntN(keysPerEpoch))
	}
	slot := fsm.KeySlot([]byte(key))
	ranges, err := groupRanges(n.clientAddr)
	if err != nil {
		return fmt.Sprintf("slot %d (%s): the groups' slots unknown on %s: %v", slot, key, n.id, err)
	}
	owner := ownerIn(ranges, slot)
	if owner < 0 {
		return fmt.Sprintf("slot %d (%s): no group serves it on %s", slot, key, n.id)
	}
	target := (owner + 1 + rng.IntN(groups-1)) % groups
	if rng.IntN(2) == 0 {
		// Make the move's fence floor matter: the source's token counter is pushed well above
		// the others' (MLOCKs of many probe keys of a slot it serves: one entry, a token per key),
		// the key is granted there a few times more, and the target is the group whose counter a
		// probe lock shows lowest. The floor must then lift the target above the key's tokens: a
		// build that drops it is caught by the fencing check.
		pumpTokens(n.clientAddr, ranges, owner)
		time.Sleep(300 * time.Millisecond)
		best := uint64(0)
		for g := range groups {
			if g == owner {
				continue
			}
			if tok, err := probeToken(n.clientAddr, ranges, g); err == nil && (best == 0 || tok < best) {
				target, best = g, tok
			}
		}
	}
	nm.mu.Lock()
	if nm.moved == nil {
		nm.moved = map[int]bool{}
	}
	nm.moved[slot] = true
	nm.mu.Unlock()
	cl := &client{addr: n.clientAddr}
	defer cl.close()
	v, err := cl.do(45*time.Second, "RAFT", "MOVESLOTS", strconv.Itoa(slot), strconv.Itoa(slot), strconv.Itoa(target))
	if err != nil {
		return fmt.Sprintf("slot %d (%s) from group %d to group %d through %s: %v", slot, key, owner, target, n.id, err)
	}
	return fmt.Sprintf("slot %d (%s) from group %d to group %d through %s: %v keys moved", slot, key, owner, target, n.id, v)
}

// groupRanges is each raft group's slot ranges as the node at addr routes them (INFO raft's
// raft_groupN lines: slots=a-b;c-d,...).
func groupRanges(addr string) (map[int][][2]int, error) {
	v, err := query(addr, "INFO", "raft")
	if err != nil {
		return nil, err
	}
	s, _ := v.(string)
	out := map[int][][2]int{}
	for _, line := range strings.Split(s, "\n") {
		name, val, ok := strings.Cut(strings.TrimSpace(line), ":")
		g, err := strconv.Atoi(strings.TrimPrefix(name, "raft_group"))
		if !ok || !strings.HasPrefix(name, "raft_group") || err != nil {
			continue
		}
		ranges, _, _ := strings.Cut(strings.TrimPrefix(val, "slots="), ",")
		for _, r := range strings.Split(ranges, ";") {
			a, b, _ := strings.Cut(r, "-")
			first, err1 := strconv.Atoi(a)
			last, err2 := strconv.Atoi(b)
			if err1 == nil && err2 == nil {
				out[g] = append(out[g], [2]int{first, last})
			}
		}
	}
	return out, nil
}

// ownerIn is the group whose ranges hold slot, -1 for none.
func ownerIn(ranges map[int][][2]int, slot int) int {
	for g, rs := range ranges {
		for _, r := range rs {
			if r[0] <= slot && slot <= r[1] {
				return g
			}
		}
	}
	return -1
}

// pumpTokens raises group g's token counter by a few hundred: MLOCKs, of 10 ms, of 64 probe
// keys each, of a slot g serves, through the node at addr (errors are ignored: a fault may be
// running).
func pumpTokens(addr string, ranges map[int][][2]int, g int) {
	tag, ok := tagOfSlotIn(ranges, g)
	if !ok {
		return
	}
	for round := range 4 {
		args := []string{"MLOCK", "10"}
		for i := range 64 {
			args = append(args, fmt.Sprintf("pump{%s}.%d.%d", tag, round, i))
		}
		_, _ = query(addr, args...)
	}
}

// tagOfSlotIn is a hash tag of the first slot group g serves (ranges).
func tagOfSlotIn(ranges map[int][][2]int, g int) (string, bool) {
	if len(ranges[g]) == 0 {
		return "", false
	}
	want := ranges[g][0][0]
	for i := 0; i < 1<<20; i++ {
		if tag := strconv.Itoa(i); fsm.KeySlot([]byte(tag)) == want {
			return tag, true
		}
	}
	return "", false
}

// probeToken takes a lock, of 10 ms, on a key of a slot group g serves (its ranges' first
// slot), through the node at addr, and returns its token: where g's token counter is now. The
// probe keys are the harness's own, outside every checked history.
func probeToken(addr string, ranges map[int][][2]int, g int) (uint64, error) {
	tag, ok := tagOfSlotIn(ranges, g)
	if !ok {
		return 0, fmt.Errorf("group %d serves no slot", g)
	}
	v, err := query(addr, "LOCK", "probe{"+tag+"}", "10")
	if err != nil {
		return 0, err
	}
	if tok, ok := asInt(v); ok && tok > 0 {
		return uint64(tok), nil
	}
	return 0, fmt.Errorf("probe lock refused: %v", v)
}
