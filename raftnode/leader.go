package raftnode

import "sync"

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
func (n *Node) LeaderChanged() <-chan struct{} { return n.leaderChange.wait() }
