// Package ops is raftlock's HTTP surface for operators: /livez and /readyz (health probes for
// load balancers, systemd and Kubernetes), /metrics (the node's and the server's typed figures in
// the Prometheus text format), the status page at / with its /status.json and /locks.json, and,
// when asked for, /debug/pprof/. The status page and the profiles are behind HTTP basic auth of
// an @admin user once the node's clients must authenticate; until then only loopback clients are
// served (protected mode, protect.go). It is off unless an address is given.
package ops

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/raftlock/raftlock/node"
)

// Stats is what the HTTP surface reads: the node's typed figures.
type Stats interface{ Stats() node.Stats }

// Group is one raft group's figures and store probe (Config.Groups), and the hash slots it
// serves now ("first-last" ranges), shown on the status page: slots move between groups.
type Group struct {
	Stats Stats
	Probe Probe
	Slots func() string
}

// Users is who may read the profiles: the node's ACL users (server.Server).
type Users interface {
	// AuthRequired reports whether clients must authenticate (a password on the default user,
	// or ACL users); asked on every request.
	AuthRequired() bool
	// AdminAuth reports whether user (the default user if empty) and pass open a user who may
	// run every @admin command.
	AdminAuth(user, pass string) bool
}

// Server serves the operator's HTTP surface on one address until Close.
type Server struct {
	ln    net.Listener
	http  *http.Server
	done  chan struct{} // closed when Serve returned
	stats httpStats
}

// Config configures the operator's HTTP surface.
type Config struct {
	// Addr is the listen address.
	Addr string
	// Pprof also serves Go's profiles under /debug/pprof/. Off by default: profiles expose
	// internals (and a CPU profile or trace costs the node while it runs).
	Pprof bool
	// Probe, if not nil, is asked by /readyz whether the store takes a durable write.
	Probe Probe
	// Users, if not nil, guards the status page and /debug/pprof/ with HTTP basic auth whenever
	// Users.AuthRequired: the credentials of a user with @admin. /metrics stays open (figures,
	// no keys or owners).
	Users Users
	// Server, if not nil, adds the client face's figures to /metrics and the status page.
	Server ServerStats
	// Members, if not nil, lists the members with their figures on the status page.
	Members Members
	// Locks, if not nil, serves the status page's locks view (/locks.json).
	Locks Locks
	// Groups, for a node of several raft groups (docs/groups.md), is every group's figures and
	// store probe, group 0 (src, Probe) first: /readyz judges each, and /metrics adds a
	// raftlock_group_* series per group. Nil for a node of one group.
	Groups []Group
	// Insecure serves addresses other than loopback while no credentials are set, and lets the
	// surface listen on such an address then (protect.go). Without it, Start refuses a
	// non-loopback address while Users needs no authentication, and requests from other
	// addresses get 403 whenever it needs none.
	Insecure bool
}

// Start listens on cfg.Addr and serves /metrics from src (and /debug/pprof/ if cfg.Pprof). An
// address other than loopback is refused, before it is bound, while cfg.Users needs no
// credentials, unless cfg.Insecure (protect.go). Even then it should be a private one: basic
// auth crosses in the clear.
func Start(cfg Config, src Stats, logger *slog.Logger) (*Server, error) {
	if err := checkExposure(cfg.Addr, cfg.Users, cfg.Insecure); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("metrics address: %w", err)
	}
	if err := checkExposure(ln.Addr().String(), cfg.Users, cfg.Insecure); err != nil {
		ln.Close()
		return nil, err
	}
	if cfg.Insecure && !loopbackHostPort(ln.Addr().String()) {
		logger.Warn("INSECURE HTTP: --insecure-http serves the status page (key names, member addresses), /metrics and, "+
			"with --pprof, the profiles to every address that reaches it while no credentials are set", "addr", ln.Addr().String())
	}
	s := &Server{ln: ln, done: make(chan struct{})}
	mux := http.NewServeMux()
	mux.HandleFunc("/metrics", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		WriteMetrics(w, src.Stats())
		writeGroupMetrics(w, cfg.Groups)
		var respFailures uint64
		if cfg.Server != nil {
			ss := cfg.Server.ServerStats()
			WriteServerMetrics(w, ss)
			respFailures = ss.AuthFailures
		}
		writeAuthFailures(w, respFailures, s.stats.authFailures.Load())
		writeProcessMetrics(w, readProcess("/proc/self"))
	})
	status := newStatusSource(src, cfg.Server, cfg.Members)
	status.groups = cfg.Groups
	if cfg.Groups == nil {
		cfg.Groups = []Group{{Stats: src, Probe: cfg.Probe}}
	}
	serveHealth(mux, cfg.Groups)
	guard := func(h http.HandlerFunc) http.Handler { return adminOnly(cfg.Users, &s.stats.authFailures, h) }
	serveStatus(mux, guard, status)
	if cfg.Locks != nil {
		serveLocks(mux, guard, cfg.Users, cfg.Locks, time.Now)
	}
	if cfg.Pprof {
		mux.Handle("/debug/pprof/", guard(pprof.Index))
		mux.Handle("/debug/pprof/cmdline", guard(pprof.Cmdline))
		mux.Handle("/debug/pprof/profile", guard(pprof.Profile))
		mux.Handle("/debug/pprof/symbol", guard(pprof.Symbol))
		mux.Handle("/debug/pprof/trace", guard(pprof.Trace))
	}
	s.http = &http.Server{Handler: protect(cfg.Users, cfg.Insecure, mux), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		defer close(s.done)
		if err := s.http.Serve(ln); err != nil && err != http.ErrServerClosed {
			logger.Warn("metrics listener failed", "err", err)
		}
	}()
	return s, nil
}

