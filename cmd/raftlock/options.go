package main

import (
	"bufio"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/certs"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/server"
)

// options are the node's settings. Each comes from, in order of precedence: a flag, the
// environment (RAFTLOCK_<NAME>, dashes as underscores), the --config file (name = value lines),
// the default.
type options struct {
	id            string
	dir           string
	addr          string
	advertise     string
	raftAddr      string
	raftAdvertise string
	peers         []cluster.Peer
	join          string
	redirect      bool
	testClock     bool
	// testDiskFaults: SIGUSR2 fails the store's disk (test builds only, diskfault_on.go).
	testDiskFaults bool
	// testMoveStop: a slot move this node runs stops after this step ("freeze" or "import"),
	// left for the next leader of its source group (test builds only).
	testMoveStop string
	// Snapshot tuning; zero keeps raftnode's defaults. Tests lower them to force log
	// compaction and snapshot installs.
	snapshotThreshold uint64
	trailingLogs      uint64
	snapshotInterval  time.Duration
	// leaderWait bounds how long a request waits for a leader before CLUSTERDOWN (0: the
	// server's default; negative: none).
	leaderWait time.Duration
	// groupCommit is false for raftnode's Config.NoGroupCommit.
	groupCommit bool
	// groups is --groups: the raft groups of a new cluster (0: as the data directory
	// records, 1 for a new one; groups.go).
	groups int
	// maxKeys bounds the keys of all databases (0: the server's default; negative: none).
	maxKeys int
	// maxElements bounds the elements of one hash, set, sorted set or list.
	maxElements int
	logLevel    string
	logFormat   string
	// metricsAddr, when set, serves /metrics over HTTP (and /debug/pprof/ with pprof).
	metricsAddr string
	// TLS (Redis's names): with tls.Cert and tls.Key the client port speaks TLS, clients'
	// certificates as tlsAuthClients says; with raftTLS's three files the raft transport is
	// mutual TLS.
	tls            certs.Files
	tlsAuthClients tls.ClientAuthType
	raftTLS        certs.Files
	// insecureRaft lets a node whose raft address is not loopback start without raft mutual
	// TLS (checkRaftSecurity).
	insecureRaft bool
	// tlsAuthClientsUser is "CN" (a verified client certificate logs in as the ACL user its
	// Subject CN names, Redis 7.2's tls-auth-clients-user) or "off".
	tlsAuthClientsUser string

	// Resource bounds (DESIGN.md §10), named as Redis names them.
	// maxClients bounds open client connections (0: the server's default).
	maxClients int
	// idleTimeout closes clients idle that long (0: never).
	idleTimeout time.Duration
	// maxMemory refuses commands that may create keys with -OOM past this heap (0: no bound).
	maxMemory uint64
	// lockDelayMs is the lock-delay of a LOCK, SHARED LOCK or SEMACQUIRE without DELAY.
	lockDelayMs uint64
	// memoryLimit is --memory-limit: "auto" (memoryLimitAuto), "0" (off) or bytes; see
	// goMemoryLimit.
	memoryLimit     uint64
	memoryLimitAuto bool
	// pprof serves /debug/pprof/ on --metrics-addr.
	pprof bool
	// insecureHTTP lets --metrics-addr be a non-loopback address while no credentials are set,
	// and serves every address there (ops protect.go).
	insecureHTTP bool

	// Client authentication (ACL), Redis's names: requirepass is the default user's password,
	// aclfile a file of users, protectedMode refuses remote clients while the default user
	// needs no password; masterUser/masterAuth log this node's own calls to peers in (default:
	// the default user with requirepass).
	requirePass   string
	aclFile       string
	protectedMode bool
	masterUser    string
	masterAuth    string
}

