package cluster

import (
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// A node of a several-group cluster leads some of its groups; with every leadership on one node,
// that node's CPU and disk carry every write (DESIGN.md §13). The balancer spreads them: group g
// prefers the voter at position g mod n of its configuration's voters sorted by ID, so with
// every voter up each of n nodes leads about G/n groups. A leader that is not its group's
// preferred voter hands leadership to it (raft's leadership transfer) once it has led the group
// for a while and the preferred voter answers its heartbeats. After a failure the groups the
// failed node led elect leaders among the others; when it is back they move back to it.
//
// Static preference never oscillates: a group only ever moves toward one voter. A transfer
// stalls the group's writes until it completes or times out (raft's election timeout), so a
// failed one is not tried again for the group before balanceRetry.

const (
	// balanceSettle is how long a leader leads before it hands off: long enough for its first
	// heartbeats to have told it which voters answer, and for a restarted preferred voter to
	// have caught up with most of the log.
	balanceSettle = 5 * time.Second
	// balanceRetry is the wait after a failed transfer before the group tries again.
	balanceRetry = 30 * time.Second
)

// BalanceConfig configures a Balancer. A zero field means the documented default.
type BalanceConfig struct {
	// Interval is how often the balancer looks at its groups (default 1 s).
	Interval time.Duration
	// Settle and Retry default to balanceSettle and balanceRetry.
	Settle, Retry time.Duration
	Logger        *slog.Logger
}

// Balancer moves the leaderships of this node's groups toward their preferred voters.
type Balancer struct {
	groups []*Member
	cfg    BalanceConfig
	stop   chan struct{}
	wg     sync.WaitGroup

	// Owned by the loop: since when this node leads each group (zero: it does not), and when
	// a group's last transfer failed.
	leading []time.Time
	failed  []time.Time
}

// StartBalancer starts balancing groups (index = group number), this node's members of them.
func StartBalancer(groups []*Member, cfg BalanceConfig) *Balancer {
	if cfg.Interval <= 0 {
		cfg.Interval = time.Second
	}
	if cfg.Settle <= 0 {
		cfg.Settle = balanceSettle
	}
	if cfg.Retry <= 0 {
		cfg.Retry = balanceRetry
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	cfg.Logger = cfg.Logger.With("component", "raft-balancer")
	b := &Balancer{groups: groups, cfg: cfg, stop: make(chan struct{}),
		leading: make([]time.Time, len(groups)), failed: make([]time.Time, len(groups))}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		t := time.NewTicker(cfg.Interval)
		defer t.Stop()
		for {
			select {
			case <-b.stop:
				return
			case now := <-t.C:
				b.balance(now)
			}
		}
	}()
	return b
}

// Stop stops the balancer and waits for a transfer in progress.
func (b *Balancer) Stop() {
	close(b.stop)
	b.wg.Wait()
}

// preferredLeader is the voter that group g prefers among c's voters ("" if none).
func preferredLeader(g int, c raft.Configuration) raft.ServerID {
	var voters []raft.ServerID
	for _, s := range c.Servers {
		if s.Suffrage == raft.Voter {
			voters = append(voters, s.ID)
		}
	}
	if len(voters) == 0 {
		return ""
	}
	slices.Sort(voters)
	return voters[g%len(voters)]
}

// balance hands each group this node has led for Settle to its preferred voter, if that is
// another voter that answers heartbeats. One transfer at a time: each waits for raft.
func (b *Balancer) balance(now time.Time) {
	for g, m := range b.groups {
		select {
		case <-b.stop:
			return
		default:
		}
		if !m.isLeader() {
			b.leading[g] = time.Time{}
			continue
		}
		if b.leading[g].IsZero() {
			b.leading[g] = now
		}
		if now.Sub(b.leading[g]) < b.cfg.Settle || now.Sub(b.failed[g]) < b.cfg.Retry {
			continue
		}
		c, err := m.configuration()
		if err != nil {
			continue
		}
		to := preferredLeader(g, c)
		if to == "" || string(to) == m.localID() || !m.peers.reachable(to) {
			continue
		}
		b.cfg.Logger.Info("handing a raft group's leadership to its preferred voter", "group", g, "to", to)
		if err := m.Transfer(string(to)); err != nil {
			b.failed[g] = now
			b.cfg.Logger.Warn("leadership transfer failed; the group stays here for now",
				"group", g, "to", to, "err", err, "retry_in", b.cfg.Retry)
			continue
		}
		b.leading[g] = time.Time{}
	}
}
