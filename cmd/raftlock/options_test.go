package main

import (
	"crypto/tls"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/raftlock/raftlock/certs"
	"github.com/raftlock/raftlock/cluster"
)

func TestParseOptions(t *testing.T) {
	env := map[string]string{}
	getenv := func(k string) string { return env[k] }

	o, err := parseOptions(nil, getenv)
	if err != nil {
		t.Fatal(err)
	}
	if o.addr != "127.0.0.1:6379" || o.raftAddr != "127.0.0.1:7379" || o.dir != "./raftlock-data" || o.id != "node-127.0.0.1-7379" || o.advertise != o.addr {
		t.Errorf("defaults: %+v", o)
	}
	if o.leaderWait != time.Second {
		t.Errorf("default leader wait %v, want 1s", o.leaderWait)
	}
	if !o.groupCommit {
		t.Error("group commit off by default; want on")
	}
	for arg, want := range map[string]bool{"no": false, "yes": true} {
		if o, err := parseOptions([]string{"--group-commit", arg}, getenv); err != nil || o.groupCommit != want {
			t.Errorf("--group-commit %s = %v, %v; want %v", arg, o.groupCommit, err, want)
		}
	}
	// Commit-paced group commit was removed (raftnode/groupcommit.go says why): a node started
	// with the setting older test builds took must say so, not run without it.
	if _, err := parseOptions([]string{"--group-commit", "paced"}, getenv); err == nil {
		t.Error("--group-commit paced accepted; want an error")
	}
	if o, err := parseOptions([]string{"--leader-wait", "0"}, getenv); err != nil || o.leaderWait >= 0 {
		t.Errorf("--leader-wait 0 = %v, %v; want no wait (negative for the server)", o.leaderWait, err)
	}

	env["RAFTLOCK_ADDR"] = "127.0.0.1:7000"
	env["RAFTLOCK_RAFT_ADDR"] = "127.0.0.1:8000"
	o, err = parseOptions([]string{"--addr", "127.0.0.1:9000", "--id", "n1", "--peers", "n1=h:1,n2=h:2",
		"--snapshot-threshold", "64", "--snapshot-interval", "1s", "--redirect", "true"}, getenv)
	if err != nil {
		t.Fatal(err)
	}
	if o.addr != "127.0.0.1:9000" || o.raftAddr != "127.0.0.1:8000" {
		t.Errorf("flag over env over default: addr %s raft %s", o.addr, o.raftAddr)
	}
	if diff := cmp.Diff(o.peers, []cluster.Peer{{ID: "n1", RaftAddr: "h:1"}, {ID: "n2", RaftAddr: "h:2"}}); diff != "" {
		t.Errorf("peers (-got +want):\n%s", diff)
	}
	if o.snapshotThreshold != 64 || o.snapshotInterval != time.Second || !o.redirect {
		t.Errorf("tuning: %+v", o)
	}

	for _, bad := range [][]string{
		{"--peers", "n1"},
		{"--id", "n9", "--peers", "n1=h:1"},
		{"--id", "n1", "--peers", "n1=h:1", "--join", "h:6379"},
		{"--snapshot-threshold", "-1"},
		{"--snapshot-interval", "soon"},
		{"--redirect", "maybe"},
		{"--leader-wait", "-1s"},
		{"--max-keys", "0"},
		{"--max-keys", "many"},
		{"--max-elements", "0"},
		{"--max-elements", "-1"},
		{"--leader-wait", "soon"},
		{"--group-commit", "2"},
		{"--group-commit", "on"},
		{"--bogus"},
		{"extra"},
	} {
		if _, err := parseOptions(bad, getenv); err == nil {
			t.Errorf("parseOptions(%q) accepted it", bad)
		}
	}
	if _, err := parseOptions([]string{"--config", "/nonexistent"}, getenv); err == nil || !strings.Contains(err.Error(), "config") {
		t.Errorf("missing config file: %v", err)
	}
}

