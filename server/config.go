package server

// CONFIG: GET, SET, RESETSTAT, REWRITE and HELP over every parameter redis-server 7.0 knows.
//
// Tools written for Redis set tuning parameters when they start (encodings, save, hz ...) and
// stop at the first error. So every parameter of Redis 7.0.15 is here, validated as Redis
// validates it, with Redis's error texts. Most mean nothing to raftlock: a valid value is kept,
// per node and not replicated (as a Redis instance keeps its own), and CONFIG GET reports it
// back. The few that describe raftlock (configNode) report what the node does, and CONFIG SET
// either applies them or refuses a value the node cannot honour, saying why.

import (
	"cmp"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// configKind is how a parameter's value is validated and written back.
type configKind uint8

const (
	cfgString       configKind = iota // any text
	cfgBool                           // yes or no
	cfgEnum                           // one of words
	cfgInt                            // an integer in [min, max], parsed as Redis's string2ll
	cfgMem                            // a memory value (100mb, 1gb ...) in [min, max]
	cfgMemUnsigned                    // a memory value, any unsigned 64-bit number
	cfgMemPercent                     // a memory value, or a percent of maxmemory ("10%")
	cfgImmutable                      // set at start only: CONFIG SET refuses it
	cfgProtected                      // refused while enable-protected-configs is no (always)
	cfgSave                           // "seconds changes ..." pairs
	cfgBufferLimits                   // client-output-buffer-limit's "class hard soft seconds" groups
	cfgNotify                         // notify-keyspace-events' class characters
	cfgOOMValues                      // oom-score-adj-values: three integers in [-2000, 2000]
	cfgPercentiles                    // latency-tracking-info-percentiles: numbers in [0, 100]
	cfgHostname                       // letters, digits, hyphens and dots
	cfgProcTitle                      // proc-title-template: text with {variables}
)

// configParam is one parameter of redis-server 7.0.15: its name, the name Redis 7 keeps for
// it from before (alias: the same value under another name), how its values are checked, and
// its default as redis-server reports it.
type configParam struct {
	name, alias string
	kind        configKind
	min, max    int64    // cfgInt and cfgMem
	words       []string // cfgEnum
	def         string
	hidden      bool // CONFIG GET answers it only when asked by its exact name, not by a pattern
	// shown maps an enum word to the one CONFIG GET reports for it (Redis keeps both words as
	// one value, and names it by the first).
	shown map[string]string
	// floor and ceil, when not zero, are where Redis moves a number it took when it applies it
	// (hz stays within 1 and 500, the replication backlog is at least 16 KiB): CONFIG GET
	// reports the moved number.
	floor, ceil int64
}

// configTable is every parameter redis-server 7.0.15 knows, sorted by name. The types, bounds
// and defaults are what that server answers (CONFIG GET, and CONFIG SET with values out of
// bounds). A default of the parameters in configNode is Redis's: CONFIG GET reports the node's
// value instead.
var configTable = []configParam{
	{name: "acl-pubsub-default", kind: cfgEnum, words: []string{"allchannels", "resetchannels"}, def: "resetchannels"},
	{name: "aclfile", kind: cfgImmutable, def: ""},
	{name: "acllog-max-len", kind: cfgInt, min: 0, max: math.MaxInt64, def: "128"},
	{name: "active-defrag-cycle-max", kind: cfgInt, min: 1, max: 99, def: "25"},
	{name: "active-defrag-cycle-min", kind: cfgInt, min: 1, max: 99, def: "1"},
	{name: "active-defrag-ignore-bytes", kind: cfgMem, min: 1, max: math.MaxInt64, def: "104857600"},
	{name: "active-defrag-max-scan-fields", kind: cfgInt, min: 1, max: math.MaxInt64, def: "1000"},
	{name: "active-defrag-threshold-lower", kind: cfgInt, min: 0, max: 1000, def: "10"},
	{name: "active-defrag-threshold-upper", kind: cfgInt, min: 0, max: 1000, def: "100"},
	{name: "active-expire-effort", kind: cfgInt, min: 1, max: 10, def: "1"},
	{name: "activedefrag", kind: cfgBool, def: "no"},
	{name: "activerehashing", kind: cfgBool, def: "yes"},
	{name: "always-show-logo", kind: cfgImmutable, def: "no"},
	{name: "aof-disable-auto-gc", kind: cfgBool, def: "no"},
	{name: "aof-load-truncated", kind: cfgBool, def: "yes"},
	{name: "aof-rewrite-incremental-fsync", kind: cfgBool, def: "yes"},
	{name: "aof-timestamp-enabled", kind: cfgBool, def: "no"},
	{name: "aof-use-rdb-preamble", kind: cfgBool, def: "yes"},
	{name: "aof_rewrite_cpulist", kind: cfgImmutable, def: ""},
	{name: "appenddirname", kind: cfgImmutable, def: "appendonlydir"},
	{name: "appendfilename", kind: cfgImmutable, def: "appendonly.aof"},
	{name: "appendfsync", kind: cfgEnum, words: []string{"everysec", "always", "no"}, def: "everysec"},
	{name: "appendonly", kind: cfgBool, def: "no"},
	{name: "auto-aof-rewrite-min-size", kind: cfgMem, min: 0, max: math.MaxInt64, def: "67108864"},
	{name: "auto-aof-rewrite-percentage", kind: cfgInt, min: 0, max: math.MaxInt32, def: "100"},
	{name: "bgsave_cpulist", kind: cfgImmutable, def: ""},
	{name: "bind", kind: cfgString, def: "* -::*"},
	{name: "bind-source-addr", kind: cfgString, def: ""},
	{name: "bio_cpulist", kind: cfgImmutable, def: ""},
	{name: "busy-reply-threshold", kind: cfgInt, min: 0, max: math.MaxInt64, def: "5000", alias: "lua-time-limit"},
	{name: "client-output-buffer-limit", kind: cfgBufferLimits, def: "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"},
	{name: "client-query-buffer-limit", kind: cfgMem, min: 1048576, max: math.MaxInt64, def: "1073741824"},
	{name: "cluster-allow-pubsubshard-when-down", kind: cfgBool, def: "yes"},
	{name: "cluster-allow-reads-when-down", kind: cfgBool, def: "no"},
	{name: "cluster-allow-replica-migration", kind: cfgBool, def: "yes"},
	{name: "cluster-announce-bus-port", kind: cfgInt, min: 0, max: 65535, def: "0"},
	{name: "cluster-announce-hostname", kind: cfgHostname, def: ""},
	{name: "cluster-announce-ip", kind: cfgString, def: ""},
	{name: "cluster-announce-port", kind: cfgInt, min: 0, max: 65535, def: "0"},
	{name: "cluster-announce-tls-port", kind: cfgInt, min: 0, max: 65535, def: "0"},
	{name: "cluster-config-file", kind: cfgImmutable, def: "nodes.conf"},
	{name: "cluster-enabled", kind: cfgImmutable, def: "no"},
	{name: "cluster-link-sendbuf-limit", kind: cfgMemUnsigned, def: "0"},
	{name: "cluster-migration-barrier", kind: cfgInt, min: 0, max: math.MaxInt32, def: "1"},
	{name: "cluster-node-timeout", kind: cfgInt, min: 0, max: math.MaxInt64, def: "15000"},
	{name: "cluster-port", kind: cfgImmutable, def: "0"},
	{name: "cluster-preferred-endpoint-type", kind: cfgEnum, words: []string{"ip", "hostname", "unknown-endpoint"}, def: "ip"},
	{name: "cluster-replica-no-failover", kind: cfgBool, def: "no", alias: "cluster-slave-no-failover"},
	{name: "cluster-replica-validity-factor", kind: cfgInt, min: 0, max: math.MaxInt32, def: "10", alias: "cluster-slave-validity-factor"},
	{name: "cluster-require-full-coverage", kind: cfgBool, def: "yes"},
	{name: "crash-log-enabled", kind: cfgBool, def: "yes"},
	{name: "crash-memcheck-enabled", kind: cfgBool, def: "yes"},
	{name: "daemonize", kind: cfgImmutable, def: "no"},
	{name: "databases", kind: cfgImmutable, def: "16"},
	{name: "dbfilename", kind: cfgProtected, def: "dump.rdb"},
	{name: "dir", kind: cfgProtected, def: ""},
	{name: "disable-thp", kind: cfgImmutable, def: "yes"},
	{name: "dynamic-hz", kind: cfgBool, def: "yes"},
	{name: "enable-debug-command", kind: cfgImmutable, def: "no"},
	{name: "enable-module-command", kind: cfgImmutable, def: "no"},
	{name: "enable-protected-configs", kind: cfgImmutable, def: "no"},
	{name: "hash-max-listpack-entries", kind: cfgInt, min: 0, max: math.MaxInt64, def: "512", alias: "hash-max-ziplist-entries"},
	{name: "hash-max-listpack-value", kind: cfgMem, min: 0, max: math.MaxInt64, def: "64", alias: "hash-max-ziplist-value"},
	{name: "hll-sparse-max-bytes", kind: cfgMem, min: 0, max: math.MaxInt64, def: "3000"},
	{name: "hz", kind: cfgInt, min: 0, max: math.MaxInt32, floor: 1, ceil: 500, def: "10"},
	{name: "ignore-warnings", kind: cfgString, def: ""},
	{name: "io-threads", kind: cfgImmutable, def: "1"},
	{name: "io-threads-do-reads", kind: cfgImmutable, def: "no"},
	{name: "jemalloc-bg-thread", kind: cfgBool, def: "yes"},
	{name: "key-load-delay", kind: cfgInt, min: math.MinInt32, max: math.MaxInt32, def: "0", hidden: true},
	{name: "latency-monitor-threshold", kind: cfgInt, min: 0, max: math.MaxInt64, def: "0"},
	{name: "latency-tracking", kind: cfgBool, def: "yes"},
	{name: "latency-tracking-info-percentiles", kind: cfgPercentiles, def: "50 99 99.9"},
	{name: "lazyfree-lazy-eviction", kind: cfgBool, def: "no"},
	{name: "lazyfree-lazy-expire", kind: cfgBool, def: "no"},
	{name: "lazyfree-lazy-server-del", kind: cfgBool, def: "no"},
	{name: "lazyfree-lazy-user-del", kind: cfgBool, def: "no"},
	{name: "lazyfree-lazy-user-flush", kind: cfgBool, def: "no"},
	{name: "lfu-decay-time", kind: cfgInt, min: 0, max: math.MaxInt32, def: "1"},
	{name: "lfu-log-factor", kind: cfgInt, min: 0, max: math.MaxInt32, def: "10"},
	{name: "list-compress-depth", kind: cfgInt, min: 0, max: math.MaxInt32, def: "0"},
	{name: "list-max-listpack-size", kind: cfgInt, min: math.MinInt32, max: math.MaxInt32, def: "-2", alias: "list-max-ziplist-size"},
	{name: "loading-process-events-interval-bytes", kind: cfgInt, min: 1024, max: math.MaxInt32, def: "2097152", hidden: true},
	{name: "logfile", kind: cfgImmutable, def: ""},
	{name: "loglevel", kind: cfgEnum, words: []string{"debug", "verbose", "notice", "warning"}, def: "notice"},
	{name: "masterauth", kind: cfgString, def: ""},
	{name: "masteruser", kind: cfgString, def: ""},
	{name: "maxclients", kind: cfgInt, min: 1, max: math.MaxUint32, def: "10000"},
	{name: "maxmemory", kind: cfgMemUnsigned, def: "0"},
	{name: "maxmemory-clients", kind: cfgMemPercent, def: "0"},
	{name: "maxmemory-eviction-tenacity", kind: cfgInt, min: 0, max: 100, def: "10"},
	{name: "maxmemory-policy", kind: cfgEnum, words: []string{"volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl", "allkeys-lru", "allkeys-lfu", "allkeys-random", "noeviction"}, def: "noeviction"},
	{name: "maxmemory-samples", kind: cfgInt, min: 1, max: math.MaxInt32, def: "5"},
	{name: "min-replicas-max-lag", kind: cfgInt, min: 0, max: math.MaxInt32, def: "10", alias: "min-slaves-max-lag"},
	{name: "min-replicas-to-write", kind: cfgInt, min: 0, max: math.MaxInt32, def: "0", alias: "min-slaves-to-write"},
	{name: "no-appendfsync-on-rewrite", kind: cfgBool, def: "no"},
	{name: "notify-keyspace-events", kind: cfgNotify, def: ""},
	{name: "oom-score-adj", kind: cfgEnum, words: []string{"no", "yes", "relative", "absolute"}, shown: map[string]string{"relative": "yes"}, def: "no"},
	{name: "oom-score-adj-values", kind: cfgOOMValues, def: "0 200 800"},
	{name: "pidfile", kind: cfgImmutable, def: ""},
	{name: "port", kind: cfgInt, min: 0, max: 65535, def: "6379"},
	{name: "proc-title-template", kind: cfgProcTitle, def: "{title} {listen-addr} {server-mode}"},
	{name: "propagation-error-behavior", kind: cfgEnum, words: []string{"ignore", "panic", "panic-on-replicas"}, def: "ignore"},
	{name: "protected-mode", kind: cfgBool, def: "yes"},
	{name: "proto-max-bulk-len", kind: cfgMem, min: 1048576, max: math.MaxInt64, def: "536870912"},
	{name: "rdb-del-sync-files", kind: cfgBool, def: "no"},
	{name: "rdb-key-save-delay", kind: cfgInt, min: math.MinInt32, max: math.MaxInt32, def: "0", hidden: true},
	{name: "rdb-save-incremental-fsync", kind: cfgBool, def: "yes"},
	{name: "rdbchecksum", kind: cfgImmutable, def: "yes"},
	{name: "rdbcompression", kind: cfgBool, def: "yes"},
	{name: "repl-backlog-size", kind: cfgMem, min: 1, max: math.MaxInt64, floor: 16 << 10, def: "1048576"},
	{name: "repl-backlog-ttl", kind: cfgInt, min: 0, max: math.MaxInt64, def: "3600"},
	{name: "repl-disable-tcp-nodelay", kind: cfgBool, def: "no"},
	{name: "repl-diskless-load", kind: cfgEnum, words: []string{"disabled", "on-empty-db", "swapdb"}, def: "disabled"},
	{name: "repl-diskless-sync", kind: cfgBool, def: "yes"},
	{name: "repl-diskless-sync-delay", kind: cfgInt, min: 0, max: math.MaxInt32, def: "5"},
	{name: "repl-diskless-sync-max-replicas", kind: cfgInt, min: 0, max: math.MaxInt32, def: "0"},
	{name: "repl-ping-replica-period", kind: cfgInt, min: 1, max: math.MaxInt32, def: "10", alias: "repl-ping-slave-period"},
	{name: "repl-timeout", kind: cfgInt, min: 1, max: math.MaxInt32, def: "60"},
	{name: "replica-announce-ip", kind: cfgString, def: "", alias: "slave-announce-ip"},
	{name: "replica-announce-port", kind: cfgInt, min: 0, max: 65535, def: "0", alias: "slave-announce-port"},
	{name: "replica-announced", kind: cfgBool, def: "yes"},
	{name: "replica-ignore-disk-write-errors", kind: cfgBool, def: "no"},
	{name: "replica-ignore-maxmemory", kind: cfgBool, def: "yes", alias: "slave-ignore-maxmemory"},
	{name: "replica-lazy-flush", kind: cfgBool, def: "no", alias: "slave-lazy-flush"},
	{name: "replica-priority", kind: cfgInt, min: 0, max: math.MaxInt32, def: "100", alias: "slave-priority"},
	{name: "replica-read-only", kind: cfgBool, def: "yes", alias: "slave-read-only"},
	{name: "replica-serve-stale-data", kind: cfgBool, def: "yes", alias: "slave-serve-stale-data"},
	{name: "replicaof", kind: cfgImmutable, def: "", alias: "slaveof"},
	{name: "requirepass", kind: cfgString, def: ""},
	{name: "sanitize-dump-payload", kind: cfgEnum, words: []string{"no", "yes", "clients"}, def: "no"},
	{name: "save", kind: cfgSave, def: ""},
	{name: "server_cpulist", kind: cfgImmutable, def: ""},
	{name: "set-max-intset-entries", kind: cfgInt, min: 0, max: math.MaxInt64, def: "512"},
	{name: "set-proc-title", kind: cfgImmutable, def: "yes"},
	{name: "shutdown-on-sigint", kind: cfgEnum, words: []string{"default", "save", "nosave", "now", "force"}, def: "default"},
	{name: "shutdown-on-sigterm", kind: cfgEnum, words: []string{"default", "save", "nosave", "now", "force"}, def: "default"},
	{name: "shutdown-timeout", kind: cfgInt, min: 0, max: math.MaxInt32, def: "10"},
	{name: "slowlog-log-slower-than", kind: cfgInt, min: -1, max: math.MaxInt64, def: "10000"},
	{name: "slowlog-max-len", kind: cfgInt, min: 0, max: math.MaxInt64, def: "128"},
	{name: "socket-mark-id", kind: cfgImmutable, def: "0"},
	{name: "stop-writes-on-bgsave-error", kind: cfgBool, def: "yes"},
	{name: "stream-node-max-bytes", kind: cfgMem, min: 0, max: math.MaxInt64, def: "4096"},
	{name: "stream-node-max-entries", kind: cfgInt, min: 0, max: math.MaxInt64, def: "100"},
	{name: "supervised", kind: cfgImmutable, def: "no"},
	{name: "syslog-enabled", kind: cfgImmutable, def: "no"},
	{name: "syslog-facility", kind: cfgImmutable, def: "local0"},
	{name: "syslog-ident", kind: cfgImmutable, def: "redis"},
	{name: "tcp-backlog", kind: cfgImmutable, def: "511"},
	{name: "tcp-keepalive", kind: cfgInt, min: 0, max: math.MaxInt32, def: "300"},
	{name: "timeout", kind: cfgInt, min: 0, max: math.MaxInt32, def: "0"},
	{name: "tls-auth-clients", kind: cfgEnum, words: []string{"no", "yes", "optional"}, def: "yes"},
	{name: "tls-ca-cert-dir", kind: cfgString, def: ""},
	{name: "tls-ca-cert-file", kind: cfgString, def: ""},
	{name: "tls-cert-file", kind: cfgString, def: ""},
	{name: "tls-ciphers", kind: cfgString, def: ""},
	{name: "tls-ciphersuites", kind: cfgString, def: ""},
	{name: "tls-client-cert-file", kind: cfgString, def: ""},
	{name: "tls-client-key-file", kind: cfgString, def: ""},
	{name: "tls-client-key-file-pass", kind: cfgString, def: ""},
	{name: "tls-cluster", kind: cfgBool, def: "no"},
	{name: "tls-dh-params-file", kind: cfgString, def: ""},
	{name: "tls-key-file", kind: cfgString, def: ""},
	{name: "tls-key-file-pass", kind: cfgString, def: ""},
	{name: "tls-port", kind: cfgInt, min: 0, max: 65535, def: "0"},
	{name: "tls-prefer-server-ciphers", kind: cfgBool, def: "no"},
	{name: "tls-protocols", kind: cfgString, def: ""},
	{name: "tls-replication", kind: cfgBool, def: "no"},
	{name: "tls-session-cache-size", kind: cfgInt, min: 0, max: math.MaxInt32, def: "20480"},
	{name: "tls-session-cache-timeout", kind: cfgInt, min: 0, max: math.MaxInt32, def: "300"},
	{name: "tls-session-caching", kind: cfgBool, def: "yes"},
	{name: "tracking-table-max-keys", kind: cfgInt, min: 0, max: math.MaxInt64, def: "1000000"},
	{name: "unixsocket", kind: cfgImmutable, def: ""},
	{name: "unixsocketperm", kind: cfgImmutable, def: "0"},
	{name: "zset-max-listpack-entries", kind: cfgInt, min: 0, max: math.MaxInt64, def: "128", alias: "zset-max-ziplist-entries"},
	{name: "zset-max-listpack-value", kind: cfgMem, min: 0, max: math.MaxInt64, def: "64", alias: "zset-max-ziplist-value"},
}

// maxConfigValue bounds a value CONFIG SET keeps. With one value for each parameter of the
// fixed table, no client can grow a node's configuration past the table times this bound.
const maxConfigValue = 64 << 10

// configIndex finds a parameter by either of its names.
var configIndex = func() map[string]*configParam {
	m := make(map[string]*configParam, 2*len(configTable))
	for i := range configTable {
		p := &configTable[i]
		m[p.name] = p
		if p.alias != "" {
			m[p.alias] = p
		}
	}
	return m
}()

// configNames is every name CONFIG GET's patterns match (hidden parameters left out), with
// the length of the longest.
var configNames, longestConfigName = func() ([]string, int) {
	var names []string
	longest := 0
	for name, p := range configIndex {
		if !p.hidden {
			names = append(names, name)
			longest = max(longest, len(name))
		}
	}
	slices.Sort(names)
	return names, longest
}()

// nodeParam is a parameter that means something to raftlock. value is what the node does
// now; apply, when set, makes a new value take effect. Without apply the value is fixed while
// the node runs, and CONFIG SET refuses any other with why.
type nodeParam struct {
	value func(s *Server) string
	apply func(s *Server, v string)
	why   string
}

// configNode holds the parameters that describe raftlock. Every other one is kept as it was
// set and means nothing to the node.
var configNode = map[string]nodeParam{
	"notify-keyspace-events": {
		value: func(s *Server) string { return formatNotifyFlags(s.notifyFlags.Load()) },
		apply: func(s *Server, v string) {
			flags, _ := parseNotifyFlags([]byte(v)) // v is formatNotifyFlags' own text
			s.setNotifyFlags(flags)
		},
	},
	"maxclients": {
		// As in Redis, lowering it turns away new connections only; open ones stay.
		value: func(s *Server) string { return itoa(s.maxClients.Load()) },
		apply: func(s *Server, v string) {
			n, _ := strconv.ParseInt(v, 10, 64)
			s.maxClients.Store(n)
		},
	},
	"appendonly":  {value: constConfig("yes"), why: "raftlock always persists: every write goes through its raft log"},
	"appendfsync": {value: constConfig("always"), why: "raftlock answers a write only once a majority of its nodes synced it to their raft logs"},
	"replica-read-only": {value: constConfig("yes"),
		why: "raftlock's followers forward writes to the leader and take none of their own"},
	"timeout": {
		value: func(s *Server) string { return itoa(int64(s.cfg.IdleTimeout / time.Second)) },
		why:   "raftlock's idle timeout is set by --timeout at start",
	},
	"maxmemory": {
		value: func(s *Server) string { return strconv.FormatUint(s.cfg.MaxMemory, 10) },
		why:   "raftlock's memory bound is set by --maxmemory at start",
	},
	"busy-reply-threshold": {
		value: func(s *Server) string { return itoa(s.cfg.ScriptTimeout.Milliseconds()) },
		why:   "raftlock stops a script that runs past its time limit, which is fixed at start",
	},
	"proto-max-bulk-len": {
		value: func(s *Server) string { return itoa(int64(s.cfg.Limits.MaxBulk)) },
		why:   "raftlock's protocol limits are fixed at start",
	},
	"port": {
		value: func(s *Server) string { return s.listenPort(s.cfg.TLS == nil) },
		why:   "raftlock listens where --addr says",
	},
	"tls-port": {
		value: func(s *Server) string { return s.listenPort(s.cfg.TLS != nil) },
		why:   "raftlock listens where --addr says, with TLS when --tls-cert-file is set",
	},
	"bind": {
		value: func(s *Server) string {
			if i := strings.LastIndexByte(s.cfg.Addr, ':'); i > 0 {
				return strings.Trim(s.cfg.Addr[:i], "[]")
			}
			return "*"
		},
		why: "raftlock listens where --addr says",
	},
	"protected-mode": {
		value: func(s *Server) string { return yesNo(s.cfg.ProtectedMode) },
		why:   "raftlock's protected mode is set by --protected-mode at start",
	},
	"requirepass": {
		value: func(s *Server) string { return s.cfg.RequirePass },
		why:   "raftlock's users are replicated: change the default user's password with ACL SETUSER default",
	},
	"masteruser": {
		value: func(s *Server) string { return s.cfg.PeerUser },
		why:   "the user a follower forwards as is set by --masteruser at start",
	},
	"masterauth": {
		value: func(s *Server) string { return s.cfg.PeerPassword },
		why:   "the password a follower forwards with is set by --masterauth at start",
	},
	"aclfile": {value: func(s *Server) string { return s.cfg.ACLFile }},
	"dir": {value: func(*Server) string {
		wd, _ := os.Getwd() // Redis's dir is its working directory too
		return wd
	}},
}

func constConfig(v string) func(*Server) string { return func(*Server) string { return v } }

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

// listenPort is the port of the client address when on, else "0" (port and tls-port: the
// client port speaks TLS or plain RESP, never both).
func (s *Server) listenPort(on bool) string {
	if !on {
		return "0"
	}
	return portOf(s.cfg.Addr)
}

// configStore holds what CONFIG SET kept on this node for the parameters outside configNode.
// mu also serializes CONFIG SETs, so that each applies all its values, or none, before the
// next one looks.
type configStore struct {
	mu   sync.Mutex
	vals map[*configParam]string // absent: the default
}

// valueLocked is p's kept value.
func (c *configStore) valueLocked(p *configParam) string {
	if v, ok := c.vals[p]; ok {
		return v
	}
	return p.def
}

// configHelp is CONFIG HELP's text, Redis 7.0's.
var configHelp = []string{
	"GET <pattern>",
	"    Return parameters matching the glob-like <pattern> and their values.",
	"SET <directive> <value>",
	"    Set the configuration <directive> to <value>.",
	"RESETSTAT",
	"    Reset statistics reported by the INFO command.",
	"REWRITE",
	"    Rewrite the configuration file.",
}

// CONFIG GET pattern [pattern ...] · CONFIG SET parameter value [parameter value ...] ·
// CONFIG RESETSTAT · CONFIG REWRITE · CONFIG HELP
func cmdConfig(r *request) {
	sub := lower(r.args[1])
	switch {
	case sub == "set":
		configSet(r)
	case sub == "get" && len(r.args) < 3:
		r.wrongArgs("config|get")
	case sub == "get":
		configGet(r)
	case (sub == "help" || sub == "resetstat" || sub == "rewrite") && len(r.args) != 2:
		r.wrongArgs("config|" + sub)
	case sub == "help":
		r.writeHelp("CONFIG", configHelp)
	case sub == "resetstat":
		r.s.resetStats()
		r.w.SimpleString("OK")
	case sub == "rewrite":
		// Redis's own answer when it was started without a file, which is raftlock's case:
		// its configuration comes from flags.
		r.w.Error("ERR The server is running without a config file")
	default:
		r.w.Error("ERR unknown subcommand '" + string(appendSanitized(nil, r.args[1], 128)) + "'. Try CONFIG HELP.")
	}
}

// configGet answers CONFIG GET: the parameters named exactly (under the name as asked, as
// Redis answers) and those a pattern matches, each once. Redis 7.0 answers in the order of
// its hash table, which changes from one start to the next; raftlock answers in name order.
func configGet(r *request) {
	type match struct {
		name string
		p    *configParam
	}
	var out []match
	seen := map[string]bool{}
	for _, pat := range r.args[2:] {
		if !strings.ContainsAny(string(pat), "[*?") {
			key := lower(pat)
			if p := configIndex[key]; p != nil && !seen[key] {
				seen[key] = true
				out = append(out, match{string(pat), p})
			}
			continue
		}
		g := compileGlob([]byte(lower(pat)), longestConfigName) // Redis matches names ignoring case
		for _, name := range configNames {
			if !seen[name] && g.match([]byte(name)) {
				seen[name] = true
				out = append(out, match{name, configIndex[name]})
			}
		}
	}
	slices.SortFunc(out, func(a, b match) int { return strings.Compare(strings.ToLower(a.name), strings.ToLower(b.name)) })
	values := make([]string, len(out))
	for i, m := range out {
		if np, ok := configNode[m.p.name]; ok {
			values[i] = np.value(r.s)
		}
	}
	c := &r.s.config
	c.mu.Lock()
	for i, m := range out {
		if _, ok := configNode[m.p.name]; !ok {
			values[i] = c.valueLocked(m.p)
		}
	}
	c.mu.Unlock()
	r.w.Map(len(out))
	for i, m := range out {
		r.w.BulkString(m.name)
		r.w.BulkString(values[i])
	}
}

// configSet answers CONFIG SET. As Redis 7 does, it sets all the pairs or none, and looks at
// the names before any value: the first unknown, immutable, protected or repeated name fails
// the command; then the first value that does not parse, or that raftlock cannot honour.
func configSet(r *request) {
	pairs := r.args[2:]
	switch {
	case len(pairs) < 2:
		r.w.Error(wrongArity("config|set"))
		return
	case len(pairs)%2 != 0:
		r.w.Error(errSyntax)
		return
	}
	failed := func(name []byte, why string) {
		b := append([]byte("ERR CONFIG SET failed (possibly related to argument '"), appendSanitized(nil, name, len(name))...)
		r.w.Error(string(b) + "') - " + why)
	}
	params := make([]*configParam, len(pairs)/2)
	for i := range params {
		name := pairs[2*i]
		p := configIndex[lower(name)]
		switch {
		case p == nil:
			r.w.Error("ERR Unknown option or number of arguments for CONFIG SET - '" + string(appendSanitized(nil, name, len(name))) + "'")
			return
		case p.kind == cfgImmutable:
			failed(name, "can't set immutable config")
			return
		case p.kind == cfgProtected:
			failed(name, "can't set protected config")
			return
		case seenParam(pairs[:2*i], lower(name)):
			failed(name, "duplicate parameter")
			return
		}
		params[i] = p
	}
	c := &r.s.config
	c.mu.Lock()
	defer c.mu.Unlock()
	values := make([]string, len(params))
	for i, p := range params {
		name := pairs[2*i]
		v, why := parseConfig(p, c.valueLocked(p), pairs[2*i+1])
		switch np, ok := configNode[p.name]; {
		case why != "":
		case len(v) > maxConfigValue: // only text is this long: a number fails to parse first
			why = "raftlock keeps values of at most " + strconv.Itoa(maxConfigValue) + " bytes"
		case ok && np.apply == nil && v != np.value(r.s):
			why = np.why
		}
		if why != "" {
			failed(name, why)
			return
		}
		values[i] = v
	}
	for i, p := range params {
		switch np, ok := configNode[p.name]; {
		case ok && np.apply != nil:
			np.apply(r.s, values[i])
		case !ok:
			if c.vals == nil {
				c.vals = make(map[*configParam]string)
			}
			c.vals[p] = values[i]
		}
	}
	r.w.SimpleString("OK")
}

// seenParam reports whether one of the parameters of pairs (name, value, ...) is name.
func seenParam(pairs [][]byte, name string) bool {
	for i := 0; i < len(pairs); i += 2 {
		if is(pairs[i], name) {
			return true
		}
	}
	return false
}

// parseConfig checks raw as a value of p and returns the form CONFIG GET reports, or Redis's
// reason for refusing it. old is p's value now (client-output-buffer-limit changes only the
// classes it names).
func parseConfig(p *configParam, old string, raw []byte) (v, why string) {
	switch p.kind {
	case cfgBool:
		for _, w := range [...]string{"yes", "no"} {
			if is(raw, w) {
				return w, ""
			}
		}
		return "", "argument must be 'yes' or 'no'"
	case cfgEnum:
		for _, w := range p.words {
			if is(raw, w) {
				return cmp.Or(p.shown[w], w), ""
			}
		}
		return "", "argument(s) must be one of the following: " + strings.Join(p.words, ", ")
	case cfgInt:
		n, ok := parseInt(raw)
		if !ok {
			return "", "argument couldn't be parsed into an integer"
		}
		return p.bounded(n)
	case cfgMem:
		u, ok := parseMemory(raw)
		if !ok {
			return "", "argument must be a memory value"
		}
		return p.bounded(int64(u)) // as Redis, which keeps these signed: past 2^63 is negative
	case cfgMemUnsigned:
		u, ok := parseMemory(raw)
		if !ok {
			return "", "argument must be a memory value"
		}
		return strconv.FormatUint(u, 10), ""
	case cfgMemPercent:
		return parseMemoryPercent(raw)
	case cfgSave:
		return parseSave(string(raw))
	case cfgBufferLimits:
		return parseBufferLimits(old, string(raw))
	case cfgNotify:
		flags, ok := parseNotifyFlags(raw)
		if !ok {
			return "", "Invalid event class character. Use 'Ag$lshzxeKEtmdn'."
		}
		return formatNotifyFlags(flags), ""
	case cfgOOMValues:
		return parseOOMValues(string(raw))
	case cfgPercentiles:
		return parsePercentiles(string(raw))
	case cfgHostname:
		for _, c := range raw {
			if !isAlnum(c) && c != '-' && c != '.' {
				return "", "Hostnames may only contain alphanumeric characters, hyphens or dots"
			}
		}
	case cfgProcTitle:
		if !validProcTitle(string(raw)) {
			return "", "template format is invalid or contains unknown variables"
		}
	}
	return string(raw), ""
}

// bounded returns n's text if it is within p's bounds, else Redis's reason.
func (p *configParam) bounded(n int64) (string, string) {
	if n < p.min || n > p.max {
		return "", "argument must be between " + itoa(p.min) + " and " + itoa(p.max) + " inclusive"
	}
	if p.floor != 0 {
		n = max(n, p.floor)
	}
	if p.ceil != 0 {
		n = min(n, p.ceil)
	}
	return itoa(n), ""
}

// parseMemory reads a memory value as Redis's memtoull does: digits and an optional unit, b,
// k (1000), kb (1024), m, mb, g or gb in any case. No digits read as 0, too many saturate, and
// the unit's product wraps, as in Redis.
func parseMemory(b []byte) (uint64, bool) {
	i := 0
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	var mul uint64
	switch lower(b[i:]) {
	case "", "b":
		mul = 1
	case "k":
		mul = 1000
	case "kb":
		mul = 1 << 10
	case "m":
		mul = 1000 * 1000
	case "mb":
		mul = 1 << 20
	case "g":
		mul = 1000 * 1000 * 1000
	case "gb":
		mul = 1 << 30
	default:
		return 0, false
	}
	if i >= 128 { // Redis copies the digits into a buffer of 128 bytes
		return 0, false
	}
	var n uint64
	for _, c := range b[:i] {
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			n = math.MaxUint64
			break
		}
		n = n*10 + d
	}
	return n * mul, true
}

