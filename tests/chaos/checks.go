package chaos

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/server"
)

// checkFencing checks that known grants have unique tokens across all keys and that tokens
// increase in real-time order: a grant that completed before another was invoked has the lower
// token. In a cluster of several raft groups each group counts tokens on its own (docs/groups.md),
// so both hold among the keys of each group: groupOf says a key's (nil: one group).
func checkFencing(ops []Op, groupOf func(key string) int) []string {
	byGroup := map[int][]Op{}
	for _, op := range ops {
		if op.Kind == Acquire && op.Outcome == OK && op.Granted && op.Token > 0 {
			g := 0
			if groupOf != nil {
				g = groupOf(op.Key)
			}
			byGroup[g] = append(byGroup[g], op)
		}
	}
	var bad []string
	for _, g := range slices.Sorted(maps.Keys(byGroup)) {
		bad = append(bad, checkGroupFencing(byGroup[g])...)
	}
	return bad
}

// checkGroupFencing is checkFencing over the grants of one token counter.
func checkGroupFencing(grants []Op) []string {
	var bad []string
	seen := map[uint64]Op{}
	for _, g := range grants {
		if prev, dup := seen[g.Token]; dup {
			bad = append(bad, fmt.Sprintf("fencing: token %d granted twice: %s and %s", g.Token, prev, g))
		}
		seen[g.Token] = g
	}
	byComplete := append([]Op(nil), grants...)
	sort.Slice(byComplete, func(i, j int) bool { return byComplete[i].Complete < byComplete[j].Complete })
	byInvoke := append([]Op(nil), grants...)
	sort.Slice(byInvoke, func(i, j int) bool { return byInvoke[i].Invoke < byInvoke[j].Invoke })
	// sweep: for each grant B in invoke order, the highest token among grants completed before
	// B was invoked must be lower than B's.
	i := 0
	var best *Op
	for _, b := range byInvoke {
		for i < len(byComplete) && byComplete[i].Complete < b.Invoke {
			if best == nil || byComplete[i].Token > best.Token {
				best = &byComplete[i]
			}
			i++
		}
		if best != nil && best.Token >= b.Token {
			bad = append(bad, fmt.Sprintf("fencing: %s completed at %.3fs before %s was invoked at %.3fs, but its token is not lower",
				*best, sec(best.Complete), b, sec(b.Invoke)))
		}
	}
	return bad
}

func sec(ns int64) float64 { return float64(ns) / 1e9 }

// checkResource checks the fenced resource:
//   - accepted writes per key come in token order;
//   - no lost update: each accepted write is based on the value the previous accepted write
//     left (the resource fences reads too, so a stale holder cannot write what it read);
//   - mutual exclusion: no holder is fenced off while its lease is still valid by its own
//     reckoning (from the invocation of its last acknowledged grant or renewal, minus the clock
//     slack, see clock.go): a fence-off means a newer holder already used the resource, so the
//     cluster granted the key to someone else during the lease.
func checkResource(accesses []Access, clk *clockTimeline) []string {
	var bad []string
	last := map[string]Access{}
	for _, a := range accesses {
		if a.Accepted {
			p, seen := last[a.Key]
			var prev int64 // the value the previous accepted write left
			if seen {
				prev = p.Based + 1
			}
			switch {
			case seen && p.Token > a.Token:
				bad = append(bad, fmt.Sprintf("resource: %s accepted token %d (c%d) after token %d (c%d)", a.Key, a.Token, a.Client, p.Token, p.Client))
			case a.Based != prev:
				bad = append(bad, fmt.Sprintf("resource: lost update on %s: c%d with token %d wrote %d over %d at %.3fs",
					a.Key, a.Client, a.Token, a.Based+1, prev, sec(a.At)))
			}
			last[a.Key] = a
			continue
		}
		if end := a.ValidUntil - clk.slack(a.LeaseFrom, a.At); a.At < end {
			bad = append(bad, fmt.Sprintf("mutual exclusion: c%d holding %s with token %d was fenced off (on its %s) at %.3fs, inside its lease (valid until %.3fs): the resource had seen token %d",
				a.Client, a.Key, a.Token, a.Rejected, sec(a.At), sec(end), a.Seen))
		}
	}
	return bad
}

// unfencedOverlap counts the accesses to the unfenced resource that overlapped another holder's:
// their read-modify-write overlapped in real time with another holder's on the same key, or
// they wrote after a newer holder had already used it. That is what a lock without fencing
// lets happen when a holder goes on past its lease; a run under faults is expected to show
// some. unpaused counts those where no holder paused on its own: the holder went on working
// after a renewal that the faults made time out while its lease ran out (the faults bite).
func unfencedOverlap(accesses []Access) (all, unpaused int) {
	byKey := map[string][]Access{}
	for _, a := range accesses {
		byKey[a.Key] = append(byKey[a.Key], a)
	}
	for _, as := range byKey {
		for i, a := range as {
			found, foundUnpaused := a.Stale, a.Stale && !a.Paused
			for j, b := range as {
				if j != i && b.Token != a.Token && b.Start <= a.At && a.Start <= b.At {
					found = true
					foundUnpaused = foundUnpaused || !a.Paused && !b.Paused
				}
			}
			if found {
				all++
			}
			if foundUnpaused {
				unpaused++
			}
		}
	}
	return all, unpaused
}