func parseOptions(args []string, getenv func(string) string) (options, error) {
	fs := flag.NewFlagSet("raftlock", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	vals := map[string]*string{
		"id":                 fs.String("id", "", "node id (default: derived from --raft-addr)"),
		"dir":                fs.String("dir", "./raftlock-data", "data directory"),
		"addr":               fs.String("addr", "127.0.0.1:6379", "client (RESP) listen address"),
		"advertise":          fs.String("advertise", "", "client address other nodes and clients should dial (default --addr)"),
		"raft-addr":          fs.String("raft-addr", "127.0.0.1:7379", "raft transport listen address"),
		"raft-advertise":     fs.String("raft-advertise", "", "raft address other nodes should dial (default --raft-addr)"),
		"peers":              fs.String("peers", "", "initial voters of a new multi-node cluster: ID=RAFTADDR,... (the same on every node)"),
		"join":               fs.String("join", "", "client address of any member of an existing cluster to join through"),
		"redirect":           fs.String("redirect", "false", "followers answer -MOVED with the leader's address instead of forwarding (true/false)"),
		"test-clock":         fs.String("test-clock", "false", "TESTS ONLY (builds with -tags raftlock_testclock): allow DEBUG CLOCK-SHIFT ms to skew or jump this node's lease clock (true/false)"),
		"test-disk-faults":   fs.String("test-disk-faults", "false", "TESTS ONLY (builds with -tags raftlock_testclock): SIGUSR2 makes every later write and sync of the data directory fail with EIO, as a failing disk (true/false)"),
		"test-move-stop":     fs.String("test-move-stop", "", "TESTS ONLY (builds with -tags raftlock_testclock): a slot move this node runs (RAFT MOVESLOTS) stops after its freeze or its import (freeze/import), undecided, for the next leader of its source group to decide"),
		"snapshot-threshold": fs.String("snapshot-threshold", "0", "log entries between snapshots (0: default 16384)"),
		"trailing-logs":      fs.String("trailing-logs", "0", "log entries kept behind a snapshot for slow followers (0: default 10240)"),
		"snapshot-interval":  fs.String("snapshot-interval", "0", "how often to check whether to snapshot (0: default 10s)"),
		"max-keys":           fs.String("max-keys", "10000000", "the most keys all databases may hold together; past it, commands that create keys get -OOM (-1: no bound)"),
		"max-elements":       fs.String("max-elements", "10000", "the most elements one hash, set, sorted set or list may hold; past it, commands that would grow it are refused"),
		"groups":             fs.String("groups", "0", "raft groups of a NEW cluster, each serving an even share of the 16384 hash slots (1 to "+strconv.Itoa(server.MaxGroups)+"; the same on every node; RAFT GROUPS adds more to a running cluster; 0: as the data directory records, 1 for a new one)"),
		"group-commit":       fs.String("group-commit", "yes", "the leader puts the requests that queued while it wrote the last log entry in one raft log entry (yes/no; no: one entry per request)"),
		"leader-wait":        fs.String("leader-wait", "1s", "how long a request that needs the leader waits for one (after a start, during an election) before CLUSTERDOWN; 0: not at all"),
		"log-level":          fs.String("log-level", "info", "debug, info, warn or error"),
		"log-format":         fs.String("log-format", "text", "text or json"),
		"metrics-addr":       fs.String("metrics-addr", "", "HTTP address for /livez, /readyz, /metrics and the status page (default off); not loopback: needs credentials or --insecure-http"),
		// Resource bounds.
		"maxclients":   fs.String("maxclients", "10000", "the most client connections open at once; one more is told 'max number of clients reached'"),
		"timeout":      fs.String("timeout", "0", "close a client idle for this many seconds (0: never; subscribers and blocked clients are not idle)"),
		"lock-delay":   fs.String("lock-delay", "0", "milliseconds a key stays refused to LOCK, SHARED and SEMACQUIRE after a holder's lease expires (not after an UNLOCK), for requests without DELAY (0: none, at most 60000)"),
		"maxmemory":    fs.String("maxmemory", "0", "past this much Go heap in use (bytes, or 100mb, 1gb ...), commands that may create keys get -OOM (0: no bound)"),
		"memory-limit": fs.String("memory-limit", "auto", "the Go runtime's soft memory limit (GOMEMLIMIT), bytes or 256mb ...; auto: GOMEMLIMIT if set, else the live heap + 25% + the runtime's overhead, at least maxmemory + 25% if set, else at least 256mb, collected once when idle after a burst; 0: none"),
		"pprof":        fs.String("pprof", "false", "also serve /debug/pprof/ on --metrics-addr (true/false)"),
		"insecure-http": fs.String("insecure-http", "no", "INSECURE: serve --metrics-addr to every address while no credentials are set "+
			"(without it, a non-loopback --metrics-addr needs --requirepass or --aclfile, and other addresses get 403 while none are set) (yes/no)"),
		// TLS, with Redis's names; SIGHUP reloads every file.
		"tls-cert-file":         fs.String("tls-cert-file", "", "PEM certificate of the client port: with --tls-key-file, clients speak TLS"),
		"tls-key-file":          fs.String("tls-key-file", "", "PEM private key of --tls-cert-file"),
		"tls-ca-cert-file":      fs.String("tls-ca-cert-file", "", "PEM CA that client certificates and the other nodes' client-port certificates are verified against"),
		"tls-auth-clients":      fs.String("tls-auth-clients", "yes", "client certificates: yes (required), no (not asked for), optional (verified if sent)"),
		"tls-auth-clients-user": fs.String("tls-auth-clients-user", "off", "CN: a client with a verified certificate is logged in as the ACL user its Subject CN names, if that user exists and is on; off: certificates name no user"),
		"raft-tls-cert-file":    fs.String("raft-tls-cert-file", "", "PEM certificate of the raft transport: with the key and CA, raft is mutual TLS"),
		"raft-tls-key-file":     fs.String("raft-tls-key-file", "", "PEM private key of --raft-tls-cert-file"),
		"raft-tls-ca-cert-file": fs.String("raft-tls-ca-cert-file", "", "PEM cluster CA: a raft peer must present a certificate it signed that names a member (raftlock cert node)"),
		"insecure-raft":         fs.String("insecure-raft", "false", "let a raft address that is not loopback run without raft mutual TLS: anyone who reaches it can rewrite the cluster (true/false)"),
		// ACL (client authentication)
		"requirepass":    fs.String("requirepass", "", "password of the default user (Redis's requirepass); the same on every node"),
		"aclfile":        fs.String("aclfile", "", "file of ACL users, one per line as in Redis: user alice on >pw ~locks:* +@all (the same on every node; ACL SETUSER/DELUSER override it)"),
		"protected-mode": fs.String("protected-mode", "yes", "while the default user has no password, refuse clients not on the loopback interface (yes/no)"),
		"masteruser":     fs.String("masteruser", "", "user this node logs in as when it calls other nodes (default: default)"),
		"masterauth":     fs.String("masterauth", "", "password for --masteruser (default: --requirepass)"),
	}
	config := fs.String("config", "", "config file of name = value lines")
	fs.Usage = func() {}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			var b strings.Builder
			fs.SetOutput(&b)
			fs.PrintDefaults()
			return options{}, fmt.Errorf("usage:\n%s", b.String())
		}
		return options{}, err
	}
	if fs.NArg() > 0 {
		return options{}, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *config != "" {
		file, err := readConfig(*config)
		if err != nil {
			return options{}, err
		}
		for name, v := range file {
			p, ok := vals[name]
			if !ok {
				return options{}, fmt.Errorf("config %s: unknown setting %q", *config, name)
			}
			if !set[name] {
				*p = v
			}
		}
	}
	for name, p := range vals {
		env := "RAFTLOCK_" + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
		if v := getenv(env); v != "" && !set[name] {
			*p = v
		}
	}
	o := options{
		id: *vals["id"], dir: *vals["dir"], addr: *vals["addr"], advertise: *vals["advertise"],
		raftAddr: *vals["raft-addr"], raftAdvertise: *vals["raft-advertise"],
		logLevel: *vals["log-level"], logFormat: *vals["log-format"], metricsAddr: *vals["metrics-addr"],
	}
	if o.id == "" {
		o.id = defaultNodeID(o.raftAddr)
	}
	if o.advertise == "" {
		o.advertise = o.addr
	}
	o.join = *vals["join"]
	var err error
	if o.snapshotThreshold, err = strconv.ParseUint(*vals["snapshot-threshold"], 10, 64); err != nil {
		return options{}, fmt.Errorf("--snapshot-threshold: %w", err)
	}
	if o.trailingLogs, err = strconv.ParseUint(*vals["trailing-logs"], 10, 64); err != nil {
		return options{}, fmt.Errorf("--trailing-logs: %w", err)
	}
	if v := *vals["snapshot-interval"]; v != "0" {
		if o.snapshotInterval, err = time.ParseDuration(v); err != nil || o.snapshotInterval <= 0 {
			return options{}, fmt.Errorf("--snapshot-interval: want a positive duration such as 5s, got %q", v)
		}
	}
	if o.maxKeys, err = strconv.Atoi(*vals["max-keys"]); err != nil || o.maxKeys == 0 || o.maxKeys < -1 {
		return options{}, fmt.Errorf("--max-keys: want a positive number of keys, or -1 for no bound, got %q", *vals["max-keys"])
	}
	if o.maxElements, err = strconv.Atoi(*vals["max-elements"]); err != nil || o.maxElements <= 0 {
		return options{}, fmt.Errorf("--max-elements: want a positive number of elements, got %q", *vals["max-elements"])
	}
	if o.groups, err = strconv.Atoi(*vals["groups"]); err != nil || o.groups < 0 || o.groups > server.MaxGroups {
		return options{}, fmt.Errorf("--groups: want 1 to %d raft groups (0: as the data directory records), got %q", server.MaxGroups, *vals["groups"])
	}
	if o.leaderWait, err = time.ParseDuration(*vals["leader-wait"]); err != nil || o.leaderWait < 0 {
		return options{}, fmt.Errorf("--leader-wait: want a duration such as 1s (0: no wait), got %q", *vals["leader-wait"])
	}
	if o.leaderWait == 0 {
		o.leaderWait = -1 // the server's "no wait"
	}
	if err := parseBounds(&o, vals); err != nil {
		return options{}, err
	}
	o.requirePass, o.aclFile = *vals["requirepass"], *vals["aclfile"]
	o.masterUser, o.masterAuth = *vals["masteruser"], *vals["masterauth"]
	if o.masterAuth == "" {
		o.masterAuth = o.requirePass
	}
	for name, dst := range map[string]*bool{"insecure-raft": &o.insecureRaft, "redirect": &o.redirect, "test-clock": &o.testClock, "test-disk-faults": &o.testDiskFaults, "pprof": &o.pprof,
		"protected-mode": &o.protectedMode, "group-commit": &o.groupCommit, "insecure-http": &o.insecureHTTP} {
		switch *vals[name] {
		case "true", "1", "yes":
			*dst = true
		case "false", "0", "no", "":
		default:
			return options{}, fmt.Errorf("--%s: want true or false, got %q", name, *vals[name])
		}
	}
	switch o.testMoveStop = *vals["test-move-stop"]; o.testMoveStop {
	case "", "freeze", "import":
	default:
		return options{}, fmt.Errorf("--test-move-stop: want freeze or import, got %q", o.testMoveStop)
	}
	if err := o.parseTLS(vals); err != nil {
		return options{}, err
	}
	if s := *vals["peers"]; s != "" {
		if o.peers, err = parsePeers(s); err != nil {
			return options{}, err
		}
		if !slices.ContainsFunc(o.peers, func(p cluster.Peer) bool { return p.ID == o.id }) {
			return options{}, fmt.Errorf("--peers does not name this node's --id %q", o.id)
		}
		if o.join != "" {
			return options{}, fmt.Errorf("--peers and --join exclude each other: bootstrap a new cluster or join one")
		}
	}
	if err := o.checkRaftSecurity(); err != nil {
		return options{}, err
	}
	if err := o.checkHTTPSecurity(); err != nil {
		return options{}, err
	}
	if o.tls.Cert != "" && o.tls.CA == "" && (len(o.peers) > 0 || o.join != "") {
		return options{}, fmt.Errorf("--tls-cert-file on a node of a cluster needs --tls-ca-cert-file: nodes verify each other's client-port certificates against it, never against the system's roots")
	}
	return o, nil
}