// parseMemoryPercent reads maxmemory-clients: a memory value, or a percent of maxmemory up to
// 100. Redis keeps a percent as a negative number, so a memory value past 2^63 reads as one.
func parseMemoryPercent(raw []byte) (string, string) {
	const bad = "argument must be a memory or percent value"
	const over = "percentage argument must be less or equal to 100"
	if len(raw) > 1 && raw[len(raw)-1] == '%' {
		pct, ok := parseInt(raw[:len(raw)-1])
		switch {
		case !ok || pct < 0:
			return "", bad
		case pct > 100:
			return "", over
		case pct == 0:
			return "0", ""
		}
		return itoa(pct) + "%", ""
	}
	u, ok := parseMemory(raw)
	switch n := int64(u); {
	case !ok:
		return "", bad
	case n < -100:
		return "", over
	case n < 0:
		return itoa(-n) + "%", ""
	default:
		return itoa(n), ""
	}
}

// strtoll reads s whole as C's strtoll(s, &end, 10) with Redis's check that end is s's end:
// leading white space and a sign are allowed, an overflow saturates, and "" reads as 0.
func strtoll(s string) (int64, bool) {
	i := 0
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	neg := i < len(s) && s[i] == '-'
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	start := i
	var mag uint64
	for ; i < len(s) && '0' <= s[i] && s[i] <= '9'; i++ {
		if mag <= (1<<63)/10 {
			mag = min(mag*10+uint64(s[i]-'0'), 1<<63)
		} else {
			mag = 1 << 63
		}
	}
	switch {
	case i == start:
		return 0, s == "" // no digits: end stays at s, which is its end only when s is empty
	case i != len(s):
		return 0, false
	case neg:
		return -int64(mag-1) - 1, true // -2^63 fits, 2^63 does not
	default:
		return int64(min(mag, math.MaxInt64)), true
	}
}