// finalRead is one node's own view of a key after healing (LOCKINFO after READONLY).
type finalRead struct {
	Free  bool
	Owner string
	Token uint64
}

// checkDurable checks that no acknowledged operation on the durable keys (hour-long leases,
// one grant and at most one release each) was lost, and that none reported as failed took
// effect: after healing, every node's own table must hold each acknowledged grant that was not
// released, and none that was released or refused.
func checkDurable(ops []Op, final map[string]map[string]finalRead) []string {
	type life struct{ grant, release *Op }
	keys := map[string]*life{}
	for i := range ops {
		op := &ops[i]
		if !strings.HasPrefix(op.Key, "d") {
			continue
		}
		l := keys[op.Key]
		if l == nil {
			l = &life{}
			keys[op.Key] = l
		}
		switch op.Kind {
		case Acquire:
			l.grant = op
		case Release:
			l.release = op
		}
	}
	var bad []string
	nodes := make([]string, 0, len(final))
	for n := range final {
		nodes = append(nodes, n)
	}
	sort.Strings(nodes)
	names := make([]string, 0, len(keys))
	for k := range keys {
		names = append(names, k)
	}
	sort.Strings(names)
	for _, k := range names {
		l := keys[k]
		g, r := l.grant, l.release
		if g == nil {
			continue
		}
		mayFree, mayHeld := false, false
		switch {
		case g.Outcome == Fail || g.Outcome == OK && !g.Granted:
			mayFree = true
		case g.Outcome == Unknown:
			mayFree, mayHeld = true, true
		case r != nil && r.Outcome == OK && r.Success:
			mayFree = true
		case r != nil && r.Outcome == Unknown:
			mayFree, mayHeld = true, true
		default:
			mayHeld = true
		}
		for _, n := range nodes {
			f, ok := final[n][k]
			if !ok {
				continue // that node could not be read: convergence reports it
			}
			var what string
			switch {
			case f.Free && !mayFree:
				what = "acknowledged grant lost: free"
			case !f.Free && !mayHeld && g.Outcome == OK && g.Granted:
				what = fmt.Sprintf("acknowledged release lost: held by %s/%d", f.Owner, f.Token)
			case !f.Free && !mayHeld:
				what = fmt.Sprintf("a grant reported as not done took effect: held by %s/%d", f.Owner, f.Token)
			case !f.Free && (f.Owner != g.Owner || g.Token != 0 && f.Token != g.Token):
				what = fmt.Sprintf("wrong holder: held by %s/%d", f.Owner, f.Token)
			default:
				continue
			}
			desc := g.String()
			if r != nil {
				desc += "; " + r.String()
			}
			bad = append(bad, fmt.Sprintf("durable: %s is %s on %s after healing (history: %s)", k, what, n, desc))
		}
	}
	return bad
}

// digestsAgree reports whether every "node:applied/sha" digest is the same: the nodes applied
// the same log prefix and hold the same table.
func digestsAgree(d []string) bool {
	state := func(s string) string { return s[strings.Index(s, ":")+1:] }
	for _, x := range d[1:] {
		if state(x) != state(d[0]) {
			return false
		}
	}
	return true
}

// checkLogs looks for panics, data races and fatal errors in node logs. Each finding names the
// first frames of ours that follow it, so the summary says where; the same finding at the
// same place is reported once, with where it appeared.
func checkLogs(paths []string) []string {
	type finding struct {
		what string
		at   []string
	}
	var order []string
	found := map[string]*finding{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		lines := strings.Split(string(b), "\n")
		for i, line := range lines {
			if !strings.Contains(line, "panic:") && !strings.Contains(line, "DATA RACE") && !strings.HasPrefix(line, "fatal error:") &&
				!strings.Contains(line, "undecodable log entry") || diskPanic(lines, i) {
				continue
			}
			var where []string
			for j := i + 1; j < len(lines) && j < i+40 && len(where) < 4; j++ {
				if f := strings.TrimSpace(lines[j]); strings.HasPrefix(f, "github.com/raftlock/") && j+1 < len(lines) {
					loc := strings.TrimSpace(lines[j+1])
					if k := strings.LastIndex(loc, " +0x"); k > 0 {
						loc = loc[:k]
					}
					where = append(where, strings.TrimPrefix(f, "github.com/raftlock/raftlock/")+" "+filepath.Base(loc))
				}
			}
			what := line
			if len(where) > 0 {
				what += " [" + strings.Join(where, " | ") + "]"
			}
			f := found[what]
			if f == nil {
				f = &finding{what: what}
				found[what] = f
				order = append(order, what)
			}
			f.at = append(f.at, fmt.Sprintf("%s:%d", p, i+1))
		}
	}
	var bad []string
	for _, w := range order {
		f := found[w]
		at := f.at
		if len(at) > 3 {
			at = append(at[:3:3], "...")
		}
		times := "once"
		if len(f.at) > 1 {
			times = fmt.Sprintf("%d times", len(f.at))
		}
		bad = append(bad, fmt.Sprintf("log: %s (%s: %s)", f.what, times, strings.Join(at, ", ")))
	}
	return bad
}