func TestParseTLSOptions(t *testing.T) {
	getenv := func(string) string { return "" }
	o, err := parseOptions([]string{"--tls-cert-file", "c", "--tls-key-file", "k", "--tls-ca-cert-file", "ca",
		"--raft-tls-cert-file", "rc", "--raft-tls-key-file", "rk", "--raft-tls-ca-cert-file", "rca"}, getenv)
	if err != nil {
		t.Fatal(err)
	}
	if o.tls != (certs.Files{Cert: "c", Key: "k", CA: "ca"}) || o.raftTLS != (certs.Files{Cert: "rc", Key: "rk", CA: "rca"}) ||
		o.tlsAuthClients != tls.RequireAndVerifyClientCert {
		t.Errorf("TLS options: %+v %+v %v; want the files, and client certificates required (Redis's default)", o.tls, o.raftTLS, o.tlsAuthClients)
	}
	for arg, want := range map[string]tls.ClientAuthType{"no": tls.NoClientCert, "optional": tls.VerifyClientCertIfGiven} {
		o, err := parseOptions([]string{"--tls-cert-file", "c", "--tls-key-file", "k", "--tls-auth-clients", arg}, getenv)
		if err != nil && arg == "no" || err == nil && o.tlsAuthClients != want {
			t.Errorf("--tls-auth-clients %s: %v, %v; want %v", arg, o.tlsAuthClients, err, want)
		}
	}
	for _, bad := range [][]string{
		{"--tls-cert-file", "c"},
		{"--tls-key-file", "k"},
		{"--tls-cert-file", "c", "--tls-key-file", "k"}, // auth-clients yes needs a CA
		{"--tls-cert-file", "c", "--tls-key-file", "k", "--tls-auth-clients", "optional"},
		{"--tls-cert-file", "c", "--tls-key-file", "k", "--tls-auth-clients", "maybe"},
		{"--tls-ca-cert-file", "ca"},
		{"--raft-tls-cert-file", "rc", "--raft-tls-key-file", "rk"},
	} {
		if _, err := parseOptions(bad, getenv); err == nil {
			t.Errorf("parseOptions(%q) accepted it", bad)
		}
	}
}

func TestBoundsOptions(t *testing.T) {
	getenv := func(string) string { return "" }
	o, err := parseOptions(nil, getenv)
	if err != nil {
		t.Fatal(err)
	}
	if o.maxClients != 10000 || o.idleTimeout != 0 || o.maxMemory != 0 || o.pprof {
		t.Errorf("defaults: maxclients %d timeout %v maxmemory %d pprof %v", o.maxClients, o.idleTimeout, o.maxMemory, o.pprof)
	}
	o, err = parseOptions([]string{"--maxclients", "50", "--timeout", "300", "--maxmemory", "2gb", "--pprof", "true"}, getenv)
	if err != nil {
		t.Fatal(err)
	}
	if o.maxClients != 50 || o.idleTimeout != 5*time.Minute || o.maxMemory != 2<<30 || !o.pprof {
		t.Errorf("set: maxclients %d timeout %v maxmemory %d pprof %v", o.maxClients, o.idleTimeout, o.maxMemory, o.pprof)
	}
	for _, tc := range []struct {
		in   string
		want uint64
	}{{"0", 0}, {"1024", 1024}, {"1k", 1000}, {"1kb", 1024}, {"100MB", 100 << 20}, {"3m", 3e6}, {"1g", 1e9}, {"1Gb", 1 << 30}, {"12b", 12}} {
		if got, err := parseMemory(tc.in); err != nil || got != tc.want {
			t.Errorf("parseMemory(%q) = %d, %v; want %d", tc.in, got, err, tc.want)
		}
	}
	for _, bad := range [][]string{{"--maxclients", "0"}, {"--timeout", "-1"}, {"--timeout", "1s"}, {"--maxmemory", "lots"}, {"--maxmemory", "1tb"}, {"--pprof", "maybe"}} {
		if _, err := parseOptions(bad, getenv); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("%v: err %v, want one naming the flag", bad, err)
		}
	}
}