// checkRaftSecurity refuses a raft address (bound or advertised) that is not loopback without
// raft mutual TLS, unless --insecure-raft says so: without TLS anyone who reaches the raft port
// can rewrite the cluster's state (docs/security.md).
func (o *options) checkRaftSecurity() error {
	if o.raftTLS.Cert != "" || o.insecureRaft {
		return nil
	}
	for _, addr := range []string{o.raftAddr, o.raftAdvertise} {
		if addr != "" && !isLoopback(addr) {
			return fmt.Errorf("raft address %s is not loopback and raft has no mutual TLS: anyone who reaches it could rewrite "+
				"the cluster's locks. Give every node --raft-tls-cert-file, --raft-tls-key-file and --raft-tls-ca-cert-file "+
				"(raftlock cert ca, then raftlock cert node --id %s --host ...), or accept the risk with --insecure-raft", addr, o.id)
		}
	}
	return nil
}

// checkHTTPSecurity refuses an HTTP address that is not loopback while the flags set no
// credentials (--requirepass, --aclfile), unless --insecure-http says so, before the node opens
// its store or binds a port. The HTTP server checks again with the users in force when it starts
// (ops: users created at run time count there); this check needs no node to have started.
func (o *options) checkHTTPSecurity() error {
	if o.metricsAddr == "" || o.insecureHTTP || o.requirePass != "" || o.aclFile != "" || isLoopback(o.metricsAddr) {
		return nil
	}
	return fmt.Errorf("HTTP address %s is not loopback and no credentials are set: set --requirepass or --aclfile "+
		"(the status page and the profiles then need an @admin user's basic auth), listen on 127.0.0.1, or "+
		"pass --insecure-http yes to serve it to anyone who can reach it", o.metricsAddr)
}

