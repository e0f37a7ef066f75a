package cluster

import (
	"fmt"
	"sync"
	"time"

	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/store"
)

// The store belongs to the process, not to one raft group's core: its probe and its figures are
// the member's.

// healthKey is the stable-store key ProbeStore writes.
const healthKey = "raftlock/health-probe"

// probeEvery is how long a store probe's result stands: the store is written to at most once
// per probeEvery, however many ask (each /readyz request, the service manager's readiness poll).
// probeWait is how long an asker waits for a probe another one runs before it answers that the
// store does not take writes: a stalled disk makes the node unready, not its probes pile up.
const (
	probeEvery = time.Second
	probeWait  = 2 * time.Second
)

// storeProbe is the last store probe's result and the probe in flight, if any. Its mu nests
// inside nothing; the probe's I/O runs without it.
type storeProbe struct {
	mu      sync.Mutex
	at      time.Time     // when the last probe finished (zero: none yet)
	err     error         // its result
	running chan struct{} // closed when the probe in flight finishes; nil when none is
}

// ProbeStore checks that this node's store takes a durable write: first that its raft log has
// no disk fault (raftnode's DiskFault), then it writes the time to a key of
// its own in the stable store (one synced batch) and reads it back. /readyz and the service
// manager's readiness poll ask it. The write happens at most once per probeEvery: askers in
// between get the last result, and askers while a probe runs wait for that one (single flight).
func (n *Member) ProbeStore() error {
	// A disk fault of the raft log (a failed disk stopped raft; a full one refuses writes) is
	// known without I/O, and is what the operator must read first.
	if core := n.Core(); core != nil {
		if err := core.DiskFault(); err != nil {
			return err
		}
	}
	p := &n.probe
	p.mu.Lock()
	if !p.at.IsZero() && time.Since(p.at) < probeEvery {
		err := p.err
		p.mu.Unlock()
		return err
	}
	if ch := p.running; ch != nil {
		p.mu.Unlock()
		t := time.NewTimer(probeWait)
		defer t.Stop()
		select {
		case <-ch:
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.err
		case <-t.C:
			return fmt.Errorf("store probe: a synced write has not finished within %v", probeWait)
		}
	}
	ch := make(chan struct{})
	p.running = ch
	p.mu.Unlock()

	err := n.probeStoreOnce()
	p.mu.Lock()
	p.at, p.err, p.running = time.Now(), err, nil
	p.mu.Unlock()
	close(ch)
	return err
}

// probeStoreOnce writes the time to healthKey and reads it back.
func (n *Member) probeStoreOnce() error {
	want := uint64(time.Now().UnixNano())
	if err := n.stable.SetUint64([]byte(healthKey), want); err != nil {
		return err
	}
	got, err := n.stable.GetUint64([]byte(healthKey))
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("store probe read back %d, wrote %d", got, want)
	}
	return nil
}

// storeReporter is the figures a production store (store.Store) reports; raft's in-memory
// stores in tests report none.
type storeReporter interface{ Stats() store.Stats }

// storeStats are the figures of the log store under the core, if it reports any.
func (n *Member) storeStats() (node.StoreStats, bool) {
	r, ok := n.logs.(storeReporter)
	if !ok {
		return node.StoreStats{}, false
	}
	ss := r.Stats()
	return node.StoreStats{FirstIndex: ss.FirstIndex, LastIndex: ss.LastIndex, Snapshots: ss.Snapshots, SyncLatency: ss.SyncLatency}, true
}
