// Package server is raftlock's client face: it accepts RESP connections, parses and validates
// commands, evaluates them through the node (the small Replica interface of replica.go), and writes
// Redis's replies in RESP2 or RESP3. It keeps one table from node errors to replies (errors.go).
//
// One request's path: conn.serve reads a command, dispatch (dispatch.go) looks it up in the
// table (commands.go), admits it, builds its request (request.go) and decides where it runs
// (forwarded to the leader, forward.go; on a READONLY follower's own table; or through the
// node) and how: alone, or, while earlier commands of its connection are in flight, on a
// worker (pipeline.go) or staged (stage.go). Its handler lives in the file of its family:
// locks.go, strings.go, keys.go, scripting.go (with the overlay a script sees, overlay.go),
// connection.go, introspection.go, cluster.go, admin.go. tracking.go and waiters.go hear the
// node's changes.
//
// Lock order (a lock may be taken while holding those before it, never the reverse):
//
//	conn.baton -> Replica.mu (raftnode: held while a request is evaluated, a script included)
//	           -> tracker.mu (a script's tracked reads) | waiters.mu | watchRegistry.mu | script engine
//	              | hub.mu (a script's PUBSUB) | Server.mu (a script's INFO)
//	Server.mu  (a leaf: the connection set; nothing is taken while holding it)
//	configStore.mu (CONFIG SET) -> notifyMu (notify-keyspace-events) -> the node's Watch
//	serverStats.base (a leaf: CONFIG RESETSTAT's baseline)
//
// The node's change hook (tracker.changed, waiters.changed) runs on raft's apply goroutine after
// Replica.mu is released, so neither hook nests inside it there. Nothing under tracker.mu or
// waiters.mu blocks, logs or writes to a socket.
package server

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/resp"
)