// isLoopback reports whether addr's host is a loopback address or "localhost". A wildcard
// (":7379", "0.0.0.0:7379") or any other name is not.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// parseTLS reads the TLS settings: each port's files come together or not at all.
func (o *options) parseTLS(vals map[string]*string) error {
	o.tls = certs.Files{Cert: *vals["tls-cert-file"], Key: *vals["tls-key-file"], CA: *vals["tls-ca-cert-file"]}
	o.raftTLS = certs.Files{Cert: *vals["raft-tls-cert-file"], Key: *vals["raft-tls-key-file"], CA: *vals["raft-tls-ca-cert-file"]}
	switch v := *vals["tls-auth-clients"]; v {
	case "yes":
		o.tlsAuthClients = tls.RequireAndVerifyClientCert
	case "optional":
		o.tlsAuthClients = tls.VerifyClientCertIfGiven
	case "no":
		o.tlsAuthClients = tls.NoClientCert
	default:
		return fmt.Errorf("--tls-auth-clients: want yes, no or optional, got %q", v)
	}
	switch v := *vals["tls-auth-clients-user"]; {
	case strings.EqualFold(v, "off"):
		o.tlsAuthClientsUser = "off"
	case strings.EqualFold(v, "cn") && o.tls.Cert != "" && o.tlsAuthClients != tls.NoClientCert:
		o.tlsAuthClientsUser = "CN"
	case strings.EqualFold(v, "cn"):
		return fmt.Errorf("--tls-auth-clients-user CN maps verified client certificates to users: it needs --tls-cert-file and --tls-auth-clients yes or optional")
	default:
		return fmt.Errorf("--tls-auth-clients-user: want CN or off, got %q", v)
	}
	switch {
	case (o.tls.Cert == "") != (o.tls.Key == ""):
		return fmt.Errorf("--tls-cert-file and --tls-key-file go together")
	case o.tls.Cert == "" && o.tls.CA != "":
		return fmt.Errorf("--tls-ca-cert-file needs --tls-cert-file and --tls-key-file")
	case o.tls.Cert != "" && o.tls.CA == "" && o.tlsAuthClients != tls.NoClientCert:
		return fmt.Errorf("--tls-auth-clients %s verifies client certificates: it needs --tls-ca-cert-file (or --tls-auth-clients no)", *vals["tls-auth-clients"])
	case o.raftTLS != certs.Files{} && (o.raftTLS.Cert == "" || o.raftTLS.Key == "" || o.raftTLS.CA == ""):
		return fmt.Errorf("--raft-tls-cert-file, --raft-tls-key-file and --raft-tls-ca-cert-file go together")
	}
	return nil
}

