package chaos

import "sort"

// What raftlock promises under clock faults, and how the checkers account for them.
//
// Every node times a lease from the moment it applied the grant or renewal, on its own clock,
// and only the leader ends it, by committing an Expire when its timer fires (DESIGN.md §5). So:
//
//   - A constant offset between nodes (skew) changes nothing: a node's timer runs from its own
//     apply time to its own apply time + lease, whatever its offset. The lock table is never
//     split either way, since removal is a committed command.
//   - A backward jump makes the nodes that took it end leases late: safe.
//   - A forward jump of J on a node shortens, by up to J, every lease timer that node armed
//     before the jump. If that node leads (or later leads) while the timer runs, the lease
//     ends up to J early in real time. No lease-based system survives its own clock running
//     fast; what raftlock promises is that a lease lasts at least its length minus the forward
//     jump the expiring node's clock took while it ran, and that the table, the tokens and
//     everything else stay exact.
//
// The harness can only move a node's clock with DEBUG CLOCK-SHIFT, so a skew is a forward (or
// backward) jump when it starts and the opposite jump when it ends; a restart puts the new
// process at offset 0. The harness records every change with the interval in which it took
// effect, and the checkers that reason about lease ends (the lock model's hidden expiry, and the
// protected resource's "fenced off inside its own lease") widen their window by exactly the
// largest forward movement any node's offset made while the lease ran (clockTimeline.slack).
// Outside those windows the checks stay exact, and a lease that ends earlier than the injected
// jumps explain is still a violation.

// clockTimeline answers how far any node's lease clock may have moved forward within a window.
type clockTimeline struct {
	byNode map[int][]ClockEvent // each node's events, in invoke order
	max    int64                // no window's slack exceeds it
}

func newClockTimeline(events []ClockEvent) *clockTimeline {
	t := &clockTimeline{byNode: map[int][]ClockEvent{}}
	for _, e := range events {
		t.byNode[e.Node] = append(t.byNode[e.Node], e)
	}
	for _, ev := range t.byNode {
		sort.SliceStable(ev, func(i, j int) bool { return ev[i].Invoke < ev[j].Invoke })
		var lo, hi int64
		for _, e := range ev {
			lo, hi = min(lo, e.Offset), max(hi, e.Offset)
		}
		t.max = max(t.max, hi-lo)
	}
	return t
}

// bound is an upper bound of slack over any window: the model asks slack only when it matters.
func (t *clockTimeline) bound() int64 {
	if t == nil {
		return 0
	}
	return t.max
}

// slack is the largest rise of any node's clock offset within [from, to], in nanoseconds: how
// much earlier in real time than its length a lease timed through that window may end.
// Conservative: an event that may have taken effect inside the window counts, and so does the
// offset in force before it.
func (t *clockTimeline) slack(from, to int64) int64 {
	if t == nil {
		return 0
	}
	var worst int64
	for _, ev := range t.byNode {
		var cur int64
		i := 0
		for ; i < len(ev) && ev[i].Complete < from; i++ {
			cur = ev[i].Offset
		}
		low := cur
		for ; i < len(ev) && ev[i].Invoke <= to; i++ {
			if rise := ev[i].Offset - low; rise > worst {
				worst = rise
			}
			low = min(low, ev[i].Offset)
		}
	}
	return worst
}