// Config configures a Server. A zero field means the documented default.
type Config struct {
	// Addr is the client listen address. Default 127.0.0.1:6379.
	Addr string
	// NodeID names this node in replies and default lock owners.
	NodeID string
	// MaxClients bounds open connections; one more is told so and closed. Default 10000.
	MaxClients int
	// MaxKeyBytes and MaxValueBytes bound a lock's key and owner value. Default 4096 each: a lock
	// name and an owner token need no more, and the bound keeps a million locks in memory.
	MaxKeyBytes   int
	MaxValueBytes int
	// MaxLeaseMs bounds a lease. Default ten years.
	MaxLeaseMs int64
	// MaxKeys bounds the keys of all databases together: once there are as many, commands that
	// may create keys get Redis's -OOM error (deletes, reads and renewals go on). Default ten
	// million (a few GB of memory on every node); negative: no bound.
	MaxKeys int
	// MaxElements bounds the elements of one collection (fields of a hash, members of a set or
	// sorted set, elements of a list): a command that would grow one past it is refused. Every
	// change of a collection copies it (values are immutable, DESIGN.md §2), so the bound keeps
	// a write's cost small. Default 10000.
	MaxElements int
	// TLS, when set, makes the client port speak TLS (the listening side: certificate, client
	// authentication). PeerTLS, when set, is how a follower dials the leader's client port to
	// forward requests: set it whenever the cluster's client ports speak TLS. nil: plain TCP.
	TLS     *tls.Config
	PeerTLS *tls.Config
	// TLSHandshakeTimeout bounds a client's TLS handshake. Default 10 s.
	TLSHandshakeTimeout time.Duration
	// Redirect makes a follower answer -MOVED <slot> <leader> instead of forwarding requests.
	Redirect bool
	// ForwardTimeout bounds how long a follower waits for the leader's reply to a forwarded
	// request. Default 15 s.
	ForwardTimeout time.Duration
	// LeaderWait bounds how long a request that needs the leader waits for one to be known
	// (right after start, during an election) before it is answered CLUSTERDOWN. Default 1 s,
	// about two election timeouts; negative: no wait.
	LeaderWait time.Duration
	// Pipeline bounds the commands read ahead of execution on one connection. Default 128.
	Pipeline int
	// ReadAheadBytes bounds the bytes of the commands one connection has read but not yet
	// finished: past it the connection stops reading until its commands catch up. A connection
	// with nothing outstanding may always read one command (at most Limits.MaxCommand).
	// Default 8 MiB.
	ReadAheadBytes int
	// TotalReadAheadBytes bounds the same bytes over all connections together, with the reader
	// buffers grown for commands still arriving and MULTI queues (limits.go: reserveNode); only
	// a command of at most 16 KiB from a connection with nothing outstanding may pass it.
	// Default 256 MiB.
	TotalReadAheadBytes int
	// IdleTimeout closes a connection that sent no command for this long (Redis's timeout),
	// except subscribers and blocked clients (a follower's forwarding link is not exempt: the
	// follower dials again). Default 0: never.
	IdleTimeout time.Duration
	// MaxMemory refuses commands that may create keys (Redis's denyoom) with -OOM while the
	// Go heap in use (sampled every MemorySample) is above it (Redis's maxmemory). Default 0:
	// no bound.
	MaxMemory uint64
	// MaxWaitersPerKey bounds the requests blocked on one key (LOCK ... WAIT, BLPOP, BRPOP) on
	// this node, MaxWaiters those blocked on all keys: one more is refused at once with an
	// error instead of waiting. Defaults 10000 and 100000.
	MaxWaitersPerKey int
	MaxWaiters       int
	// LockDelayMs is the lock-delay of a LOCK (SHARED too) or SEMACQUIRE that names none: how
	// long its key stays refused after its lease expires (fsm.Lock.Delay). Default 0: none.
	LockDelayMs uint64
	// MaxTrackingPrefixes bounds the prefixes of one connection's CLIENT TRACKING ... BCAST, and
	// MaxTrackingPrefixBytes their bytes together: every change of a key is matched against
	// every broadcasting connection's prefixes. Defaults 1000 and 64 KiB.
	MaxTrackingPrefixes    int
	MaxTrackingPrefixBytes int
	// MemorySample is how often the heap is measured for MaxMemory. Default 100 ms.
	MemorySample time.Duration
	// OutputLimit is a client's output buffer limit (Redis's client-output-buffer-limit): a
	// connection whose pending pushes (pub/sub messages, invalidations) pass Hard bytes, or
	// stay above Soft bytes for SoftTime, or whose socket accepts nothing for WriteStall, is
	// disconnected with a log line saying why.
	OutputLimit OutputLimit
	// ScriptTimeout bounds how long a Lua script may run: it holds the leader's view (and so
	// every apply) while it runs. Default 1 s, shorter than Redis's 5 s busy limit.
	ScriptTimeout time.Duration
	// Scripts bounds what one script may use and what the replicated script cache may hold.
	Scripts ScriptLimits
	// Limits bound the RESP parser.
	Limits resp.Limits
	// Now is the clock for absolute expiry times (PXAT, EXAT, PEXPIREAT). Default time.Now.
	Now func() time.Time
	// ShiftClock, when set (tests only), lets DEBUG CLOCK-SHIFT ms move the node's lease clock
	// to inject skew and jumps. It returns the clock's total offset.
	ShiftClock func(d time.Duration) time.Duration
	// Logger receives structured logs. Default slog.Default().
	Logger *slog.Logger

	// RequirePass is the default user's password (Redis's requirepass); empty: none.
	RequirePass string
	// ACLFile names a file of users in Redis's aclfile format ("user alice on >pw ~locks:* +@all"),
	// read at New. Replicated ACL SETUSER/DELUSER override its users (acl.go).
	ACLFile string
	// ProtectedMode turns away clients that are not on the loopback interface while the default
	// user needs no password, with Redis's -DENIED message (Redis's protected-mode).
	ProtectedMode bool
	// InsecureHTTP says the node's HTTP port serves every address while no credentials are set
	// (--insecure-http): INFO server shows it (http_insecure:1), so a monitor can alert on it.
	InsecureHTTP bool
	// PeerUser and PeerPassword (Redis's masteruser and masterauth) log a follower's
	// forwarding link in at the leader when PeerPassword is set (PeerUser empty: the default
	// user); without them the link is the leader's default user, or its TLS certificate's
	// (TLSAuthClientsUser). That user must be allowed RAFT FORWARDED (@admin): the link then
	// acts for each client's user, whose permissions the leader checks.
	PeerUser, PeerPassword string
	// TLSAuthClientsUser "CN" (Redis 7.2's tls-auth-clients-user) logs a client that presents
	// a verified certificate in as the ACL user its Subject CN names, when that user exists and
	// is on; "" or "off": a certificate names no user.
	TLSAuthClientsUser string
}