// parsePeers reads --peers: ID=RAFTADDR,...
func parsePeers(s string) ([]cluster.Peer, error) {
	var peers []cluster.Peer
	for _, item := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("--peers: %q is not ID=RAFTADDR", item)
		}
		peers = append(peers, cluster.Peer{ID: id, RaftAddr: addr})
	}
	return peers, nil
}

// readConfig reads "name = value" lines; blank lines and lines starting with # are skipped.
func readConfig(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		name, val, ok := strings.Cut(line, "=")
		if !ok {
			return nil, fmt.Errorf("config %s:%d: want name = value", path, n)
		}
		out[strings.TrimSpace(name)] = strings.Trim(strings.TrimSpace(val), `"`)
	}
	return out, sc.Err()
}

// parseBounds reads the resource bounds' flags into o.
func parseBounds(o *options, vals map[string]*string) error {
	var err error
	if o.maxClients, err = strconv.Atoi(*vals["maxclients"]); err != nil || o.maxClients <= 0 {
		return fmt.Errorf("--maxclients: want a positive number of clients, got %q", *vals["maxclients"])
	}
	secs, err := strconv.ParseInt(*vals["timeout"], 10, 64)
	if err != nil || secs < 0 || secs > 1<<31 {
		return fmt.Errorf("--timeout: want a number of seconds (0: never), got %q", *vals["timeout"])
	}
	o.idleTimeout = time.Duration(secs) * time.Second
	if o.lockDelayMs, err = strconv.ParseUint(*vals["lock-delay"], 10, 64); err != nil || o.lockDelayMs > fsm.MaxDelayMs {
		return fmt.Errorf("--lock-delay: want milliseconds from 0 to %d, got %q", fsm.MaxDelayMs, *vals["lock-delay"])
	}
	if o.maxMemory, err = parseMemory(*vals["maxmemory"]); err != nil {
		return fmt.Errorf("--maxmemory: %w", err)
	}
	if v := *vals["memory-limit"]; strings.EqualFold(strings.TrimSpace(v), "auto") {
		o.memoryLimitAuto = true
	} else if o.memoryLimit, err = parseMemory(v); err != nil {
		return fmt.Errorf("--memory-limit: %w", err)
	}
	return nil
}

// parseMemory reads a size as Redis's configuration does: bytes, or a number with one of the
// units k, kb, m, mb, g, gb (any case; k is 1000, kb 1024, and so on).
func parseMemory(s string) (uint64, error) {
	units := []struct {
		suffix string
		mult   uint64
	}{{"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30}, {"k", 1e3}, {"m", 1e6}, {"g", 1e9}, {"b", 1}}
	num, mult := strings.ToLower(strings.TrimSpace(s)), uint64(1)
	for _, u := range units {
		if rest, ok := strings.CutSuffix(num, u.suffix); ok {
			num, mult = rest, u.mult
			break
		}
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || n > (1<<63)/mult {
		return 0, fmt.Errorf("want bytes such as 1073741824, 1024mb or 1gb, got %q", s)
	}
	return n * mult, nil
}

// defaultNodeID is a node's ID when --id is not given: derived from its raft address, so the
// same address always names the same node.
func defaultNodeID(raftAddr string) string {
	return "node-" + strings.NewReplacer(":", "-", "[", "", "]", "").Replace(raftAddr)
}
