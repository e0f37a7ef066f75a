package locks

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

// Wake makes the lease loop look at its timers now rather than at its next deadline (at most
// maxLeaseSleep away): a test that moves an injected clock calls it to see the loop act on the
// jump at once.
func (p *Policy) Wake() { p.wakeLeases() }

func (p *Policy) wakeLeases() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// runLeases proposes Expire for every lease whose timer ended, while the core is the ready
// leader. Followers keep their timers and do nothing: removal only ever happens through a
// committed Expire, so clocks that disagree can never split the table.
func (p *Policy) runLeases() {
	timer := time.NewTimer(maxLeaseSleep)
	defer timer.Stop()
	for {
		select {
		case <-p.stop:
			return
		case <-p.wake:
		case <-timer.C:
		}
		sleep := maxLeaseSleep
		if p.leading.Load() {
			sleep = p.ExpireDue()
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

// ExpireDue proposes Expire for the leases that have ended, on the caller's goroutine, and
// returns how long the lease loop may sleep once they applied: one round of the loop, which a
// test with an injected clock runs to know the round happened. The Expires go through the core
// like any request (its checks: a ready leader, valid commands); they name no keys to wait on,
// since each is guarded by its token and lease revision and so can never end a lease other than
// the one that ran out.
//
// A round's Expires travel as one log entry, with no flag for "independent commands": an Expire
// has no failing guard (one whose lease was renewed, re-granted or released meanwhile is
// Expired{Existed: false}, a no-op). One entry instead of up to expireBatch keeps a burst of
// expiries from crowding the log and raft's queue. The entry can abort only through a hand-off
// Grant added for a waiter (handoff.go), when its key changed between evaluation and apply:
// then no Expire applied, and all of them are queued again.
func (p *Policy) ExpireDue() time.Duration {
	r := p.replica
	now := r.LeaseNow()
	p.mu.Lock()
	next, ok := p.mu.leases.next()
	p.mu.Unlock()
	if !ok || next > now {
		return p.sleepUntil(next, ok)
	}
	var due []expiry
	pending, err := r.Propose(context.Background(), nil, func(v node.View) []fsm.Command {
		// Under the core's view lock, like every evaluation: the table the timers shadow is
		// still. It may run again (the core evaluates again after waiting for a newer log
		// format): put back what an earlier run took.
		p.mu.Lock()
		for _, e := range due {
			p.mu.leases.requeue(e, now)
		}
		due = p.mu.leases.due(viewLocks{v}, now, expireBatch)
		p.mu.Unlock()
		cmds := make([]fsm.Command, 0, len(due))
		for _, e := range due {
			cmds = append(cmds, fsm.Command{Kind: fsm.KindExpire, Key: []byte(e.key), Token: e.token, LeaseRev: e.rev})
		}
		return cmds
	})
	// A round whose timers were all stale (renewed, re-granted or released leases) proposed
	// nothing: its Pending holds no entry, and waiting would only cost a leadership check.
	var results []fsm.Result
	if err == nil && len(due) > 0 {
		results, err = pending.Wait()
	}
	if len(due) > 0 {
		// No results on error: the entry applied whole or, for all we know, not at all.
		expired := 0
		for _, res := range results {
			if res.Existed {
				expired++
			}
		}
		p.expired.Add(uint64(expired))
		if err == nil && fsm.Aborted(results) {
			err = errExpiryAborted
		}
		if err != nil {
			p.requeueExpiries(due, now, err)
		}
		if len(due) == expireBatch {
			return 0 // more may be due already
		}
	}
	p.mu.Lock()
	next, ok = p.mu.leases.next()
	p.mu.Unlock()
	return p.sleepUntil(next, ok)
}

// errExpiryAborted is why an expiry round whose entry aborted is retried.
var errExpiryAborted = errors.New("the entry aborted: a hand-off grant in it found its key changed")

// sleepUntil is how long the lease loop sleeps before the deadline next, on the lease clock
// (ok false: none).
func (p *Policy) sleepUntil(next int64, ok bool) time.Duration {
	if !ok {
		return maxLeaseSleep
	}
	return min(max(time.Duration(next-p.replica.LeaseNow()), 0), maxLeaseSleep)
}

// requeueExpiries puts back the leases whose Expire did not go through, to try again shortly.
func (p *Policy) requeueExpiries(due []expiry, now int64, err error) {
	p.log.Warn("expire proposal failed; will retry", "count", len(due), "err", err)
	p.mu.Lock()
	for _, e := range due {
		p.mu.leases.requeue(e, now+int64(expireRetry))
	}
	p.mu.Unlock()
}
