package main

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"time"
)

// What is measured: the systems, how each is driven, and at which settings.

// The fixed settings, in the order the table lists them; the hand-off
// settings (one per -waiters count) come after them.
var (
	oneConn   = setting{name: "1 conn", conns: 1, depth: 1}
	conns16   = setting{name: "16 conns", conns: 16, depth: 1}
	conns64   = setting{name: "64 conns", conns: 64, depth: 1}
	pipelined = setting{name: "16 conns × 16 deep", conns: 16, depth: 16}
	setNX50   = setting{name: "50 conns SET NX PX", conns: 50, depth: 1}
	hotKey    = setting{name: "hot key, 16 clients", conns: 16, depth: 1, hot: true}

	fixedSettings = []setting{oneConn, conns16, conns64, pipelined, setNX50, hotKey}
)

// handoffSetting is n clients queued on one key, each releasing its grant at
// once: what the server's hand-off to the next waiter costs.
func handoffSetting(n int) setting {
	return setting{name: fmt.Sprintf("hand-off, %d waiters", n), conns: n, depth: 1, handoff: true}
}

// settings returns every setting of the run, in table order.
func (cfg config) settings() []setting {
	all := slices.Clone(fixedSettings)
	for _, n := range cfg.waiters {
		all = append(all, handoffSetting(n))
	}
	return all
}

// handoffWait is the WAIT of raftlock's LOCK in a hand-off cell: the
// server's bound, so that a waiter outlasts a whole turn of the queue. A
// wait that runs out is counted as an error.
const handoffWait = time.Minute

// etcdHandoffConns bounds the gRPC connections that carry a hand-off cell's
// etcd sessions: one per waiter up to 16, as in the hot-key cell, then
// shared, as in a client process with many waiters. (raftlock needs a
// connection per waiter: a LOCK ... WAIT holds its connection.)
const etcdHandoffConns = 16

// config is the command line.
type config struct {
	timing
	runs                        int
	ttl                         time.Duration // lease of every lock
	timeout                     time.Duration // of the whole run
	raftlock, etcd, redisServer string        // binaries
	floor                       string        // the Go floor's binary (tests/bench/cmd/floor)
	systems                     []string      // keys of the systems to run; all if empty
	waiters                     []int         // of each hand-off setting
}

// system is one deployment: how to start it and the ways it is driven.
type system struct {
	key   string // for -systems
	name  string
	nodes int // raftlock with as many nodes is what it is compared with
	start func(ctx context.Context, cfg config, dir string) (*cluster, error)
	// clients are the ways it is driven, each at some settings.
	clients []client
}

// client is one way of driving a system.
type client struct {
	label    string
	settings []setting
	handoff  bool // also at every hand-off setting
	open     func(ctx context.Context, c *cluster, s setting, cfg config) (*workers, error)
}

// rowLabel names a table row: the system and how it was driven.
func rowLabel(sys *system, cl *client) string { return sys.name + ", " + cl.label }

// raftlock's own ways and the recipe every Redis-protocol system shares.
const (
	nativeLabel = "LOCK/UNLOCK"
	waitLabel   = "LOCK WAIT/UNLOCK"
	setNXLabel  = "SET NX PX + EVALSHA"
)

var (
	native = client{
		label:    nativeLabel,
		settings: []setting{oneConn, conns16, conns64, pipelined, hotKey},
		open: func(ctx context.Context, c *cluster, s setting, cfg config) (*workers, error) {
			return openRESP(ctx, c.addrs[0], s, true, cfg.ttl, 0)
		},
	}
	nativeWait = client{
		label:   waitLabel,
		handoff: true,
		open: func(ctx context.Context, c *cluster, s setting, cfg config) (*workers, error) {
			return openRESP(ctx, c.addrs[0], s, true, cfg.ttl, handoffWait)
		},
	}
	setNX = client{
		label:    setNXLabel,
		settings: []setting{oneConn, conns16, conns64, pipelined, setNX50, hotKey},
		open: func(ctx context.Context, c *cluster, s setting, cfg config) (*workers, error) {
			return openRESP(ctx, c.addrs[0], s, false, cfg.ttl, 0)
		},
	}
	// The raft floor is driven at the settings of the targets only: its two ways cost it the
	// same, and it has no queue.
	floorNative   = client{label: nativeLabel, settings: []setting{oneConn, conns16, conns64, pipelined}, open: native.open}
	floorSetNX    = client{label: setNXLabel, settings: []setting{setNX50}, open: setNX.open}
	redsyncClient = client{
		label:    "redsync",
		settings: []setting{oneConn, conns16, conns64, hotKey}, // Redlock cannot pipeline
		open: func(ctx context.Context, c *cluster, s setting, cfg config) (*workers, error) {
			return openRedsync(ctx, c.addrs, s, cfg.ttl)
		},
	}
	etcdMutex = client{
		label:    "concurrency.Mutex",
		settings: []setting{oneConn, conns16, conns64, pipelined, hotKey},
		handoff:  true, // Lock queues by revision: FIFO
		open: func(ctx context.Context, c *cluster, s setting, _ config) (*workers, error) {
			if s.handoff {
				return openEtcd(ctx, c.addrs[0], min(s.conns, etcdHandoffConns), s.conns)
			}
			return openEtcd(ctx, c.addrs[0], s.conns, s.conns*s.depth)
		},
	}
)

