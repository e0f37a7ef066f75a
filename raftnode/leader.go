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
