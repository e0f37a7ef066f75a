package server

// CLUSTER SLOTS|SHARDS|NODES|INFO|MYID: the topology cluster-mode clients route by.

import (
	"crypto/sha1"
	"encoding/hex"
	"github.com/raftlock/raftlock/node"
	"net"
	"strconv"
	"strings"
)

// nodeHexID is the 40-hex-digit node ID Redis Cluster clients expect, derived from ours.
func nodeHexID(id string) string {
	sum := sha1.Sum([]byte(id))
	return hex.EncodeToString(sum[:])
}

func splitHostPort(addr string) (string, int) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr, 0
	}
	p, _ := strconv.Atoi(port)
	return host, p
}

// clusterView is the topology cluster-mode clients are shown: each group's slots (groups.go;
// one group: all 16384) with the member that leads it and, as its replicas, the other members
// with a known client address. A server without Admin knows no members; ok is false while a
// group has no known leader.
func (r *request) clusterView() (shards []shard, ok bool) {
	if r.s.admin == nil {
		return nil, false
	}
	members, err := r.s.admin.Members()
	if err != nil {
		return nil, false
	}
	ranges := r.s.slotRanges()
	for g, rep := range r.s.groups {
		if len(ranges[g]) == 0 {
			continue // every slot of the group moved away
		}
		sh := shard{ranges: ranges[g]}
		leaderID := ""
		if r.s.grouped() {
			// The members' table says who leads group 0 only.
			if leaderID = rep.Leadership().ID; leaderID == "" {
				return nil, false
			}
		}
		for i := range members {
			m := members[i]
			switch {
			case m.ClientAddr == "":
			case leaderID == "" && m.Leader, leaderID != "" && m.ID == leaderID:
				sh.leader = &members[i]
			default:
				sh.replicas = append(sh.replicas, m)
			}
		}
		if sh.leader == nil {
			return nil, false
		}
		shards = append(shards, sh)
	}
	return shards, true
}

// knownMembers is how many members have a known client address (CLUSTER INFO's known nodes).
func (r *request) knownMembers() int {
	if r.s.admin == nil {
		return 0
	}
	members, err := r.s.admin.Members()
	if err != nil {
		return 0
	}
	n := 0
	for _, m := range members {
		if m.ClientAddr != "" {
			n++
		}
	}
	return n
}

// shard is one group's part of the topology: its slot ranges, its leader and its replicas.
type shard struct {
	ranges   [][2]int
	leader   *node.Member
	replicas []node.Member
}

// all is the shard's leader and then its replicas.
func (sh shard) all() []node.Member { return append([]node.Member{*sh.leader}, sh.replicas...) }

// CLUSTER SLOTS|SHARDS|NODES|INFO|MYID
func cmdCluster(r *request) {
	sub := r.args[1]
	switch {
	case is(sub, "myid") && len(r.args) == 2:
		r.w.BulkString(nodeHexID(r.s.cfg.NodeID))
		return
	case is(sub, "info") && len(r.args) == 2:
		shards, ok := r.clusterView()
		state, size, known := "fail", 0, r.knownMembers()
		if ok {
			state = "ok"
			leaders := map[string]bool{}
			for _, sh := range shards {
				leaders[sh.leader.ID] = true
			}
			size = len(leaders)
		}
		info := "cluster_enabled:1\r\ncluster_state:" + state + "\r\ncluster_slots_assigned:16384\r\n" +
			"cluster_slots_ok:16384\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\n" +
			"cluster_known_nodes:" + strconv.Itoa(known) + "\r\ncluster_size:" + strconv.Itoa(size) + "\r\n"
		r.w.Verbatim("txt", info)
		return
	}
	if is(sub, "slots") || is(sub, "shards") || is(sub, "nodes") {
		r.c.awaitLeader() // cluster-mode clients ask this first, often right after a start
		// A connection that reads the slots' owners routes by them: on a cluster of several
		// groups it is told MOVED, as Redis Cluster tells it, rather than forwarded (forward.go).
		r.c.sess.slotAware = true
	}
	shards, ok := r.clusterView()
	if !ok && (is(sub, "slots") || is(sub, "shards") || is(sub, "nodes")) {
		r.w.Error(errNoLeader)
		return
	}
	switch {
	case is(sub, "slots") && len(r.args) == 2:
		n := 0
		for _, sh := range shards {
			n += len(sh.ranges)
		}
		r.w.Array(n)
		for _, sh := range shards {
			all := sh.all()
			for _, rg := range sh.ranges {
				r.w.Array(2 + len(all))
				r.w.Int(int64(rg[0]))
				r.w.Int(int64(rg[1]))
				for _, m := range all {
					host, port := splitHostPort(m.ClientAddr)
					r.w.Array(4)
					r.w.BulkString(host)
					r.w.Int(int64(port))
					r.w.BulkString(nodeHexID(m.ID))
					r.w.Map(0)
				}
			}
		}
	case is(sub, "shards") && len(r.args) == 2:
		r.w.Array(len(shards))
		for _, sh := range shards {
			r.w.Map(2)
			r.w.BulkString("slots")
			r.w.Array(2 * len(sh.ranges))
			for _, rg := range sh.ranges {
				r.w.Int(int64(rg[0]))
				r.w.Int(int64(rg[1]))
			}
			r.w.BulkString("nodes")
			all := sh.all()
			r.w.Array(len(all))
			for i, m := range all {
				host, port := splitHostPort(m.ClientAddr)
				role := "replica"
				if i == 0 {
					role = "master"
				}
				r.w.Map(7)
				for _, kv := range [][2]string{{"id", nodeHexID(m.ID)}, {"ip", host}, {"endpoint", host}, {"role", role}, {"health", "online"}} {
					r.w.BulkString(kv[0])
					r.w.BulkString(kv[1])
				}
				r.w.BulkString("port")
				r.w.Int(int64(port))
				r.w.BulkString("replication-offset")
				r.w.Int(0)
			}
		}
	case is(sub, "nodes") && len(r.args) == 2:
		r.w.Verbatim("txt", clusterNodes(shards, r.s.cfg.NodeID, r.s.grouped()))
	default:
		r.w.Error("ERR unknown subcommand '" + string(appendSanitized(nil, sub, 128)) + "'. Try CLUSTER HELP.")
	}
}

// clusterNodes is CLUSTER NODES's text. With one group the leader is the master of every slot
// and the other members its replicas. With several, Redis Cluster's format gives a node one
// role: every member is a master of the slot ranges of the groups it leads (none, for a member
// that leads none), and the replicas of each group are not listed (CLUSTER SLOTS and SHARDS
// list them).
func clusterNodes(shards []shard, self string, grouped bool) string {
	var b strings.Builder
	line := func(m node.Member, flags, master, slots string) {
		if m.ID == self {
			flags = "myself," + flags
		}
		_, rport := splitHostPort(m.RaftAddr)
		b.WriteString(nodeHexID(m.ID) + " " + m.ClientAddr + "@" + strconv.Itoa(rport) + " " + flags + " " + master +
			" 0 0 1 connected" + slots + "\n")
	}
	if !grouped {
		sh := shards[0]
		for i, m := range sh.all() {
			if i == 0 {
				line(m, "master", "-", " 0-16383")
			} else {
				line(m, "slave", nodeHexID(sh.leader.ID), "")
			}
		}
		return b.String()
	}
	slots := map[string]string{}
	for _, sh := range shards {
		slots[sh.leader.ID] += " " + formatRanges(sh.ranges, " ")
	}
	for _, m := range shards[0].all() {
		line(m, "master", "-", slots[m.ID])
	}
	return b.String()
}
