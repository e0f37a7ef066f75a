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

// clusterView is the topology cluster-mode clients are shown: the leader owns all 16384 slots,
// the other members with a known client address are its replicas. A server without Admin
// knows no members.
func (r *request) clusterView() (leader *node.Member, replicas []node.Member, ok bool) {
	if r.s.admin == nil {
		return nil, nil, false
	}
	members, err := r.s.admin.Members()
	if err != nil {
		return nil, nil, false
	}
	for i := range members {
		m := members[i]
		if m.ClientAddr == "" {
			continue
		}
		if m.Leader {
			leader = &members[i]
		} else {
			replicas = append(replicas, m)
		}
	}
	return leader, replicas, leader != nil
}

// CLUSTER SLOTS|SHARDS|NODES|INFO|MYID
func cmdCluster(r *request) {
	sub := r.args[1]
	switch {
	case is(sub, "myid") && len(r.args) == 2:
		r.w.BulkString(nodeHexID(r.s.cfg.NodeID))
		return
	case is(sub, "info") && len(r.args) == 2:
		leader, replicas, ok := r.clusterView()
		state, size := "fail", 0
		if ok {
			state, size = "ok", 1
		}
		known := len(replicas)
		if leader != nil {
			known++
		}
		info := "cluster_enabled:1\r\ncluster_state:" + state + "\r\ncluster_slots_assigned:16384\r\n" +
			"cluster_slots_ok:16384\r\ncluster_slots_pfail:0\r\ncluster_slots_fail:0\r\n" +
			"cluster_known_nodes:" + strconv.Itoa(known) + "\r\ncluster_size:" + strconv.Itoa(size) + "\r\n"
		r.w.Verbatim("txt", info)
		return
	}
	if is(sub, "slots") || is(sub, "shards") || is(sub, "nodes") {
		r.c.awaitLeader() // cluster-mode clients ask this first, often right after a start
	}
	leader, replicas, ok := r.clusterView()
	if !ok && (is(sub, "slots") || is(sub, "shards") || is(sub, "nodes")) {
		r.w.Error(errNoLeader)
		return
	}
	switch {
	case is(sub, "slots") && len(r.args) == 2:
		r.w.Array(1)
		r.w.Array(3 + len(replicas))
		r.w.Int(0)
		r.w.Int(16383)
		for _, m := range append([]node.Member{*leader}, replicas...) {
			host, port := splitHostPort(m.ClientAddr)
			r.w.Array(4)
			r.w.BulkString(host)
			r.w.Int(int64(port))
			r.w.BulkString(nodeHexID(m.ID))
			r.w.Map(0)
		}
	case is(sub, "shards") && len(r.args) == 2:
		r.w.Array(1)
		r.w.Map(2)
		r.w.BulkString("slots")
		r.w.Array(2)
		r.w.Int(0)
		r.w.Int(16383)
		r.w.BulkString("nodes")
		all := append([]node.Member{*leader}, replicas...)
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
	case is(sub, "nodes") && len(r.args) == 2:
		var b strings.Builder
		for i, m := range append([]node.Member{*leader}, replicas...) {
			flags, master, slots := "master", "-", " 0-16383"
			if i > 0 {
				flags, master, slots = "slave", nodeHexID(leader.ID), ""
			}
			if m.ID == r.s.cfg.NodeID {
				flags = "myself," + flags
			}
			_, rport := splitHostPort(m.RaftAddr)
			b.WriteString(nodeHexID(m.ID) + " " + m.ClientAddr + "@" + strconv.Itoa(rport) + " " + flags + " " + master +
				" 0 0 1 connected" + slots + "\n")
		}
		r.w.Verbatim("txt", b.String())
	default:
		r.w.Error("ERR unknown subcommand '" + string(appendSanitized(nil, sub, 128)) + "'. Try CLUSTER HELP.")
	}
}