// TestRaftAddressNeedsTLS: a raft address (bound or advertised) that is not loopback needs raft
// mutual TLS or --insecure-raft; loopback needs neither.
func TestRaftAddressNeedsTLS(t *testing.T) {
	getenv := func(string) string { return "" }
	tlsFlags := []string{"--raft-tls-cert-file", "rc", "--raft-tls-key-file", "rk", "--raft-tls-ca-cert-file", "rca"}
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{nil, true},
		{[]string{"--raft-addr", "127.0.0.2:7379"}, true},
		{[]string{"--raft-addr", "localhost:7379"}, true},
		{[]string{"--raft-addr", "[::1]:7379"}, true},
		{[]string{"--raft-addr", "10.0.0.1:7379"}, false},
		{[]string{"--raft-addr", "0.0.0.0:7379"}, false},
		{[]string{"--raft-addr", ":7379"}, false},
		{[]string{"--raft-addr", "db1.example:7379"}, false},
		{[]string{"--raft-advertise", "10.0.0.1:7379"}, false},
		{append([]string{"--raft-addr", "10.0.0.1:7379"}, tlsFlags...), true},
		{[]string{"--raft-addr", "10.0.0.1:7379", "--insecure-raft", "true"}, true},
	} {
		o, err := parseOptions(tc.args, getenv)
		if (err == nil) != tc.ok {
			t.Errorf("parseOptions(%q): %v; want accepted %v", tc.args, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--insecure-raft") {
			t.Errorf("parseOptions(%q): %v; want the error to name --insecure-raft", tc.args, err)
		}
		if err == nil && o.insecureRaft != slices.Contains(tc.args, "--insecure-raft") {
			t.Errorf("parseOptions(%q): insecureRaft %v", tc.args, o.insecureRaft)
		}
	}
}

// TestClusterClientTLSNeedsCA: a node of a cluster whose client port speaks TLS verifies the
// other nodes against its CA, never the system's roots: without one it does not start.
func TestClusterClientTLSNeedsCA(t *testing.T) {
	getenv := func(string) string { return "" }
	base := []string{"--tls-cert-file", "c", "--tls-key-file", "k", "--tls-auth-clients", "no"}
	if _, err := parseOptions(base, getenv); err != nil {
		t.Errorf("a single node with client TLS and no CA: %v; want accepted", err)
	}
	for _, extra := range [][]string{{"--join", "127.0.0.1:6379"}, {"--id", "n1", "--peers", "n1=127.0.0.1:7379,n2=127.0.0.1:7380"}} {
		if _, err := parseOptions(append(slices.Clone(base), extra...), getenv); err == nil || !strings.Contains(err.Error(), "--tls-ca-cert-file") {
			t.Errorf("client TLS without a CA and %q: %v; want refused, naming --tls-ca-cert-file", extra, err)
		}
	}
}

// A non-loopback HTTP address without credentials is refused when the options are read, before
// the node opens its store (ops checks again with the users in force).
func TestHTTPAddressNeedsCredentials(t *testing.T) {
	getenv := func(string) string { return "" }
	for _, tc := range []struct {
		args []string
		ok   bool
	}{
		{nil, true},
		{[]string{"--metrics-addr", "127.0.0.1:9121"}, true},
		{[]string{"--metrics-addr", "localhost:9121"}, true},
		{[]string{"--metrics-addr", "0.0.0.0:9121"}, false},
		{[]string{"--metrics-addr", ":9121"}, false},
		{[]string{"--metrics-addr", "10.0.0.1:9121"}, false},
		{[]string{"--metrics-addr", "10.0.0.1:9121", "--requirepass", "pw"}, true},
		{[]string{"--metrics-addr", "10.0.0.1:9121", "--aclfile", "users.acl"}, true},
		{[]string{"--metrics-addr", "10.0.0.1:9121", "--insecure-http", "yes"}, true},
	} {
		_, err := parseOptions(tc.args, getenv)
		if (err == nil) != tc.ok {
			t.Errorf("parseOptions(%q): %v; want accepted %v", tc.args, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--insecure-http") {
			t.Errorf("parseOptions(%q): %v; want the error to name --insecure-http", tc.args, err)
		}
	}
}