// DefaultConfig returns the defaults.
func DefaultConfig() Config {
	return Config{
		Addr:                   "127.0.0.1:6379",
		NodeID:                 "raftlock",
		MaxClients:             10000,
		MaxKeyBytes:            4096,
		MaxValueBytes:          4096,
		MaxLeaseMs:             10 * 365 * 24 * 3600 * 1000,
		MaxKeys:                10_000_000,
		MaxElements:            10_000,
		Pipeline:               128,
		ReadAheadBytes:         8 << 20,
		TotalReadAheadBytes:    256 << 20,
		MemorySample:           100 * time.Millisecond,
		MaxWaitersPerKey:       10_000,
		MaxWaiters:             100_000,
		MaxTrackingPrefixes:    1000,
		MaxTrackingPrefixBytes: 64 << 10,
		OutputLimit:            DefaultOutputLimit(),
		ForwardTimeout:         15 * time.Second,
		LeaderWait:             time.Second,
		Limits:                 resp.DefaultLimits(),
		ScriptTimeout:          time.Second,
		Scripts:                DefaultScriptLimits(),
		TLSHandshakeTimeout:    10 * time.Second,
		Now:                    time.Now,
		Logger:                 slog.Default(),
	}
}

func (c Config) withDefaults() Config {
	d := DefaultConfig()
	if c.Addr == "" {
		c.Addr = d.Addr
	}
	if c.NodeID == "" {
		c.NodeID = d.NodeID
	}
	if c.MaxClients == 0 {
		c.MaxClients = d.MaxClients
	}
	if c.MaxKeyBytes == 0 {
		c.MaxKeyBytes = d.MaxKeyBytes
	}
	if c.MaxValueBytes == 0 {
		c.MaxValueBytes = d.MaxValueBytes
	}
	if c.MaxLeaseMs == 0 {
		c.MaxLeaseMs = d.MaxLeaseMs
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = d.MaxKeys
	}
	if c.MaxElements == 0 {
		c.MaxElements = d.MaxElements
	}
	if c.Pipeline == 0 {
		c.Pipeline = d.Pipeline
	}
	if c.ReadAheadBytes == 0 {
		c.ReadAheadBytes = d.ReadAheadBytes
	}
	if c.TotalReadAheadBytes == 0 {
		c.TotalReadAheadBytes = d.TotalReadAheadBytes
	}
	if c.MaxWaitersPerKey == 0 {
		c.MaxWaitersPerKey = d.MaxWaitersPerKey
	}
	if c.MaxWaiters == 0 {
		c.MaxWaiters = d.MaxWaiters
	}
	if c.MaxTrackingPrefixes == 0 {
		c.MaxTrackingPrefixes = d.MaxTrackingPrefixes
	}
	if c.MaxTrackingPrefixBytes == 0 {
		c.MaxTrackingPrefixBytes = d.MaxTrackingPrefixBytes
	}
	if c.MemorySample == 0 {
		c.MemorySample = d.MemorySample
	}
	if c.OutputLimit == (OutputLimit{}) {
		c.OutputLimit = d.OutputLimit
	}
	if c.ForwardTimeout == 0 {
		c.ForwardTimeout = d.ForwardTimeout
	}
	if c.TLSHandshakeTimeout == 0 {
		c.TLSHandshakeTimeout = d.TLSHandshakeTimeout
	}
	if c.LeaderWait == 0 {
		c.LeaderWait = d.LeaderWait
	}
	if c.ScriptTimeout == 0 {
		c.ScriptTimeout = d.ScriptTimeout
	}
	if c.Scripts == (ScriptLimits{}) {
		c.Scripts = d.Scripts
	}
	if c.Limits == (resp.Limits{}) {
		c.Limits = d.Limits
	}
	if c.Now == nil {
		c.Now = d.Now
	}
	if c.Logger == nil {
		c.Logger = d.Logger
	}
	return c
}

