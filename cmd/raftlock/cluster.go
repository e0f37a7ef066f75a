package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/raftlock/raftlock/raftnode"
	"github.com/redis/go-redis/v9"
)

// joinCluster adds this new node to the cluster that opts.join belongs to: first as a
// non-voter, which catches up from the leader (by snapshot if the log was compacted), then,
// once it has applied the configuration change that added it, as a voter. Any member accepts
// the requests: followers forward them to the leader.
func joinCluster(ctx context.Context, node *raftnode.Node, opts options, log *slog.Logger) {
	c := redis.NewClient(&redis.Options{Addr: opts.join, MaxRetries: -1, DisableIdentity: true, Protocol: 2})
	defer c.Close()
	raftAddr := opts.raftAdvertise
	if raftAddr == "" {
		raftAddr = opts.raftAddr
	}
	var index int64
	for {
		var err error
		index, err = c.Do(ctx, "RAFT", "ADD", opts.id, raftAddr, "NONVOTER", "CLIENT", opts.advertise).Int64()
		if err == nil {
			break
		}
		log.Warn("join: adding this node failed; retrying", "via", opts.join, "err", err)
		if !sleep(ctx, time.Second) {
			return
		}
	}
	log.Info("join: added as a non-voter; catching up", "via", opts.join, "index", index)
	for node.Stats().AppliedIndex < uint64(index) {
		if !sleep(ctx, 50*time.Millisecond) {
			return
		}
	}
	for {
		err := c.Do(ctx, "RAFT", "PROMOTE", opts.id).Err()
		if err == nil {
			log.Info("join: promoted to voter")
			return
		}
		log.Warn("join: promotion failed; retrying", "err", err)
		if !sleep(ctx, time.Second) {
			return
		}
	}
}

// announce keeps this node's client address in the replicated member table, so every node can
// forward and redirect clients to it when it leads. The leader records its own after each
// election; a follower asks the leader through its client port.
func announce(ctx context.Context, node *raftnode.Node, opts options, log *slog.Logger) {
	for sleep(ctx, time.Second) {
		if addr, ok := node.MemberAddr(opts.id); ok && addr == opts.advertise {
			continue
		}
		if node.IsLeader() {
			if err := node.SetMemberAddr(ctx, opts.id, opts.advertise); err != nil {
				log.Warn("announce: recording own client address failed", "err", err)
			}
			continue
		}
		leaderID, leaderAddr := node.LeaderClient()
		if leaderID == "" || leaderAddr == "" {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: leaderAddr, MaxRetries: -1, DisableIdentity: true, Protocol: 2})
		err := c.Do(ctx, "RAFT", "ANNOUNCE", opts.id, opts.advertise).Err()
		c.Close()
		if err != nil {
			log.Warn("announce: telling the leader our client address failed", "leader", leaderID, "err", err)
		} else {
			log.Info("announced client address", "addr", opts.advertise, "leader", leaderID)
		}
	}
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