// diskPanic reports whether lines[i] begins one of the panics a node ends with when a disk fault
// (disk.go) reaches pebble, a known limitation (docs/known-issues.md, "Disk faults") the disk
// faults count instead (disk_exits): pebble's fatal commit error (its logger's Fatalf), pebble
// panicking on its WAL's write error (a raw "panic: write …/raft/NNNNNN.log: …"), pebble's
// WAL rotation panicking with the error value itself (printed as "panic: (*fs.PathError) 0x…"
// or "panic: (*withstack.withStack) 0x…", with pebble's rotateWAL a few frames below), and
// hashicorp/raft's on a term it could not save. Any other panic stays a finding.
func diskPanic(lines []string, i int) bool {
	line := lines[i]
	if !strings.HasPrefix(line, "panic: ") {
		return false
	}
	if strings.HasPrefix(line, "panic: (*") && strings.Contains(line, ") 0x") {
		for _, next := range lines[i+1 : min(len(lines), i+16)] {
			if strings.Contains(next, "github.com/cockroachdb/pebble/v2.(*DB).rotateWAL(") {
				return true
			}
		}
		return false
	}
	if !strings.Contains(line, "input/output error") && !strings.Contains(line, "no space left on device") {
		return false
	}
	return strings.HasPrefix(line, "panic: pebble: ") || strings.HasPrefix(line, "panic: failed to save current term: ") ||
		strings.HasPrefix(line, "panic: write ") && strings.Contains(line, "/raft/") && strings.Contains(line, ".log: ")
}

// freshAcquire takes a new key through any of addrs before deadline: the recovery check.
func freshAcquire(addrs []string, deadline time.Time) error {
	key := fmt.Sprintf("fresh-%d", time.Now().UnixNano())
	var last error
	for i := 0; time.Now().Before(deadline); i++ {
		v, err := query(addrs[i%len(addrs)], "LOCK", key, "5000", "OWNER", "fresh")
		if err == nil {
			if t, ok := asInt(v); ok && t > 0 {
				return nil
			}
			err = fmt.Errorf("reply %#v", v)
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("no fresh acquire succeeded before the deadline: last %v", last)
}

// keyGroup is the raft group of key in a cluster of groups groups, as the server routes it.
func keyGroup(key string, groups int) int { return server.GroupOfKey([]byte(key), groups) }

// counterOf is what checkFencing compares a key's tokens by: its group (groupOf), whose token
// counter grants them, or, for a key whose slot a slot-move fault moved (moved), the key alone:
// a moved key's tokens come from its groups' counters in turn, and fencing promises their order
// per key only (docs/fencing.md), which the fence floor a move carries keeps.
func counterOf(groupOf func(string) int, moved map[int]bool) func(string) int {
	if len(moved) == 0 {
		return groupOf
	}
	ids := map[string]int{}
	return func(key string) int {
		if !moved[fsm.KeySlot([]byte(key))] {
			if groupOf == nil {
				return 0
			}
			return groupOf(key)
		}
		id, ok := ids[key]
		if !ok {
			id = -1 - len(ids) // below every group's number
			ids[key] = id
		}
		return id
	}
}

// stayedIn is groupOf for the keys whose slot stayed in its group, and -1 (no group) for a key
// whose slot a slot-move fault moved: the pub/sub order check holds for group 0's keys only.
func stayedIn(groupOf func(string) int, moved map[int]bool) func(string) int {
	if len(moved) == 0 || groupOf == nil {
		return groupOf
	}
	return func(key string) int {
		if moved[fsm.KeySlot([]byte(key))] {
			return -1
		}
		return groupOf(key)
	}
}

// groupsOf is the --groups a node's flags name (1 when none).
func groupsOf(args []string) int {
	for i, a := range args {
		if a == "--groups" && i+1 < len(args) {
			if g, err := strconv.Atoi(args[i+1]); err == nil && g > 0 {
				return g
			}
		}
	}
	return 1
}