// Validate reports the first invalid field by name.
func (c Config) Validate() error {
	switch {
	case c.MaxClients < 0:
		return errors.New("server: Config.MaxClients must not be negative")
	case c.MaxKeyBytes < 0 || c.MaxKeyBytes > c.Limits.MaxBulk && c.Limits.MaxBulk > 0:
		return errors.New("server: Config.MaxKeyBytes must be within Limits.MaxBulk")
	case c.MaxValueBytes < 0 || c.MaxValueBytes > c.Limits.MaxBulk && c.Limits.MaxBulk > 0:
		return errors.New("server: Config.MaxValueBytes must be within Limits.MaxBulk")
	case c.MaxLeaseMs < 0:
		return errors.New("server: Config.MaxLeaseMs must not be negative")
	case !validTLSAuthClientsUser(c.TLSAuthClientsUser):
		return errors.New("server: Config.TLSAuthClientsUser must be CN or off")
	case c.Pipeline < 0 || c.Pipeline > 1<<16:
		return errors.New("server: Config.Pipeline out of range 1..65536")
	case c.ReadAheadBytes < 0 || c.TotalReadAheadBytes < 0:
		return errors.New("server: Config.ReadAheadBytes and TotalReadAheadBytes must not be negative")
	case c.IdleTimeout < 0:
		return errors.New("server: Config.IdleTimeout must not be negative")
	case c.LockDelayMs > fsm.MaxDelayMs:
		return errors.New("server: Config.LockDelayMs must be at most fsm.MaxDelayMs")
	case c.MaxWaitersPerKey < 0 || c.MaxWaiters < 0:
		return errors.New("server: Config.MaxWaitersPerKey and MaxWaiters must not be negative")
	case c.MaxTrackingPrefixes < 0 || c.MaxTrackingPrefixBytes < 0:
		return errors.New("server: Config.MaxTrackingPrefixes and MaxTrackingPrefixBytes must not be negative")
	case c.MemorySample < 0:
		return errors.New("server: Config.MemorySample must not be negative")
	case c.OutputLimit.Hard < 0 || c.OutputLimit.Soft < 0 || c.OutputLimit.SoftTime < 0 || c.OutputLimit.WriteStall < 0:
		return errors.New("server: Config.OutputLimit's fields must not be negative")
	}
	return c.Limits.Validate()
}