// adminOnly serves h to anyone while users needs no authentication (or is nil), and otherwise
// only to a request whose basic auth credentials users.AdminAuth accepts; others get 401 and
// the challenge, and count in failures. Basic auth sends the password in the clear: use TLS in
// front, or a private address.
func adminOnly(users Users, failures *atomic.Uint64, h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if users != nil && users.AuthRequired() {
			user, pass, ok := r.BasicAuth()
			if !ok || !users.AdminAuth(user, pass) {
				failures.Add(1)
				w.Header().Set("WWW-Authenticate", `Basic realm="raftlock", charset="UTF-8"`)
				http.Error(w, "401 unauthorized: the credentials of a user with @admin are required", http.StatusUnauthorized)
				return
			}
		}
		h(w, r)
	})
}

// Addr is the address the surface listens on.
func (s *Server) Addr() net.Addr { return s.ln.Addr() }

// Close stops serving and waits for the serving goroutine. It is idempotent.
func (s *Server) Close() error {
	err := s.http.Close()
	<-s.done
	return err
}

// writeGroupMetrics writes a series per raft group of a node of several (none for one).
func writeGroupMetrics(w io.Writer, groups []Group) {
	if len(groups) < 2 {
		return
	}
	stats := make([]node.Stats, len(groups))
	for g, gr := range groups {
		stats[g] = gr.Stats.Stats()
	}
	series := []struct {
		name, kind, help string
		value            func(s node.Stats) float64
	}{
		{"group_is_leader", "gauge", "1 when this node leads the raft group.", func(s node.Stats) float64 { return b2f(s.State == "Leader") }},
		{"group_ready", "gauge", "1 when this node leads the raft group and serves it.", func(s node.Stats) float64 { return b2f(s.Ready) }},
		{"group_term", "gauge", "The raft group's current term.", func(s node.Stats) float64 { return float64(s.Term) }},
		{"group_commit_index", "gauge", "The raft group's commit index.", func(s node.Stats) float64 { return float64(s.CommitIndex) }},
		{"group_applied_index", "gauge", "The raft group's last applied index.", func(s node.Stats) float64 { return float64(s.AppliedIndex) }},
		{"group_locks_held", "gauge", "Locks in the raft group's table.", func(s node.Stats) float64 { return float64(s.Locks) }},
	}
	for _, m := range series {
		fmt.Fprintf(w, "# HELP raftlock_%s %s\n# TYPE raftlock_%s %s\n", m.name, m.help, m.name, m.kind)
		for g, s := range stats {
			fmt.Fprintf(w, "raftlock_%s{group=\"%d\"} %g\n", m.name, g, m.value(s))
		}
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// WriteMetrics writes the node's figures in the Prometheus text format.
func WriteMetrics(w io.Writer, s node.Stats) {
	metric := func(name, kind, help string, v float64) {
		fmt.Fprintf(w, "# HELP raftlock_%s %s\n# TYPE raftlock_%s %s\nraftlock_%s %g\n", name, help, name, kind, name, v)
	}
	metric("ready", "gauge", "1 when this node leads and serves.", b2f(s.Ready))
	metric("is_leader", "gauge", "1 when this node is the raft leader.", b2f(s.State == "Leader"))
	metric("term", "gauge", "Current raft term.", float64(s.Term))
	metric("voters", "gauge", "Voting members.", float64(s.Voters))
	metric("last_index", "gauge", "Last raft log index.", float64(s.LastIndex))
	metric("commit_index", "gauge", "Raft commit index.", float64(s.CommitIndex))
	metric("applied_index", "gauge", "Last applied raft index.", float64(s.AppliedIndex))
	metric("last_snapshot_index", "gauge", "Index of the last snapshot.", float64(s.LastSnapshot))
	metric("locks_held", "gauge", "Locks in the table.", float64(s.Locks))
	metric("leases_armed", "gauge", "Lease timers armed on this node.", float64(s.Leases))
	metric("pending_keys", "gauge", "Keys with a proposal in flight.", float64(s.PendingKeys))
	metric("proposals_total", "counter", "Log entries proposed by this node as leader (one per request that writes).", float64(s.Proposals))
	metric("failed_proposals_total", "counter", "Proposals that did not commit.", float64(s.FailedProps))
	metric("aborted_entries_total", "counter", "Entries of several commands that applied as nothing: a guard failed.", float64(s.Aborted))
	metric("stale_snapshots_refused_total", "counter", "Snapshot installs refused as older than the committed table (a stale install).", float64(s.StaleInstalls))
	metric("verified_reads_total", "counter", "Reads and refusals answered after a leadership check.", float64(s.Reads))
	metric("verify_rounds_total", "counter", "Leadership checks (batched over reads).", float64(s.VerifyRounds))
	metric("leases_expired_total", "counter", "Leases ended by a committed Expire.", float64(s.Expired))
	metric("ghost_locks_released_total", "counter", "Locks released because their client hung up before the grant.", float64(s.GhostReleases))
	metric("store_first_index", "gauge", "First raft log index kept in the store.", float64(s.Store.FirstIndex))
	metric("store_last_index", "gauge", "Last raft log index in the store.", float64(s.Store.LastIndex))
	metric("store_snapshots", "gauge", "Snapshots kept in the store.", float64(s.Store.Snapshots))
	writeNodeHistograms(w, s)
}
