package raftnode

import (
	"time"

	"github.com/raftlock/raftlock/fsm"
)

const (
	// maxLeaseSleep bounds how long the lease loop sleeps, so a jump of the injected clock is
	// noticed even when no timer moves.
	maxLeaseSleep = time.Second
	// expireBatch caps the Expire commands proposed in one round, so a burst of 100k leases
	// ending together is replicated in bounded pieces while grants keep flowing between them.
	expireBatch = 512
	// expireRetry is how long a failed Expire proposal waits before the next try.
	expireRetry = 100 * time.Millisecond
)

func (n *Node) wakeLeases() {
	select {
	case n.leaseWake <- struct{}{}:
	default:
	}
}

// runLeases proposes Expire for every lease whose timer ended, while this node is the ready
// leader. Followers keep their timers and do nothing: removal only ever happens through a
// committed Expire, so clocks that disagree can never split the table.
func (n *Node) runLeases() {
	timer := time.NewTimer(maxLeaseSleep)
	defer timer.Stop()
	for {
		select {
		case <-n.stop:
			return
		case <-n.leaseWake:
		case <-timer.C:
		}
		sleep := maxLeaseSleep
		if n.ready.Load() {
			sleep = n.expireDue()
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(sleep)
	}
}

// expireDue proposes Expire for the leases that have ended and returns how long to sleep.
func (n *Node) expireDue() time.Duration {
	now := n.cfg.Now()
	n.mu.Lock()
	due := n.leases.due(n.machine, now, expireBatch)
	var cmds []fsm.Command
	for _, e := range due {
		cmds = append(cmds, fsm.Command{Kind: fsm.KindExpire, Key: []byte(e.key), Token: e.token, LeaseRev: e.rev})
	}
	n.markPendingLocked(cmds)
	next, ok := n.leases.next()
	n.mu.Unlock()

	if len(cmds) > 0 {
		results, err := n.await(cmds, n.submit(cmds)) // results of the ones that applied, even on error
		expired := 0
		for _, r := range results {
			if r.Existed {
				expired++
			}
		}
		n.stats.expired.Add(uint64(expired))
		if err != nil {
			n.log.Warn("expire proposal failed; will retry", "count", len(cmds), "err", err)
			n.mu.Lock()
			for _, e := range due {
				n.leases.requeue(e, now.Add(expireRetry))
			}
			n.mu.Unlock()
		}
		if len(due) == expireBatch {
			return 0 // more may be due already
		}
		n.mu.Lock()
		next, ok = n.leases.next()
		n.mu.Unlock()
	}
	if !ok {
		return maxLeaseSleep
	}
	return min(max(next.Sub(n.cfg.Now()), 0), maxLeaseSleep)
}
