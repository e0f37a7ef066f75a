package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/raftlock/raftlock/raftnode"
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
	peers         []raftnode.Peer
	join          string
	redirect      bool
	testClock     bool
	// Snapshot tuning; zero keeps raftnode's defaults. Tests lower them to force log
	// compaction and snapshot installs.
	snapshotThreshold uint64
	trailingLogs      uint64
	snapshotInterval  time.Duration
	// leaderWait bounds how long a request waits for a leader before CLUSTERDOWN (0: the
	// server's default; negative: none).
	leaderWait time.Duration
	// maxKeys bounds the keys of all databases (0: the server's default; negative: none).
	maxKeys int
	// maxElements bounds the elements of one hash, set, sorted set or list.
	maxElements int
	logLevel    string
	logFormat   string
	// metricsAddr, when set, serves /metrics and /debug/pprof/ over HTTP.
	metricsAddr string
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
		"test-clock":         fs.String("test-clock", "false", "TESTS ONLY: allow DEBUG CLOCK-SHIFT ms to skew or jump this node's lease clock (true/false)"),
		"snapshot-threshold": fs.String("snapshot-threshold", "0", "log entries between snapshots (0: default 16384)"),
		"trailing-logs":      fs.String("trailing-logs", "0", "log entries kept behind a snapshot for slow followers (0: default 10240)"),
		"snapshot-interval":  fs.String("snapshot-interval", "0", "how often to check whether to snapshot (0: default 10s)"),
		"max-keys":           fs.String("max-keys", "10000000", "the most keys all databases may hold together; past it, commands that create keys get -OOM (-1: no bound)"),
		"max-elements":       fs.String("max-elements", "10000", "the most elements one hash, set, sorted set or list may hold; past it, commands that would grow it are refused"),
		"leader-wait":        fs.String("leader-wait", "1s", "how long a request that needs the leader waits for one (after a start, during an election) before CLUSTERDOWN; 0: not at all"),
		"log-level":          fs.String("log-level", "info", "debug, info, warn or error"),
		"log-format":         fs.String("log-format", "text", "text or json"),
		"metrics-addr":       fs.String("metrics-addr", "", "HTTP address for /metrics (Prometheus) and /debug/pprof/ (default off; keep it private)"),
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
		o.id = "node-" + strings.NewReplacer(":", "-", "[", "", "]", "").Replace(o.raftAddr)
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
	if o.leaderWait, err = time.ParseDuration(*vals["leader-wait"]); err != nil || o.leaderWait < 0 {
		return options{}, fmt.Errorf("--leader-wait: want a duration such as 1s (0: no wait), got %q", *vals["leader-wait"])
	}
	if o.leaderWait == 0 {
		o.leaderWait = -1 // the server's "no wait"
	}
	for name, dst := range map[string]*bool{"redirect": &o.redirect, "test-clock": &o.testClock} {
		switch *vals[name] {
		case "true", "1", "yes":
			*dst = true
		case "false", "0", "no", "":
		default:
			return options{}, fmt.Errorf("--%s: want true or false, got %q", name, *vals[name])
		}
	}
	if s := *vals["peers"]; s != "" {
		if o.peers, err = parsePeers(s); err != nil {
			return options{}, err
		}
		if !slices.ContainsFunc(o.peers, func(p raftnode.Peer) bool { return p.ID == o.id }) {
			return options{}, fmt.Errorf("--peers does not name this node's --id %q", o.id)
		}
		if o.join != "" {
			return options{}, fmt.Errorf("--peers and --join exclude each other: bootstrap a new cluster or join one")
		}
	}
	return o, nil
}

// parsePeers reads --peers: ID=RAFTADDR,...
func parsePeers(s string) ([]raftnode.Peer, error) {
	var peers []raftnode.Peer
	for _, item := range strings.Split(s, ",") {
		id, addr, ok := strings.Cut(strings.TrimSpace(item), "=")
		if !ok || id == "" || addr == "" {
			return nil, fmt.Errorf("--peers: %q is not ID=RAFTADDR", item)
		}
		peers = append(peers, raftnode.Peer{ID: id, RaftAddr: addr})
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
