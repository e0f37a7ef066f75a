package server

import (
	"crypto/sha1"
	"encoding/hex"
	"github.com/raftlock/raftlock/fsm"
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
// the other members with a known client address are its replicas.
func (c *conn) clusterView() (leader *fsm.Member, replicas []fsm.Member, ok bool) {
	members, err := c.s.node.Members()
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
func cmdCluster(c *conn, args [][]byte) {
	sub := args[1]
	switch {
	case is(sub, "myid") && len(args) == 2:
		c.w.BulkString(nodeHexID(c.s.cfg.NodeID))
		return
	case is(sub, "info") && len(args) == 2:
		leader, replicas, ok := c.clusterView()
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
		c.w.Verbatim("txt", info)
		return
	}
	leader, replicas, ok := c.clusterView()
	if !ok && (is(sub, "slots") || is(sub, "shards") || is(sub, "nodes")) {
		c.w.Error(errNoLeader)
		return
	}
	switch {
	case is(sub, "slots") && len(args) == 2:
		c.w.Array(1)
		c.w.Array(3 + len(replicas))
		c.w.Int(0)
		c.w.Int(16383)
		for _, m := range append([]fsm.Member{*leader}, replicas...) {
			host, port := splitHostPort(m.ClientAddr)
			c.w.Array(4)
			c.w.BulkString(host)
			c.w.Int(int64(port))
			c.w.BulkString(nodeHexID(m.ID))
			c.w.Map(0)
		}
	case is(sub, "shards") && len(args) == 2:
		c.w.Array(1)
		c.w.Map(2)
		c.w.BulkString("slots")
		c.w.Array(2)
		c.w.Int(0)
		c.w.Int(16383)
		c.w.BulkString("nodes")
		all := append([]fsm.Member{*leader}, replicas...)
		c.w.Array(len(all))
		for i, m := range all {
			host, port := splitHostPort(m.ClientAddr)
			role := "replica"
			if i == 0 {
				role = "master"
			}
			c.w.Map(7)
			for _, kv := range [][2]string{{"id", nodeHexID(m.ID)}, {"ip", host}, {"endpoint", host}, {"role", role}, {"health", "online"}} {
				c.w.BulkString(kv[0])
				c.w.BulkString(kv[1])
			}
			c.w.BulkString("port")
			c.w.Int(int64(port))
			c.w.BulkString("replication-offset")
			c.w.Int(0)
		}
	case is(sub, "nodes") && len(args) == 2:
		var b strings.Builder
		for i, m := range append([]fsm.Member{*leader}, replicas...) {
			flags, master, slots := "master", "-", " 0-16383"
			if i > 0 {
				flags, master, slots = "slave", nodeHexID(leader.ID), ""
			}
			if m.ID == c.s.cfg.NodeID {
				flags = "myself," + flags
			}
			_, rport := splitHostPort(m.RaftAddr)
			b.WriteString(nodeHexID(m.ID) + " " + m.ClientAddr + "@" + strconv.Itoa(rport) + " " + flags + " " + master +
				" 0 0 1 connected" + slots + "\n")
		}
		c.w.Verbatim("txt", b.String())
	default:
		c.w.Error("ERR unknown subcommand '" + string(appendSanitized(nil, sub, 128)) + "'. Try CLUSTER HELP.")
	}
}

// raftForwarded lists the RAFT subcommands that must run on the leader.
var raftOnLeader = map[string]bool{"add": true, "promote": true, "remove": true, "transfer": true, "announce": true}

// RAFT MEMBERS | ADD id raftaddr [NONVOTER] [CLIENT addr] | PROMOTE id | REMOVE id |
// TRANSFER [id] | ANNOUNCE id clientaddr | SNAPSHOT | STATS | DIGEST | FORWARDED
func cmdRaft(c *conn, args [][]byte) {
	sub := lower(args[1])
	if raftOnLeader[sub] && !c.s.node.IsLeader() {
		c.route(&command{name: "raft", write: true}, args)
		return
	}
	wrongArgs := func() { c.w.Error("ERR wrong number of arguments for 'raft|" + sub + "' command") }
	switch sub {
	case "forwarded":
		c.forwarded = true
		c.w.SimpleString("OK")
	case "members":
		members, err := c.s.node.Members()
		if err != nil {
			c.replyError(err)
			return
		}
		c.w.Array(len(members))
		for _, m := range members {
			suffrage := "nonvoter"
			if m.Voter {
				suffrage = "voter"
			}
			c.w.Map(5)
			for _, kv := range [][2]string{{"id", m.ID}, {"raft_addr", m.RaftAddr}, {"client_addr", m.ClientAddr}, {"suffrage", suffrage}} {
				c.w.BulkString(kv[0])
				c.w.BulkString(kv[1])
			}
			c.w.BulkString("leader")
			c.w.Int(b2i(m.Leader))
		}
	case "add":
		if len(args) < 4 {
			wrongArgs()
			return
		}
		voter, client := true, ""
		for j := 4; j < len(args); j++ {
			switch {
			case is(args[j], "nonvoter"):
				voter = false
			case is(args[j], "client") && j+1 < len(args):
				client = string(args[j+1])
				j++
			default:
				c.w.Error(errSyntax)
				return
			}
		}
		index, err := c.s.node.AddServer(c.ctx, string(args[2]), string(args[3]), client, voter)
		if err != nil {
			c.replyError(err)
			return
		}
		c.w.Int(int64(index))
	case "promote", "remove":
		if len(args) != 3 {
			wrongArgs()
			return
		}
		var err error
		if sub == "promote" {
			err = c.s.node.Promote(c.ctx, string(args[2]))
		} else {
			err = c.s.node.RemoveServer(c.ctx, string(args[2]))
		}
		if err != nil {
			c.replyError(err)
			return
		}
		c.w.SimpleString("OK")
	case "transfer":
		if len(args) > 3 {
			wrongArgs()
			return
		}
		id := ""
		if len(args) == 3 {
			id = string(args[2])
		}
		if err := c.s.node.Transfer(id); err != nil {
			c.replyError(err)
			return
		}
		c.w.SimpleString("OK")
	case "announce":
		if len(args) != 4 {
			wrongArgs()
			return
		}
		if err := c.s.node.SetMemberAddr(c.ctx, string(args[2]), string(args[3])); err != nil {
			c.replyError(err)
			return
		}
		c.w.SimpleString("OK")
	case "snapshot":
		if err := c.s.node.Snapshot(); err != nil {
			c.replyError(err)
			return
		}
		c.w.SimpleString("OK")
	case "stats":
		var fields []InfoField
		if c.s.cfg.Info != nil {
			fields = c.s.cfg.Info("raft")
		}
		c.w.Map(len(fields))
		for _, f := range fields {
			c.w.BulkString(f.Name)
			c.w.BulkString(f.Value)
		}
	case "digest":
		applied, sum := c.s.node.Digest()
		c.w.Array(2)
		c.w.Int(int64(applied))
		c.w.BulkString(sum)
	default:
		c.w.Error("ERR unknown subcommand '" + string(appendSanitized(nil, args[1], 128)) + "'. Try RAFT MEMBERS, ADD, PROMOTE, REMOVE, TRANSFER, SNAPSHOT, STATS or DIGEST.")
	}
}
