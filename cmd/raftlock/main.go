// Command raftlock runs one raftlock node: a Redis-protocol lock server whose every lock change
// is replicated through Raft and persisted in pebble. With no flags it starts a single-node
// cluster with data in ./raftlock-data, clients on 127.0.0.1:6379 and raft on 127.0.0.1:7379.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/certs"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/locks"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/ops"
	"github.com/raftlock/raftlock/raftnode"
	"github.com/raftlock/raftlock/server"
	"github.com/raftlock/raftlock/store"
)

// setupWait bounds how long a new single-node cluster waits for its setup entries before it
// serves (cluster.Member.AwaitSetup): they take milliseconds; a node whose disk stalls longer
// serves anyway.
const setupWait = 10 * time.Second

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "raftlock:", err)
		os.Exit(1)
	}
}

// run starts the node and serves until ctx ends, then shuts down in order: stop accepting
// clients, hand off leadership, stop raft and its transport, close the store. `raftlock
// recover ...` runs the offline recovery instead (recover.go); `raftlock backup ...` and
// `raftlock restore ...` take and restore backups (backup.go); `raftlock cert ...` makes
// certificates (cert.go); `raftlock version` (or --version) prints the version (version.go).
func run(ctx context.Context, args []string, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "recover" {
		return runRecover(args[1:], stderr)
	}
	if len(args) > 0 && args[0] == "backup" {
		return runBackup(ctx, args[1:], os.Stdout)
	}
	if len(args) > 0 && args[0] == "restore" {
		return runRestore(args[1:], stderr)
	}
	if len(args) > 0 && args[0] == "cert" {
		return runCert(args[1:], os.Stdout)
	}
	if len(args) > 0 && (args[0] == "version" || args[0] == "--version" || args[0] == "-version") {
		return runVersion(os.Stdout)
	}
	opts, err := parseOptions(args, os.Getenv)
	if err != nil {
		return err
	}
	if opts.testClock && !testClockBuilt {
		return errNoTestClock // before anything starts
	}
	if opts.testDiskFaults && !testClockBuilt {
		return errNoTestDiskFaults
	}
	if opts.testMoveStop != "" && !testClockBuilt {
		return errors.New("--test-move-stop: this binary was built without the raftlock_testclock tag; it is for tests only")
	}
	logger := newLogger(stderr, opts.logLevel, opts.logFormat)
	slog.SetDefault(logger)
	stopMemoryLimit := setMemoryLimit(opts, os.Getenv("GOMEMLIMIT"))
	defer stopMemoryLimit()
	logger.Info("go memory limit", "bytes", debug.SetMemoryLimit(-1), "flag", opts.memoryLimitFlag(), "gomemlimit_env", os.Getenv("GOMEMLIMIT"))

	if err := os.MkdirAll(opts.dir, 0o750); err != nil {
		return fmt.Errorf("data dir: %w", err)
	}
	storeCfg := store.Config{Dir: filepath.Join(opts.dir, "raft"), Logger: logger}
	if opts.testDiskFaults {
		logger.Warn("--test-disk-faults: SIGUSR2 fails this node's disk; for tests only")
		var stopFaults func()
		storeCfg.FS, stopFaults = failingDisk(logger)
		defer stopFaults()
	}
	hadState, err := dirHasRaftState(storeCfg.Dir)
	if err != nil {
		return err
	}
	clientTLS, raftTLS, err := loadTLS(opts)
	if err != nil {
		return err
	}
	stopReload := reloadOnHangup(logger, map[string]*certs.Source{"client": clientTLS, "raft": raftTLS})
	defer stopReload()
	// The node's certificate on the other end of a node-to-node call on the client port must
	// name a member (or any node while this one joins): set once the member exists, before it
	// dials anyone.
	var self atomic.Pointer[cluster.Member]
	isPeer := func(id string) error {
		if m := self.Load(); m != nil {
			return m.IsPeer(id)
		}
		return nil
	}
	var peerTLS *tls.Config
	if clientTLS != nil {
		peerTLS = clientTLS.PeerConfig(isPeer)
	}
	var joining func() (node.PeerState, error)
	if opts.join != "" {
		joining = func() (node.PeerState, error) {
			return askJoinState(ctx, opts.join, func(ctx context.Context, addr string) (node.PeerState, error) {
				return cluster.AskState(ctx, addr, peerTLS, opts.masterUser, opts.masterAuth)
			}, logger)
		}
	}
	groupsRec, err := resolveGroups(opts.dir, opts.groups, hadState, joining)
	if err != nil {
		if ctx.Err() != nil {
			logger.Info("stopped before the member to join through answered")
			return nil // stopped (SIGTERM) while it waited: a clean stop
		}
		return err
	}
	groups := groupsRec.Groups
	gst, err := store.OpenGroups(storeCfg, groups)
	if err != nil {
		return err
	}
	defer gst.Close()
	st := gst.Store(0)
	transCfg := cluster.TransportConfig{Bind: opts.raftAddr, Advertise: opts.raftAdvertise, TLS: raftTLS, Logger: logger, Layout: groupsRec.Layout}
	var transports []*cluster.Transport
	if groups == 1 {
		trans, err := cluster.NewTransport(transCfg)
		if err != nil {
			return err
		}
		transports = []*cluster.Transport{trans}
	} else if transports, err = cluster.NewGroupTransports(transCfg, groups); err != nil {
		return err
	}
	trans := transports[0]
	closeTransports := func(from int) {
		for _, t := range transports[from:] {
			t.Close()
		}
	}
	snaps := st.Snapshots(2)
	existing, err := raft.HasExistingState(st, st, snaps)
	if err != nil {
		closeTransports(0)
		return fmt.Errorf("inspect data dir: %w", err)
	}
	clock := &testClock{}
	ccfg := cluster.Config{Core: raftnode.DefaultConfig()}
	ccfg.Core.Now = clock.Now
	ccfg.Core.ID = opts.id
	ccfg.RaftAddr = string(trans.LocalAddr())
	ccfg.ClientAddr = opts.advertise
	// A new node bootstraps a cluster (alone, or with --peers) unless it joins one; a node
	// with data resumes and ignores both (groupStart).
	ccfg.Bootstrap, ccfg.Peers = groupStart(groupsRec, 0, opts.join, opts.peers)
	ccfg.Join = opts.join
	ccfg.Core.SnapshotThreshold = opts.snapshotThreshold
	ccfg.Core.TrailingLogs = opts.trailingLogs
	ccfg.Core.SnapshotInterval = opts.snapshotInterval
	ccfg.Core.NoGroupCommit = !opts.groupCommit
	ccfg.Core.Logger = logger
	ccfg.ClientTLS = peerTLS
	ccfg.InsecureRaft = raftTLS == nil && opts.insecureRaft
	ccfg.PeerUser, ccfg.PeerPassword = opts.masterUser, opts.masterAuth
	policy := locks.New(locks.Config{ApplyTimeout: ccfg.Core.ApplyTimeout, Logger: logger})
	ccfg.Core.Locks = policy
	ccfg.Core.Groups, ccfg.Core.Layout = groups, groupsRec.Layout
	health := st.Health
	var siblings diskSiblings
	if groups > 1 {
		ccfg.Core.DiskFailed = siblings.stopAll
		// The groups' logs share the disk: a fault one group's log met is every group's, so
		// none of them writes to pebble (which ends the process on a failed write) after it.
		health = func() error {
			for g := range groups {
				if err := gst.Store(g).Health(); err != nil {
					return err
				}
			}
			return nil
		}
	}
	member, err := cluster.Start(ccfg, raftnode.Stores{Log: st, Stable: st, Snapshots: snaps, Health: health}, trans)
	if err != nil {
		closeTransports(1)
		return err
	}
	defer member.Close()
	self.Store(member)
	stopPlans := make(chan struct{})
	defer close(stopPlans)
	go recordPlans(opts.dir, groupsRec, member.Core(), logger, stopPlans)
	node := member.Core()
	siblings.add(node)
	// The other groups' members: the same node under the same ID, each with its own store,
	// transport and lock policy. Client addresses are announced to group 0 alone
	// (addressedReplica).
	reps := []server.Replica{node}
	members := []*cluster.Member{member}
	for g := 1; g < groups; g++ {
		gcfg := ccfg
		gcfg.ClientAddr = ""
		gcfg.AddressBook = member
		// A joining node joins through group 0: the leader adds it to every group
		// (cluster.GroupsAdmin), so the other groups wait to be contacted.
		gcfg.Join = ""
		gcfg.Core.Group = g
		gcfg.Core.Logger = logger.With("group", g)
		gcfg.Core.Locks = locks.New(locks.Config{ApplyTimeout: gcfg.Core.ApplyTimeout, Logger: gcfg.Core.Logger})
		gcfg.Bootstrap, gcfg.Peers = groupStart(groupsRec, g, opts.join, opts.peers)
		gs := gst.Store(g)
		m, err := cluster.Start(gcfg, raftnode.Stores{Log: gs, Stable: gs, Snapshots: gs.Snapshots(2), Health: health}, transports[g])
		if err != nil {
			closeTransports(g + 1)
			return fmt.Errorf("raft group %d: %w", g, err)
		}
		defer m.Close()
		siblings.add(m.Core())
		members = append(members, m)
		reps = append(reps, &addressedReplica{Replica: m.Core(), book: member})
	}
	stopBalancer := func() {}
	var mover *cluster.SlotMover
	if groups > 1 {
		balancer := cluster.StartBalancer(members, cluster.BalanceConfig{Logger: logger})
		stopBalancer = sync.OnceFunc(balancer.Stop)
		defer stopBalancer()
		mover = cluster.StartSlotMover(members, logger)
		if opts.testMoveStop != "" {
			logger.Warn("--test-move-stop: the slot moves this node runs stop after their " + opts.testMoveStop + "; for tests only")
			mover.StopAfter(map[string]fsm.Kind{"freeze": fsm.KindFreezeSlots, "import": fsm.KindImportSlots}[opts.testMoveStop])
		}
		defer mover.Stop()
		logger.Info("raft groups", "groups", groups)
	}
	if ccfg.InsecureRaft {
		logger.Warn("INSECURE RAFT: --insecure-raft and no raft mutual TLS on a raft address that is not loopback: anyone who "+
			"reaches it can rewrite this cluster's locks, grant them, or stop it. Set --raft-tls-* (docs/security.md)",
			"raft", ccfg.RaftAddr)
	}

	scfg := server.DefaultConfig()
	scfg.Addr = opts.addr
	scfg.NodeID = opts.id
	scfg.Redirect = opts.redirect
	scfg.LeaderWait = opts.leaderWait
	scfg.MaxKeys = opts.maxKeys
	scfg.MaxElements = opts.maxElements
	scfg.MaxClients = opts.maxClients
	scfg.IdleTimeout = opts.idleTimeout
	scfg.MaxMemory = opts.maxMemory
	scfg.LockDelayMs = opts.lockDelayMs
	scfg.Now = clock.Now
	if opts.testClock {
		logger.Warn("--test-clock: DEBUG CLOCK-SHIFT can move this node's lease clock; for tests only")
		scfg.ShiftClock = clock.Shift
	}
	scfg.Logger = logger
	if clientTLS != nil {
		scfg.TLS = clientTLS.ServerConfig(opts.tlsAuthClients)
		scfg.PeerTLS = clientTLS.PeerConfig(isPeer)
	}
	scfg.RequirePass, scfg.ACLFile, scfg.ProtectedMode = opts.requirePass, opts.aclFile, opts.protectedMode
	scfg.InsecureHTTP = opts.insecureHTTP && opts.metricsAddr != ""
	scfg.PeerUser, scfg.PeerPassword = opts.masterUser, opts.masterAuth
	scfg.TLSAuthClientsUser = opts.tlsAuthClientsUser
	deps := server.Deps{Replica: node, Admin: member, Disk: node, Groups: reps, Layout: groupsRec.Layout}
	if groups > 1 {
		deps.Admin = cluster.NewGroupsAdmin(members)
		deps.Mover = mover
		for _, m := range members {
			deps.GroupAdmins = append(deps.GroupAdmins, m)
		}
	}
	srv, err := server.New(scfg, deps)
	if err != nil {
		return err
	}
	// A new single-node cluster writes its setup entries before its first client's: see
	// AwaitSetup. A node that cannot in this time serves anyway, and says so.
	setupCtx, setupDone := context.WithTimeout(ctx, setupWait)
	err = member.AwaitSetup(setupCtx)
	setupDone()
	switch {
	case ctx.Err() != nil:
		return srv.Close() // stopped (SIGTERM) before it served; the member closes as deferred
	case err != nil:
		logger.Warn("the new cluster's setup entries are not committed yet; serving clients anyway", "waited", setupWait)
	}
	ln, err := srv.Listen()
	if err != nil {
		return err
	}
	logger.Info("raftlock started", "version", server.Version, "id", opts.id, "addr", ln.Addr().String(), "raft", ccfg.RaftAddr, "dir", opts.dir,
		"resumed", existing, "tls", clientTLS != nil, "raft_tls", raftTLS != nil, "raft_insecure", ccfg.InsecureRaft)

	var opsGroups []ops.Group // nil for one group
	if groups > 1 {
		for g, m := range members {
			opsGroups = append(opsGroups, ops.Group{Stats: m.Core(), Probe: m.ProbeStore, Slots: func() string { return srv.GroupSlots(g) }})
		}
	}
	var web *ops.Server
	if opts.metricsAddr != "" {
		if web, err = ops.Start(ops.Config{Addr: opts.metricsAddr, Pprof: opts.pprof, Users: srv, Probe: member.ProbeStore, Server: srv, Members: member, Locks: srv, Insecure: opts.insecureHTTP,
			Groups: opsGroups}, node, logger); err != nil {
			srv.Close()
			return err
		}
		logger.Info("metrics served", "addr", "http://"+web.Addr().String()+"/metrics", "pprof", opts.pprof)
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	// Under systemd's Type=notify: READY=1 once the node serves as /readyz judges it,
	// STOPPING=1 as it begins to shut down (notify.go).
	sd := sdNotifier{socket: os.Getenv("NOTIFY_SOCKET"), log: logger}
	stopReady := sd.notifyWhenReady(func() (bool, []string) {
		if opsGroups != nil {
			return ops.ReadyGroups(opsGroups)
		}
		return ops.Ready(node.Stats(), member.ProbeStore)
	})
	select {
	case <-ctx.Done():
		logger.Info("shutting down")
	case <-member.Removed(): // group 0's: a removal reaches it last (cluster.GroupsAdmin)
		logger.Warn("removed from the cluster; shutting down")
	case err = <-served:
		logger.Error("client listener failed", "err", err)
	}
	stopReady()
	sd.notify("STOPPING=1", "STATUS=shutting down")
	if web != nil {
		web.Close()
	}
	if cerr := srv.Close(); cerr != nil && !errors.Is(cerr, net.ErrClosed) {
		logger.Warn("closing client listener", "err", cerr)
	}
	stopBalancer() // no leadership transfer starts while the groups stop
	for g, m := range members {
		if cerr := m.Close(); cerr != nil {
			logger.Warn("stopping raft", "group", g, "err", cerr)
		}
	}
	if cerr := st.Close(); cerr != nil {
		logger.Warn("closing store", "err", cerr)
	}
	logger.Info("stopped")
	return err
}

func newLogger(w io.Writer, level, format string) *slog.Logger {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		lv = slog.LevelInfo
	}
	o := &slog.HandlerOptions{Level: lv}
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}
