package raftnode

import (
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// changeSignal is a broadcast: every waiter's channel is closed at the next notify.
type changeSignal struct {
	mu sync.Mutex
	ch chan struct{}
}

// wait returns a channel closed at the next notify.
func (s *changeSignal) wait() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch == nil {
		s.ch = make(chan struct{})
	}
	return s.ch
}

func (s *changeSignal) notify() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ch != nil {
		close(s.ch)
		s.ch = nil
	}
}

// LeaderChanged returns a channel closed at the next change of what a client's request depends
// on to be served: who leads (raft's observation), whether this node is the ready leader, or the
// member table (the leader's announced client address). A request that arrives while no leader
// is known waits on it instead of failing at once.
func (n *Replica) LeaderChanged() <-chan struct{} { return n.leaderChange.wait() }

// watchLeaders follows raft's observations of who leads and of this node's raft state: it
// counts leader changes (Stats) and wakes the requests waiting on LeaderChanged. Observations
// are taken on their own goroutine, so a request waiting for a leader hears of one at once.
func (n *Replica) watchLeaders() {
	observations := make(chan raft.Observation, 16)
	obs := raft.NewObserver(observations, false, func(o *raft.Observation) bool {
		switch o.Data.(type) {
		case raft.LeaderObservation, raft.RaftState:
			return true
		}
		return false
	})
	n.raft.RegisterObserver(obs)
	defer n.raft.DeregisterObserver(obs)
	if _, id := n.raft.LeaderWithID(); id != "" { // elected before the observer was there
		n.stats.leaders.note(string(id), n.raft.CurrentTerm(), time.Now())
	}
	for {
		select {
		case <-n.stop:
			return
		case o := <-observations:
			if d, ok := o.Data.(raft.LeaderObservation); ok {
				n.stats.leaders.note(string(d.LeaderID), n.raft.CurrentTerm(), time.Now())
			}
			n.leaderChange.notify()
		}
	}
}

// Retire stops this node from serving as the leader, now and from then on: cluster management
// found it removed from the cluster, and it answers requests "not leader" until it is closed.
func (n *Replica) Retire() {
	n.mu.Lock() // becomeReady checks retired and sets ready under mu
	n.retired.Store(true)
	n.ready.Store(false)
	n.mu.Unlock()
	n.leaderChange.notify()
}

// StandIfSoleVoter has this node stand for election at once when its configuration names it
// the only voter. raft's follower waits a heartbeat timeout (randomized between one and two:
// 0.5–1 s with the defaults) for a leader's contact before it stands, a contact a sole voter can
// never receive: a one-node cluster spent that long refusing requests after every start, on
// top of its snapshot's restore. Cluster management calls it once the core runs (and after a
// bootstrap).
//
// raft has no call to stand now. ReloadConfig with a shorter heartbeat timeout wakes the
// follower loop's timer at once (raft fires it so that the follower picks up the shorter
// value), and a follower that has heard from no leader since it started then stands; the
// configured timeout is put back right after (a longer value wakes nothing, and the next timer
// reads it). An election is safe at any time in raft, and with no other voter there is nobody
// it could disturb. It does nothing when the node is not a leaderless follower, when the
// configuration has another server, or when the heartbeat timeout has no room under it (raft
// refuses one below the leader lease timeout); the node then stands after the usual timeout.
func (n *Replica) StandIfSoleVoter() {
	if n.raft.State() != raft.Follower {
		return
	}
	if addr, _ := n.raft.LeaderWithID(); addr != "" {
		return
	}
	f := n.raft.GetConfiguration()
	if f.Error() != nil {
		return
	}
	servers := f.Configuration().Servers
	if len(servers) != 1 || servers[0].ID != raft.ServerID(n.cfg.ID) || servers[0].Suffrage != raft.Voter {
		return
	}
	configured := n.raft.ReloadableConfig()
	if configured.HeartbeatTimeout <= n.cfg.LeaderLeaseTimeout {
		return
	}
	shorter := configured
	shorter.HeartbeatTimeout = n.cfg.LeaderLeaseTimeout
	if err := n.raft.ReloadConfig(shorter); err != nil {
		n.log.Warn("could not stand for election at once as the sole voter", "err", err)
		return
	}
	if err := n.raft.ReloadConfig(configured); err != nil {
		n.log.Error("could not restore the heartbeat timeout after standing as the sole voter", "err", err)
		return
	}
	n.log.Info("sole voter: standing for election without waiting a heartbeat timeout")
}