// Server serves RESP clients.
type Server struct {
	cfg  Config
	node Replica
	// groups is this node's replica of each raft group (groups.go); groups[0] is node.
	groups []Replica
	admin  Admin // nil: RAFT administration is refused
	// groupAdmins is this node's administration of each raft group (Deps.GroupAdmins).
	groupAdmins []Admin
	// mover moves slots between the groups (Deps.Mover; nil: RAFT MOVESLOTS is refused).
	mover SlotMover
	// slotsHaveMoved: a move named one of this node's groups (slotsMoved), once seen: asked on
	// every request of a several-group cluster.
	slotsHaveMoved atomic.Bool
	// layout is the number of groups the cluster was created with (Deps.Layout; len(groups)
	// when it runs no more): the default owner of a slot no table claims.
	layout int
	disk   Disk // nil: INFO reports no disk fault
	// diskDropped: the client connections were closed for a failed disk (dropClientsOnFailedDisk).
	diskDropped atomic.Bool
	// queueWaits are this node's clients waiting in a lock queue (handoff.go).
	queueWaits *queueWaits
	scripts    scriptEngine
	// functions is what this node learnt of the stored function libraries (functions.go).
	functions functionRegistry
	tracker   *tracker
	waiters   *waiters
	hub       *hub
	// lockWatch is who holds which lock on this node, for lost-lock notices (lockwatch.go).
	lockWatch *lockWatch
	// peerSubs asks the other members for their pub/sub counts (pubsubpeers.go).
	peerSubs *peerPubSub
	watches  watchRegistry // the keys this node's connections WATCH (transactions.go)
	// forwards are the requests forwarded to the leader and waiting (forwardwatch.go).
	forwards forwardWatch
	// notifyFlags is the notify-keyspace-events setting (notify.go), set by CONFIG SET.
	notifyFlags atomic.Uint32
	notifyMu    sync.Mutex // serializes setNotifyFlags
	// maxClients is Config.MaxClients until CONFIG SET maxclients changes it.
	maxClients atomic.Int64
	// config is what CONFIG SET kept for the parameters that mean nothing here (config.go).
	config  configStore
	cursors *cursors
	acl     users
	log     *slog.Logger
	start   time.Time
	// bootID makes the default owners of this process's LOCKs unlike any earlier process's.
	bootID string

	ctx    context.Context // cancelled by Close: every connection's context derives from it
	cancel context.CancelFunc

	mu struct {
		sync.Mutex
		ln       net.Listener
		conns    map[*conn]struct{}
		watching bool // watchForwards runs (started by the first Serve)
	}
	nextID atomic.Int64
	wg     sync.WaitGroup
	// workers runs pipelined commands (workers.go).
	workers *workers
	// readAhead is the bytes every connection's read-ahead commands hold (TotalReadAheadBytes).
	readAhead byteBudget
	// usedMemory is the last heap measure; overMemory: it was above MaxMemory (limits.go).
	usedMemory atomic.Uint64
	overMemory atomic.Bool
	// snapshots, digests and backups rate-limit RAFT SNAPSHOT, DIGEST and BACKUP (admin.go).
	snapshots, digests, backups rateGate
	stats                       serverStats
	metrics                     *serverMetrics // latency, refusals by reason, contention (metrics.go)
	closed                      atomic.Bool
}

type serverStats struct {
	connsTotal    atomic.Uint64
	connsRejected atomic.Uint64
	commands      atomic.Uint64
	errors        atomic.Uint64
	grants        atomic.Uint64
	refusals      atomic.Uint64
	releases      atomic.Uint64
	forwarded     atomic.Uint64
	// base is what INFO's counters stood at when CONFIG RESETSTAT last ran: INFO shows what
	// was counted since, while /metrics keeps the whole counts (a Prometheus counter that
	// went back would read as a restart).
	base struct {
		sync.Mutex
		counts statCounts
	}
}

// statCounts are the counters INFO stats shows.
type statCounts struct {
	conns, rejected, commands, errors, grants, refusals, releases uint64
}

