package main

import (
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/raftnode"
	"github.com/redis/go-redis/v9"
)

// joinCluster adds this new node to the cluster that opts.join belongs to: first as a
// non-voter, which catches up from the leader (by snapshot if the log was compacted), then,
// once it has applied the configuration change that added it, as a voter. Any member accepts
// the requests: followers forward them to the leader.
func joinCluster(ctx context.Context, rn *raftnode.Node, opts options, log *slog.Logger) {
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
	for rn.Stats().AppliedIndex < uint64(index) {
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
func announce(ctx context.Context, rn *raftnode.Node, opts options, log *slog.Logger) {
	for sleep(ctx, time.Second) {
		if addr, ok := rn.MemberAddr(opts.id); ok && addr == opts.advertise {
			continue
		}
		if rn.IsLeader() {
			if err := rn.SetMemberAddr(ctx, opts.id, opts.advertise); err != nil {
				log.Warn("announce: recording own client address failed", "err", err)
			}
			continue
		}
		leaderID, leaderAddr := rn.LeaderClient()
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

// Removal seen from outside. A node removed while it was down or cut off never receives the
// configuration without itself: the leader stops replicating to a removed peer. Restarted, it
// would campaign for ever (its pre-votes refused) and answer every client CLUSTERDOWN. So a node
// that has had no leader for leaderlessBeforeAsking asks the members it knows which of them
// leads, and asks that leader whether it is still a member.
const (
	membershipCheckEvery   = 2 * time.Second
	leaderlessBeforeAsking = 6 * time.Second
)

// watchMembership closes evicted when the cluster's leader says this node, which was a member,
// is not one any more. It returns when ctx ends.
func watchMembership(ctx context.Context, rn *raftnode.Node, id, dir string, log *slog.Logger, evicted chan<- struct{}) {
	var leaderless time.Time
	remembered := readMemberAddrs(dir)
	for sleep(ctx, membershipCheckEvery) {
		members, err := rn.Members()
		if err != nil {
			continue
		}
		if leaderID, _ := rn.LeaderClient(); leaderID != "" {
			remembered = rememberMemberAddrs(dir, members, remembered, log)
			leaderless = time.Time{}
			continue
		}
		if !slices.ContainsFunc(members, func(m node.Member) bool { return m.ID == id }) {
			// Not a member yet (a joining node before its addition): nothing to ask.
			leaderless = time.Time{}
			continue
		}
		if leaderless.IsZero() {
			leaderless = time.Now()
		}
		if time.Since(leaderless) < leaderlessBeforeAsking {
			continue
		}
		if leader, ok := removedByLeader(ctx, members, id, remembered); ok {
			log.Warn("the cluster's leader does not list this node: it was removed while away", "leader", leader)
			close(evicted)
			return
		}
	}
}

// removedByLeader finds, among members (this node's view), one that says it is the ready
// leader, and reports whether that leader's member list lacks id. Only a leader's answer counts:
// its configuration is the newest, so a node that was just added is never told it is gone.
func removedByLeader(ctx context.Context, members []node.Member, id string, remembered map[string]string) (string, bool) {
	for _, m := range members {
		if m.ClientAddr == "" {
			// A restarted node applies its log only once a leader tells it what is committed:
			// until then its member table is its last snapshot's.
			m.ClientAddr = remembered[m.ID]
		}
		if m.ID == id || m.ClientAddr == "" {
			continue
		}
		c := redis.NewClient(&redis.Options{Addr: m.ClientAddr, MaxRetries: -1, DisableIdentity: true, Protocol: 2,
			DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
		info, err := c.Info(ctx, "raft").Result()
		if err != nil || !strings.Contains(info, "raft_state:Leader") || !strings.Contains(info, "raft_ready:true") {
			c.Close()
			continue
		}
		list, err := c.Do(ctx, "RAFT", "MEMBERS").Slice()
		c.Close()
		if err != nil || len(list) == 0 {
			return "", false
		}
		return m.ID, !slices.ContainsFunc(list, func(e any) bool { return memberID(e) == id })
	}
	return "", false
}

// memberID reads the id of one RAFT MEMBERS entry: a map in RESP3, alternating names and
// values in RESP2.
func memberID(e any) string {
	switch v := e.(type) {
	case map[any]any:
		s, _ := v["id"].(string)
		return s
	case []any:
		for i := 0; i+1 < len(v); i += 2 {
			if v[i] == "id" {
				s, _ := v[i+1].(string)
				return s
			}
		}
	}
	return ""
}

// memberAddrsFile keeps, in the data dir, the client addresses of the members this node last
// knew, for asking them after a restart.
const memberAddrsFile = "member-addrs.json"

func readMemberAddrs(dir string) map[string]string {
	addrs := map[string]string{}
	if b, err := os.ReadFile(filepath.Join(dir, memberAddrsFile)); err == nil {
		json.Unmarshal(b, &addrs) // a damaged file only loses the hint
	}
	return addrs
}

// rememberMemberAddrs writes the members' client addresses when they changed, and returns them.
func rememberMemberAddrs(dir string, members []node.Member, known map[string]string, log *slog.Logger) map[string]string {
	addrs := map[string]string{}
	for _, m := range members {
		if m.ClientAddr != "" {
			addrs[m.ID] = m.ClientAddr
		}
	}
	if len(addrs) == 0 || maps.Equal(addrs, known) {
		return known
	}
	b, _ := json.Marshal(addrs)
	tmp := filepath.Join(dir, memberAddrsFile+".tmp")
	if err := os.WriteFile(tmp, b, 0o640); err != nil || os.Rename(tmp, filepath.Join(dir, memberAddrsFile)) != nil {
		log.Warn("remembering the members' client addresses failed", "err", err)
		return known
	}
	return addrs
}