// parseSave reads save's "seconds changes ..." pairs, split on single spaces as Redis splits
// them: seconds at least 1, changes at least 0 (kept as a C int). "" means never.
func parseSave(raw string) (string, string) {
	if raw == "" {
		return "", ""
	}
	f := strings.Split(raw, " ")
	if len(f)%2 != 0 {
		return "", "Invalid save parameters"
	}
	for j, w := range f {
		n, ok := strtoll(w)
		if !ok || j%2 == 0 && n < 1 || j%2 == 1 && n < 0 {
			return "", "Invalid save parameters"
		}
		if j%2 == 1 {
			n = int64(int32(n))
		}
		f[j] = itoa(n)
	}
	return strings.Join(f, " "), ""
}

// bufferClasses are client-output-buffer-limit's classes in the order CONFIG GET lists them.
var bufferClasses = [...]string{"normal", "slave", "pubsub"}

// parseBufferLimits reads client-output-buffer-limit's "class hard soft seconds" groups and
// returns old with the classes named changed: hard and soft are memory values, seconds a
// number kept as a C int that must not be negative. replica names the slave class.
func parseBufferLimits(old, raw string) (string, string) {
	if raw == "" {
		return old, ""
	}
	f := strings.Split(raw, " ")
	if len(f)%4 != 0 {
		return "", "Wrong number of arguments in buffer limit configuration."
	}
	cur := strings.Split(old, " ")
	for j := 0; j < len(f); j += 4 {
		class := slices.Index(bufferClasses[:], strings.ToLower(f[j]))
		if strings.EqualFold(f[j], "replica") {
			class = 1
		}
		if class < 0 {
			return "", "Invalid client class specified in buffer limit configuration."
		}
		hard, ok1 := parseMemory([]byte(f[j+1]))
		soft, ok2 := parseMemory([]byte(f[j+2]))
		secs, ok3 := strtoll(f[j+3])
		if !ok1 || !ok2 || !ok3 || int32(secs) < 0 {
			return "", "Error in hard, soft or soft_seconds setting in buffer limit configuration."
		}
		cur[4*class+1] = strconv.FormatUint(hard, 10)
		cur[4*class+2] = strconv.FormatUint(soft, 10)
		cur[4*class+3] = itoa(int64(int32(secs)))
	}
	return strings.Join(cur, " "), ""
}