// New returns a server for d.Replica, administered through d.Admin, queueing LOCK ... WAIT in
// d.Queue (Deps says what a nil one means).
func New(cfg Config, d Deps) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if d.Replica == nil {
		return nil, errors.New("server: no node")
	}
	switch {
	case len(d.Groups) <= 1:
		d.Groups = []Replica{d.Replica}
	case d.Groups[0] != d.Replica:
		return nil, errors.New("server: Deps.Groups[0] must be Deps.Replica")
	case len(d.Groups) > hashSlots:
		return nil, errors.New("server: more raft groups than hash slots")
	case len(d.GroupAdmins) > 0 && len(d.GroupAdmins) != len(d.Groups):
		return nil, errors.New("server: Deps.GroupAdmins must hold one per group")
	case d.Layout < 0 || d.Layout > max(len(d.Groups), 1):
		return nil, errors.New("server: Deps.Layout must be in [0, len(Deps.Groups)]")
	}
	s := &Server{cfg: cfg, node: d.Replica, groups: d.Groups, admin: d.Admin, groupAdmins: d.GroupAdmins, mover: d.Mover, disk: d.Disk, queueWaits: newQueueWaits(), log: cfg.Logger.With("component", "server"), start: time.Now(),
		bootID: strconv.FormatUint(rand.Uint64()>>16, 36)}
	s.maxClients.Store(int64(cfg.MaxClients))
	s.queueWaits.bySlot = len(d.Groups) > 1
	s.layout = len(d.Groups)
	if d.Layout > 0 && d.Layout < len(d.Groups) {
		// The groups past the layout own no default range: only the tables say who serves what.
		s.layout = d.Layout
		s.slotsHaveMoved.Store(true)
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.workers = newWorkers(s)
	s.metrics = newServerMetrics()
	s.scripts = newScriptEngine(cfg)
	s.tracker = newTracker(s.log)
	s.waiters = newWaiters(cfg.MaxWaitersPerKey, cfg.MaxWaiters)
	s.hub = newHub(s.log)
	s.lockWatch = newLockWatch()
	s.peerSubs = newPeerPubSub(s)
	s.cursors = newCursors()
	seed, err := seedUsers(cfg)
	if err != nil {
		return nil, err
	}
	s.acl.seed = seed
	s.acl.cur.Store(&seed)
	s.mu.conns = make(map[*conn]struct{})
	s.watch(false)
	s.reloadUsers() // after the hook is set: a change racing it is read by one or the other
	s.readAhead.limit = int64(cfg.TotalReadAheadBytes)
	s.snapshots.every, s.digests.every, s.backups.every = snapshotEvery, digestEvery, backupEvery
	if cfg.MaxMemory > 0 {
		s.measureMemory()
		s.wg.Add(1)
		go s.sampleMemory()
	}
	return s, nil
}

// watch gives every group's replica the server's hooks (watchers).
func (s *Server) watch(keyEvents bool) {
	for g, rep := range s.groups {
		rep.Watch(s.watchers(g, keyEvents))
	}
}

// watchers are the hooks the server gives group g's replica: what an applied batch changed
// wakes invalidations and LOCK ... WAIT waiters, its messages reach this node's subscribers
// (each subscriber hears what the group's log did not hold when it subscribed), and the ACL
// users are read again when they change. keyEvents adds the keyspace notifications' hook.
func (s *Server) watchers(g int, keyEvents bool) node.Watchers {
	w := node.Watchers{
		Changed: func(keys [][]byte) {
			s.tracker.changed(keys)
			s.waiters.changed(keys)
		},
		Published: func(at node.LogPosition, channel, message []byte, shard bool) int {
			return s.hub.deliver(g, at, channel, message, shard)
		},
		LockEnded: func(at node.LogPosition, key []byte, token fsm.Token, how node.LockEnd) {
			s.lockEnded(g, at, key, token, how)
		},
		Waited: func(seq fsm.Token, key []byte, token fsm.Token) {
			s.queueWaits.waited(seq, key, token)
		},
		LocksWatched: s.locksWatched,
		LocksFlushed: func(db []byte) { s.locksFlushed(g, db) },
		Restored:     func() { s.restored(g) },
		UsersChanged: s.reloadUsers,
	}
	if keyEvents {
		w.KeyEvent = func(at node.LogPosition, key []byte, ev node.KeyEvent) {
			s.notifyKey(g, at, key, ev)
		}
	}
	return w
}

// Listen binds cfg.Addr, speaking TLS when cfg.TLS is set. Serve then accepts on it.
func (s *Server) Listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", s.cfg.Addr, err)
	}
	if s.cfg.TLS != nil {
		ln = tls.NewListener(ln, s.cfg.TLS)
	}
	return ln, nil
}

