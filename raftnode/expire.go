package raftnode

import (
	"context"
	"errors"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
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

// expireDue proposes Expire for the leases that have ended and returns how long to sleep. The
// Expires go through propose like any request (its checks: a ready leader, valid commands); they
// name no keys to wait on, since each is guarded by its token and lease revision and so can never
// end a lease other than the one that ran out.
//
// A round's Expires travel as one log entry, with no flag for "independent commands": an Expire
// has no failing guard (one whose lease was renewed, re-granted or released meanwhile is
// Expired{Existed: false}, a no-op). One entry instead of up to expireBatch keeps a burst of
// expiries from crowding the log and raft's queue. The entry can abort only through a hand-off
// Grant propose added for a waiter (handoff.go), when its key changed between evaluation and
// apply: then no Expire applied, and all of them are queued again.
func (n *Node) expireDue() time.Duration {
	now := n.cfg.Now()
	n.mu.Lock()
	next, ok := n.mu.leases.next()
	n.mu.Unlock()
	if !ok || next.After(now) {
		return n.sleepUntil(next, ok)
	}
	var due []expiry
	p, err := n.propose(context.Background(), nil, func(node.View) []fsm.Command {
		// Under mu, like every evaluation. It may run again (propose re-evaluates after waiting
		// on pending keys, though this names none): put back what an earlier run took.
		for _, e := range due {
			n.mu.leases.requeue(e, now)
		}
		due = n.mu.leases.due(n.mu.machine, now, expireBatch)
		cmds := make([]fsm.Command, 0, len(due))
		for _, e := range due {
			cmds = append(cmds, fsm.Command{Kind: fsm.KindExpire, Key: []byte(e.key), Token: e.token, LeaseRev: e.rev})
		}
		return cmds
	})
	switch {
	case err != nil:
		n.requeueExpiries(due, now, len(due), err)
	case len(due) > 0:
		results, err := p.wait() // none on error: the entry applied whole or, for all we know, not at all
		expired := 0
		for _, r := range results {
			if r.Existed {
				expired++
			}
		}
		n.stats.expired.Add(uint64(expired))
		if err == nil && fsm.Aborted(results) {
			err = errExpiryAborted
		}
		if err != nil {
			n.requeueExpiries(due, now, len(due), err)
		}
		if len(due) == expireBatch {
			return 0 // more may be due already
		}
	}
	n.mu.Lock()
	next, ok = n.mu.leases.next()
	n.mu.Unlock()
	return n.sleepUntil(next, ok)
}

// errExpiryAborted is why an expiry round whose entry aborted is retried.
var errExpiryAborted = errors.New("the entry aborted: a hand-off grant in it found its key changed")

// sleepUntil is how long the lease loop sleeps before the deadline next (ok false: none).
func (n *Node) sleepUntil(next time.Time, ok bool) time.Duration {
	if !ok {
		return maxLeaseSleep
	}
	return min(max(next.Sub(n.cfg.Now()), 0), maxLeaseSleep)
}

// requeueExpiries puts back the leases whose Expire did not go through, to try again shortly.
func (n *Node) requeueExpiries(due []expiry, now time.Time, count int, err error) {
	if len(due) == 0 {
		return
	}
	n.log.Warn("expire proposal failed; will retry", "count", count, "err", err)
	n.mu.Lock()
	for _, e := range due {
		n.mu.leases.requeue(e, now.Add(expireRetry))
	}
	n.mu.Unlock()
}