// parseOOMValues reads oom-score-adj-values: three numbers in [-2000, 2000].
func parseOOMValues(raw string) (string, string) {
	var f []string
	if raw != "" {
		f = strings.Split(raw, " ")
	}
	if len(f) != 3 {
		return "", "wrong number of arguments"
	}
	for j, w := range f {
		n, ok := strtoll(w)
		if n = int64(int32(n)); !ok || n < -2000 || n > 2000 {
			return "", "Invalid oom-score-adj-values, elements must be between -2000 and 2000."
		}
		f[j] = itoa(n)
	}
	return strings.Join(f, " "), ""
}

// parsePercentiles reads latency-tracking-info-percentiles: numbers in [0, 100] as C's
// strtod reads them, written back as Redis writes them (%f without trailing zeros).
func parsePercentiles(raw string) (string, string) {
	if raw == "" {
		return "", ""
	}
	f := strings.Split(raw, " ")
	for j, w := range f {
		x, _, ok := strtod([]byte(strings.TrimLeft(w, " \t\n\v\f\r"))) // strtod skips leading space
		switch {
		case !ok || math.IsNaN(x):
			return "", "Invalid latency-tracking-info-percentiles parameters"
		case x < 0 || x > 100:
			return "", "latency-tracking-info-percentiles parameters should sit between [0.0,100.0]"
		}
		f[j] = strings.TrimSuffix(strings.TrimRight(strconv.FormatFloat(x, 'f', 6, 64), "0"), ".")
	}
	return strings.Join(f, " "), ""
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// procTitleVars are proc-title-template's variables, with what each expands to when Redis
// checks a template (a template that expands to nothing but spaces is refused).
var procTitleVars = map[string]string{
	"title": "", "listen-addr": "*:6379", "server-mode": "", "config-file": "redis.conf",
	"port": "6379", "tls-port": "0", "unixsocket": "",
}

// validProcTitle reports whether Redis takes t as proc-title-template: {name} names a
// variable, {{ and }} stand for braces, and something other than spaces remains.
func validProcTitle(t string) bool {
	var out strings.Builder
	for i := 0; i < len(t); i++ {
		switch c := t[i]; {
		case (c == '{' || c == '}') && i+1 < len(t) && t[i+1] == c:
			out.WriteByte(c)
			i++
		case c == '{':
			end := strings.IndexByte(t[i+1:], '}')
			if end < 0 {
				return false
			}
			v, ok := procTitleVars[t[i+1:i+1+end]]
			if !ok {
				return false
			}
			out.WriteString(v)
			i += end + 1
		default:
			out.WriteByte(c)
		}
	}
	return strings.Trim(out.String(), " ") != ""
}