// Serve accepts connections on ln until Close. It returns nil after Close.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	closed := s.closed.Load() // Close sets it before it takes s.mu to read s.mu.ln
	if !closed {
		s.mu.ln = ln
		if !s.mu.watching {
			// Under s.mu, after closed was read: Close's wait cannot have begun.
			s.mu.watching = true
			s.wg.Add(1)
			go s.watchForwards()
		}
	}
	s.mu.Unlock()
	if closed {
		ln.Close()
		return nil
	}
	s.log.Info("serving clients", "addr", ln.Addr().String())
	var backoff time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			if s.closed.Load() {
				return nil
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || errors.Is(err, errTooManyFiles) {
				backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
				s.log.Warn("accept failed; backing off", "err", err, "backoff", backoff)
				time.Sleep(backoff)
				continue
			}
			return fmt.Errorf("accept: %w", err)
		}
		backoff = 0
		s.accept(nc)
	}
}

func (s *Server) accept(nc net.Conn) {
	s.stats.connsTotal.Add(1)
	if s.protectedRefuses(nc.RemoteAddr()) {
		s.stats.connsRejected.Add(1)
		nc.SetWriteDeadline(time.Now().Add(time.Second))
		nc.Write([]byte(protectedModeDenied))
		nc.Close()
		return
	}
	c := newConn(s, nc)
	s.mu.Lock()
	if s.closed.Load() {
		// Close may be waiting on s.wg already: nothing more may join it.
		s.mu.Unlock()
		c.cancel()
		nc.Close()
		return
	}
	if int64(len(s.mu.conns)) >= s.maxClients.Load() {
		s.wg.Add(1)
		s.mu.Unlock()
		s.stats.connsRejected.Add(1)
		refuse := func() {
			defer s.wg.Done()
			c.out.Error("ERR max number of clients reached")
			c.out.Flush()
			nc.Close()
		}
		if _, ok := nc.(*tls.Conn); ok {
			// Writing runs the handshake first: not on the accept loop, and not for ever.
			nc.SetDeadline(time.Now().Add(s.cfg.TLSHandshakeTimeout))
			go refuse()
			return
		}
		refuse()
		return
	}
	s.mu.conns[c] = struct{}{}
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		if !c.handshake() {
			c.cancel()
			nc.Close()
		} else {
			c.serve()
		}
		s.mu.Lock()
		delete(s.mu.conns, c)
		s.mu.Unlock()
	}()
}

// handshake runs a TLS connection's handshake, bounded by TLSHandshakeTimeout, before its
// first command is read; it reports whether the connection may go on (always, without TLS).
func (c *conn) handshake() bool {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return true
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.s.cfg.TLSHandshakeTimeout)
	defer cancel()
	if err := tc.HandshakeContext(ctx); err != nil {
		c.s.log.Debug("TLS handshake failed", "remote", tc.RemoteAddr().String(), "err", err)
		return false
	}
	c.certLogin(tc.ConnectionState())
	return true
}

// Close stops accepting, closes every connection and waits for their goroutines. Requests
// already proposed finish first (their outcome still matters for ghost-lock cleanup).
func (s *Server) Close() error {
	if s.closed.Swap(true) {
		return nil
	}
	s.mu.Lock()
	ln := s.mu.ln
	conns := make([]*conn, 0, len(s.mu.conns))
	for c := range s.mu.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	// Closed outside s.mu: no socket I/O under a lock. A connection accepted meanwhile sees
	// closed and turns itself away.
	var err error
	if ln != nil {
		err = ln.Close()
	}
	for _, c := range conns {
		c.nc.Close()
	}
	s.cancel()
	s.wg.Wait()
	s.scripts.Close()
	s.peerSubs.close()
	return err
}

// connections returns the open connections, in the order they were accepted.
func (s *Server) connections() []*conn {
	s.mu.Lock()
	out := make([]*conn, 0, len(s.mu.conns))
	for c := range s.mu.conns {
		out = append(out, c)
	}
	s.mu.Unlock()
	slices.SortFunc(out, func(a, b *conn) int { return cmp.Compare(a.id, b.id) })
	return out
}

// Clients is the number of open connections.
func (s *Server) Clients() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mu.conns)
}

// errTooManyFiles is accept's error when the process is out of descriptors: wait, don't quit.
var errTooManyFiles = syscall.EMFILE