// allSystems lists every system in the order of the table (and of each
// round, rotated by one system per round).
func allSystems() []*system {
	raftlock := func(n int) func(context.Context, config, string) (*cluster, error) {
		return func(ctx context.Context, cfg config, dir string) (*cluster, error) {
			return startRaftlock(ctx, cfg.raftlock, dir, n)
		}
	}
	redisN := func(n int, fsync bool) func(context.Context, config, string) (*cluster, error) {
		return func(ctx context.Context, cfg config, dir string) (*cluster, error) {
			return startRedis(ctx, cfg.redisServer, dir, n, fsync)
		}
	}
	floorRaft := func(n int) func(context.Context, config, string) (*cluster, error) {
		return func(ctx context.Context, cfg config, dir string) (*cluster, error) {
			return startFloorRaft(ctx, cfg.floor, dir, n)
		}
	}
	floor := func(durable bool) func(context.Context, config, string) (*cluster, error) {
		return func(ctx context.Context, cfg config, dir string) (*cluster, error) {
			return startFloor(ctx, cfg.floor, dir, durable)
		}
	}
	etcd := func(n int) func(context.Context, config, string) (*cluster, error) {
		return func(ctx context.Context, cfg config, dir string) (*cluster, error) {
			return startEtcd(ctx, cfg.etcd, dir, n)
		}
	}
	return []*system{
		{key: "raftlock1", name: "raftlock 1 node", nodes: 1, start: raftlock(1), clients: []client{native, setNX, nativeWait}},
		{key: "raftlock3", name: "raftlock 3 nodes", nodes: 3, start: raftlock(3), clients: []client{native, setNX, nativeWait}},
		{key: "redis-always", name: "redis appendfsync always", nodes: 1, start: redisN(1, true), clients: []client{setNX}},
		{key: "redis-none", name: "redis no persistence", nodes: 1, start: redisN(1, false), clients: []client{setNX}},
		{key: "redsync", name: "Redlock, 3× redis appendfsync always", nodes: 3, start: redisN(3, true), clients: []client{redsyncClient}},
		// What many Redlock deployments really run: nothing survives a restart.
		{key: "redsync-none", name: "Redlock, 3× redis no persistence", nodes: 3, start: redisN(3, false), clients: []client{redsyncClient}},
		// The least a Go server with a goroutine per connection does per
		// request (tests/bench/cmd/floor): what raftlock's own cost is read
		// against, and whether a target is within any Go server's reach here.
		{key: "floor-sync", name: "Go floor, fsync per batch", nodes: 1, start: floor(true), clients: []client{native, setNX}},
		{key: "floor-none", name: "Go floor, no persistence", nodes: 1, start: floor(false), clients: []client{native, setNX}},
		// The same over hashicorp/raft, raftlock's raft (-peers): the least a server built on
		// it does per request, replicated as raftlock is.
		{key: "floor-raft1", name: "Go floor over hashicorp/raft, 1 node", nodes: 1, start: floorRaft(1), clients: []client{floorNative, floorSetNX}},
		{key: "floor-raft3", name: "Go floor over hashicorp/raft, 3 nodes", nodes: 3, start: floorRaft(3), clients: []client{floorNative, floorSetNX}},
		{key: "etcd1", name: "etcd 1 member", nodes: 1, start: etcd(1), clients: []client{etcdMutex}},
		{key: "etcd3", name: "etcd 3 members", nodes: 3, start: etcd(3), clients: []client{etcdMutex}},
	}
}

// isRaftlock reports whether sys is raftlock itself rather than a peer.
func (sys *system) isRaftlock() bool { return sys.key == "raftlock1" || sys.key == "raftlock3" }

// ref returns the label of the raftlock row that a peer's row at s is
// compared with: raftlock with as many nodes, natively (queueing with LOCK
// ... WAIT at the hand-off settings), except at the SET NX PX setting, where
// raftlock runs the same recipe. "" for raftlock's rows.
func (sys *system) ref(s setting) string {
	if sys.isRaftlock() {
		return ""
	}
	name := "raftlock 1 node"
	if sys.nodes > 1 {
		name = "raftlock 3 nodes"
	}
	switch {
	case s == setNX50:
		return name + ", " + setNXLabel
	case s.handoff:
		return name + ", " + waitLabel
	}
	return name + ", " + nativeLabel
}

// cell is one measurement: a system driven one way at one setting.
type cell struct {
	client  *client
	setting setting
}

// cells lists sys's cells in the run cfg describes, setting by setting.
func (sys *system) cells(cfg config) []cell {
	var cs []cell
	for _, s := range cfg.settings() {
		for i := range sys.clients {
			cl := &sys.clients[i]
			if slices.Contains(cl.settings, s) || s.handoff && cl.handoff {
				cs = append(cs, cell{client: cl, setting: s})
			}
		}
	}
	return cs
}

// dataDir is where sys keeps its data in round r.
func (sys *system) dataDir(root string, round int) string {
	return filepath.Join(root, sys.key+"-"+strconv.Itoa(round+1))
}
