package tests

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/resp"
	"github.com/raftlock/raftlock/tests/testutil"
)

// clientTLSFlags are the flags of a node whose client port speaks TLS with cert, verifying
// clients against ca as auth says (yes, no, optional).
func clientTLSFlags(ca *testutil.CA, cert testutil.Issued, auth string) []string {
	return []string{"--tls-cert-file", cert.CertFile, "--tls-key-file", cert.KeyFile,
		"--tls-ca-cert-file", ca.File, "--tls-auth-clients", auth}
}

// startNodeWith starts a single node with more flags, the tests reaching its client port with
// clientTLS (nil: plain TCP), and returns once it serves requests.
func startNodeWith(t *testing.T, clientTLS *tls.Config, args ...string) *node {
	t.Helper()
	var lastErr error
	for range 3 { // a port picked free may be taken by someone else before the node binds it
		n := &node{
			dir:      t.TempDir(),
			raftAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))),
			id:       "n1",
			args:     args,
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
		if clientTLS != nil {
			testutil.UseTLS(t, addr, clientTLS)
		}
		if lastErr = n.launch(t, addr); lastErr == nil {
			return n
		}
	}
	t.Fatalf("start raftlock: %v", lastErr)
	return nil
}

// pingTLS dials addr with config and sends PING: nil means PONG came back.
func pingTLS(addr string, config *tls.Config) error {
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	c, err := resp.DialTLS(ctx, addr, ioTimeout, config)
	if err != nil {
		return err
	}
	defer c.Close()
	// In TLS 1.3 the client's side of the handshake ends before the server has checked the
	// client's certificate: a refusal arrives as the first read's error.
	v, err := c.Do(ctx, "PING")
	if err != nil {
		return err
	}
	if v.Text() != "PONG" {
		return fmt.Errorf("PING: %v", v)
	}
	return nil
}

// TestTLSClientPort: with cert and key set, the client port speaks TLS only; go-redis locks
// over it; tls-auth-clients decides, as in Redis, whether a client needs a certificate of the CA.
func TestTLSClientPort(t *testing.T) {
	ca := testutil.NewCA(t, "cluster")
	other := testutil.NewCA(t, "stranger")
	srvCert := ca.Issue(t, "node")
	cli := ca.Issue(t, "client")
	foreign := other.Issue(t, "intruder")

	for _, tc := range []struct {
		auth                      string
		noCert, withCert, strange bool // whether each client gets in
	}{
		{"yes", false, true, false},
		{"optional", true, true, false},
		{"no", true, true, true},
	} {
		t.Run("auth-clients-"+tc.auth, func(t *testing.T) {
			n := startNodeWith(t, ca.ClientTLS(&cli), clientTLSFlags(ca, srvCert, tc.auth)...)

			rdb := newClient(t, n.addr, 3)
			ctx := testContext(t, 10*time.Second)
			tok, err := rdb.Do(ctx, "LOCK", "job", "10000").Int64()
			if err != nil || tok <= 0 {
				t.Fatalf("LOCK job 10000 over TLS: %d, %v; want a token", tok, err)
			}
			if got, err := rdb.Do(ctx, "UNLOCK", "job", tok).Int64(); err != nil || got != 1 {
				t.Fatalf("UNLOCK job %d over TLS: %d, %v; want 1", tok, got, err)
			}

			// Plain TCP: the server reads the command as a broken handshake and hangs up.
			pc, err := dialRESP(n.addr)
			if err != nil {
				t.Fatal(err)
			}
			defer pc.Close()
			if reply, err := pc.do("PING"); err == nil {
				t.Errorf("PING over plain TCP: %q; want the connection refused", reply)
			}

			for _, c := range []struct {
				name string
				cfg  *tls.Config
				want bool
			}{
				{"no certificate", ca.ClientTLS(nil), tc.noCert},
				{"a certificate of the CA", ca.ClientTLS(&cli), tc.withCert},
				{"a certificate of another CA", ca.ClientTLS(&foreign), tc.strange},
			} {
				err := pingTLS(n.addr, c.cfg)
				if (err == nil) != c.want {
					t.Errorf("a client with %s: PING err %v; want admitted %v", c.name, err, c.want)
				}
			}
		})
	}
}

// TestTLSRedisCLI runs the README's TLS line: redis-cli --tls --cacert --cert --key.
func TestTLSRedisCLI(t *testing.T) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli not installed: %v", err)
	}
	help, _ := exec.Command("redis-cli", "--help").CombinedOutput()
	if !strings.Contains(string(help), "--tls") {
		t.Skip("this redis-cli was built without TLS (its --help has no --tls)")
	}
	ca := testutil.NewCA(t, "cluster")
	cli := ca.Issue(t, "client")
	n := startNodeWith(t, ca.ClientTLS(&cli), clientTLSFlags(ca, ca.Issue(t, "node"), "yes")...)

	tlsArgs := []string{"--tls", "--cacert", ca.File, "--cert", cli.CertFile, "--key", cli.KeyFile}
	out := redisCLI(t, n.addr, "", append(tlsArgs, "LOCK", "job", "10000")...)
	tok, err := strconv.ParseInt(strings.TrimSuffix(out, "\n"), 10, 64)
	if err != nil || tok <= 0 {
		t.Fatalf("redis-cli --tls LOCK job 10000: %q; want a token", out)
	}
	if out := redisCLI(t, n.addr, "", append(tlsArgs, "UNLOCK", "job", strconv.FormatInt(tok, 10))...); out != "1\n" {
		t.Errorf("redis-cli --tls UNLOCK job %d: %q; want 1", tok, out)
	}

	// With a password as well (issue #13's "done means"): a client without it changes nothing,
	// one with it locks.
	if out := redisCLI(t, n.addr, "", append(tlsArgs, "ACL", "SETUSER", "default", "on", ">s3cret")...); out != "OK\n" {
		t.Fatalf("redis-cli --tls ACL SETUSER default on >s3cret: %q; want OK", out)
	}
	if out := redisCLI(t, n.addr, "", append(tlsArgs, "LOCK", "job2", "10000")...); !strings.HasPrefix(out, "NOAUTH") {
		t.Errorf("redis-cli --tls LOCK without the password: %q; want NOAUTH", out)
	}
	out = redisCLI(t, n.addr, "", append(tlsArgs, "--no-auth-warning", "-a", "s3cret", "LOCK", "job2", "10000")...)
	if tok, err := strconv.ParseInt(strings.TrimSuffix(out, "\n"), 10, 64); err != nil || tok <= 0 {
		t.Errorf("redis-cli --tls -a s3cret LOCK job2 10000: %q; want a token", out)
	}
}

// TestTLSCluster: three nodes with raft over mutual TLS and TLS client ports form a cluster,
// elect, replicate, and followers forward over TLS to the leader, which requires their
// certificates (tls-auth-clients yes); a fourth joins.
func TestTLSCluster(t *testing.T) {
	ca := newClusterCA(t)
	c := newSecureCluster(t, 3, ca, true)

	l := c.leader()
	for i, f := range c.others(l) {
		rdb := newClient(t, f.addr, 2)
		ctx := testContext(t, 10*time.Second)
		key := "job" + strconv.Itoa(i)
		tok, err := rdb.Do(ctx, "LOCK", key, "60000", "OWNER", "alice").Int64()
		if err != nil || tok <= 0 {
			t.Fatalf("LOCK %s via follower %s: %d, %v; want a token", key, f.id, tok, err)
		}
		st, held, err := lockInfo(ctx, newClient(t, l.addr, 3), key)
		if err != nil || !held || st.token != tok || st.owner != "alice" {
			t.Fatalf("LOCKINFO %s on the leader: %+v held %v, %v; want alice's token %d", key, st, held, err, tok)
		}
	}

	// A fourth node joins through a member's TLS client port (RAFT ADD, then PROMOTE, over
	// TLS) and catches up over raft mTLS, each with its own node certificate.
	n4 := c.joinWith(c.others(l)[0], func(id string) []string {
		cert := ca.node(t, id)
		return append(ca.raftFlags(cert), ca.clientFlags(cert)...)
	})
	waitMember(t, l, n4.id, "voter")
	c.digests() // every node applied the same table
}

// TestTLSNodeLinksVerifyMembers: a node calling another node's client port (a follower
// forwarding, a joiner) accepts only a node certificate of the CA: a server presenting a
// client certificate of the same CA (clientAuth only, no node name) is refused, so a join
// through it fails and sends it nothing (the old config took any certificate of the CA, or of
// the system's roots, whatever its usage).
func TestTLSNodeLinksVerifyMembers(t *testing.T) {
	ca := newClusterCA(t)
	cli := ca.client(t, "tester")
	impostor := ca.client(t, "impostor")
	// A "node" whose client port presents a client certificate: it serves TLS, but is no node
	// (and names no host: the test's own client does not check it).
	loose := ca.clientTLS(&cli)
	loose.InsecureSkipVerify = true
	fake := startNodeWith(t, loose, "--tls-cert-file", impostor.CertFile, "--tls-key-file", impostor.KeyFile,
		"--tls-ca-cert-file", ca.File, "--tls-auth-clients", "yes")
	joiner := &node{id: "n2", dir: t.TempDir(), raftAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))}
	cert := ca.node(t, "n2")
	joiner.args = append(append([]string{"--join", fake.addr}, ca.raftFlags(cert)...), ca.clientFlags(cert)...)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	testutil.UseTLS(t, addr, ca.clientTLS(&cli))
	if err := joiner.start(t, addr); err != nil {
		t.Fatal(err)
	}
	joiner.ExpectExit() // a join that cannot reach its member may give up
	testutil.WaitFor(t, 10*time.Second, func() error {
		if !strings.Contains(joiner.Log(), "certs: peer certificate") {
			return errors.New("the joiner's log does not say yet why it refused the impostor's certificate")
		}
		return nil
	})
	if got, err := call(fake.addr, "RAFT", "MEMBERS"); err != nil || strings.Contains(fmt.Sprint(got), "n2") {
		t.Errorf("RAFT MEMBERS on the impostor: %v, %v; want no n2 (the joiner refused its certificate)", got, err)
	}
}

// forgeVote sends a RequestVote with term through hashicorp/raft's own NetworkTransport, as an
// attacker who can reach the raft port would. It asks as a leadership transfer, which a node
// with a leader answers anyway (the issue's attack).
func forgeVote(t *testing.T, raftAddr string, term uint64) error {
	t.Helper()
	trans, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 2*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer trans.Close()
	var out raft.RequestVoteResponse
	return trans.RequestVote("", raft.ServerAddress(raftAddr), &raft.RequestVoteRequest{
		RPCHeader:          raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, Addr: []byte(trans.LocalAddr())},
		Term:               term,
		LastLogIndex:       1 << 40,
		LastLogTerm:        term,
		LeadershipTransfer: true,
	}, &out)
}

// forgeAppend sends an AppendEntries with term and one made-up entry, as forgeVote does.
func forgeAppend(t *testing.T, raftAddr string, term uint64) error {
	t.Helper()
	trans, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 2*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer trans.Close()
	var out raft.AppendEntriesResponse
	return trans.AppendEntries("", raft.ServerAddress(raftAddr), &raft.AppendEntriesRequest{
		RPCHeader:    raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, Addr: []byte(trans.LocalAddr())},
		Term:         term,
		PrevLogEntry: 0,
		Entries:      []*raft.Log{{Index: 1 << 30, Term: term, Type: raft.LogCommand, Data: []byte("intruder")}},
	}, &out)
}

// forgeTransport returns a hashicorp/raft NetworkTransport of the attacker's own, closed when
// the test ends, and the RPC header its frames carry.
func forgeTransport(t *testing.T) (*raft.NetworkTransport, raft.RPCHeader) {
	t.Helper()
	trans, err := raft.NewTCPTransport("127.0.0.1:0", nil, 1, 2*time.Second, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { trans.Close() })
	return trans, raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, Addr: []byte(trans.LocalAddr())}
}

// forgeConfigAppend sends an AppendEntries with term whose one entry is a LogConfiguration of
// garbage: on a plain transport, the issue's entry that makes raft panic on every restart.
func forgeConfigAppend(t *testing.T, raftAddr string, term uint64) error {
	t.Helper()
	trans, hdr := forgeTransport(t)
	var out raft.AppendEntriesResponse
	return trans.AppendEntries("", raft.ServerAddress(raftAddr), &raft.AppendEntriesRequest{
		RPCHeader: hdr,
		Term:      term,
		Entries:   []*raft.Log{{Index: 1 << 30, Term: term, Type: raft.LogConfiguration, Data: []byte("\xffgarbage")}},
	}, &out)
}

// forgeSnapshot sends an InstallSnapshot with term and a made-up table: on a plain transport it
// would replace the node's whole state.
func forgeSnapshot(t *testing.T, raftAddr string, term uint64) error {
	t.Helper()
	trans, hdr := forgeTransport(t)
	data := []byte("intruder snapshot")
	var out raft.InstallSnapshotResponse
	return trans.InstallSnapshot("", raft.ServerAddress(raftAddr), &raft.InstallSnapshotRequest{
		RPCHeader:          hdr,
		SnapshotVersion:    raft.SnapshotVersionMax,
		Term:               term,
		LastLogIndex:       1 << 30,
		LastLogTerm:        term,
		Size:               int64(len(data)),
		ConfigurationIndex: 1 << 30,
	}, &out, bytes.NewReader(data))
}

// forgeTimeoutNow sends a TimeoutNow, the leadership-transfer order that makes a node start an
// election at once.
func forgeTimeoutNow(t *testing.T, raftAddr string) error {
	t.Helper()
	trans, hdr := forgeTransport(t)
	var out raft.TimeoutNowResponse
	return trans.TimeoutNow("", raft.ServerAddress(raftAddr), &raft.TimeoutNowRequest{RPCHeader: hdr}, &out)
}

func raftTerm(t *testing.T, addr string) uint64 {
	t.Helper()
	info, err := infoRaft(addr)
	if err != nil {
		t.Fatal(err)
	}
	term, err := strconv.ParseUint(info["raft_term"], 10, 64)
	if err != nil {
		t.Fatalf("INFO raft: raft_term %q: %v", info["raft_term"], err)
	}
	return term
}

// TestRaftForgedFrames is the issue's raft-port attack. Without mutual TLS, raw raft frames are
// refused (they lack the raft handshake), but a forger that copies a member's hello (the cluster
// ID is no secret) still moves the node's term with a RequestVote and makes a follower the
// leader with a TimeoutNow (the controls: plain raft authenticates no one, which is why a raft
// address that is not loopback needs mutual TLS); with mutual TLS every forged frame
// (RequestVote, AppendEntries, one carrying a garbage configuration, InstallSnapshot,
// TimeoutNow) fails at the handshake, before raft reads a frame, and the cluster's leader, terms
// and table stay as they were. (TestRaftPeersAreMembers does the same with certificates of the
// cluster's own CA.)
func TestRaftForgedFrames(t *testing.T) {
	t.Run("plain-transport-control", func(t *testing.T) {
		n := startNode(t, t.TempDir())
		before := raftTerm(t, n.addr)
		forged := before + 1000
		if err := forgeVote(t, n.raftAddr, forged); err == nil {
			t.Fatalf("forged RequestVote over plain TCP without the raft handshake: answered; want refused")
		}
		if err := forgeVoteAs(t, n.raftAddr, forged, helloFrame{cluster: clusterID(t, n.addr), from: n.id, to: n.id}); err != nil {
			t.Fatalf("forged RequestVote over plain TCP with a member's hello: %v; want it answered (plain raft authenticates no one)", err)
		}
		testutil.WaitFor(t, 5*time.Second, func() error {
			if got := raftTerm(t, n.addr); got < forged {
				return fmt.Errorf("term %d after the forged vote for term %d", got, forged)
			}
			return nil
		})
	})

	t.Run("plain-transport-control-timeout-now", func(t *testing.T) {
		c := newCluster(t, 3)
		l := c.leader()
		f := c.others(l)[0]
		if err := forgeTimeoutNow(t, f.raftAddr); err == nil {
			t.Fatalf("forged TimeoutNow to %s over plain TCP without the raft handshake: answered; want refused", f.id)
		}
		trans, hdr := forger{hello: &helloFrame{cluster: clusterID(t, l.addr), from: l.id, to: f.id}}.transport(t)
		var out raft.TimeoutNowResponse
		if err := trans.TimeoutNow("", raft.ServerAddress(f.raftAddr), &raft.TimeoutNowRequest{RPCHeader: hdr}, &out); err != nil {
			t.Fatalf("forged TimeoutNow to %s over plain TCP with the leader's hello: %v; want it answered", f.id, err)
		}
		testutil.WaitFor(t, 10*time.Second, func() error {
			got, err := c.findLeader()
			if err != nil {
				return err
			}
			if got.id != f.id {
				return fmt.Errorf("leader %s after the forged TimeoutNow to %s (leader was %s)", got.id, f.id, l.id)
			}
			return nil
		})
	})

	t.Run("mutual-tls", func(t *testing.T) {
		ca := newClusterCA(t)
		c := newSecureCluster(t, 3, ca, false)
		l := c.leader()
		tok, err := callInt(l.addr, "LOCK", "job", "600000", "OWNER", "alice")
		if err != nil {
			t.Fatal(err)
		}
		before := c.digests()
		terms := map[string]uint64{}
		for _, n := range c.live() {
			terms[n.id] = raftTerm(t, n.addr)
		}
		for _, n := range c.live() {
			forged := terms[n.id] + 1000
			if err := forgeVote(t, n.raftAddr, forged); err == nil {
				t.Errorf("forged RequestVote to %s: answered; want the connection refused", n.id)
			}
			if err := forgeAppend(t, n.raftAddr, forged); err == nil {
				t.Errorf("forged AppendEntries to %s: answered; want the connection refused", n.id)
			}
			if err := forgeConfigAppend(t, n.raftAddr, forged); err == nil {
				t.Errorf("forged AppendEntries with a garbage configuration to %s: answered; want the connection refused", n.id)
			}
			if err := forgeSnapshot(t, n.raftAddr, forged); err == nil {
				t.Errorf("forged InstallSnapshot to %s: answered; want the connection refused", n.id)
			}
			if err := forgeTimeoutNow(t, n.raftAddr); err == nil {
				t.Errorf("forged TimeoutNow to %s: answered; want the connection refused", n.id)
			}
		}
		// A certificate from another CA is refused the same way, at the handshake.
		stranger := newClusterCA(t).node(t, "n2")
		cfg := ca.clientTLS(&stranger)
		cfg.InsecureSkipVerify = true // the attacker does not care who the server is
		if err := rawTLSRead(l.raftAddr, cfg); err == nil {
			t.Errorf("a raft peer with another CA's certificate: handshake and read succeeded; want refused")
		}
		if got := c.leader(); got.id != l.id {
			t.Errorf("leader %s after the forged frames; want %s still", got.id, l.id)
		}
		for _, n := range c.live() {
			if got := raftTerm(t, n.addr); got != terms[n.id] {
				t.Errorf("%s: term %d after the forged frames; want %d", n.id, got, terms[n.id])
			}
		}
		// (digests writes an entry of its own first: the applied index moves, the table not.)
		if after := c.digests(); after.sum != before.sum {
			t.Errorf("table digest %s after the forged frames; want %s", after.sum, before.sum)
		}
		st, held, err := lockInfo(testContext(t, 5*time.Second), newClient(t, l.addr, 3), "job")
		if err != nil || !held || st.token != tok || st.owner != "alice" {
			t.Errorf("LOCKINFO job: %+v held %v, %v; want alice's token %d", st, held, err, tok)
		}
	})
}

// forgeVoteAs is forgeVote over a connection that starts with hello.
func forgeVoteAs(t *testing.T, raftAddr string, term uint64, hello helloFrame) error {
	t.Helper()
	trans, hdr := forger{hello: &hello}.transport(t)
	var out raft.RequestVoteResponse
	return trans.RequestVote("", raft.ServerAddress(raftAddr), &raft.RequestVoteRequest{
		RPCHeader: hdr, Term: term, LastLogIndex: 1 << 40, LastLogTerm: term, LeadershipTransfer: true,
	}, &out)
}

// rawTLSRead dials addr over TLS with cfg and reads: nil means the server sent something back
// (it never should to a raft client that has not asked anything; a refusal is an error).
func rawTLSRead(addr string, cfg *tls.Config) error {
	nc, err := tls.DialWithDialer(&net.Dialer{Timeout: ioTimeout}, "tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(ioTimeout))
	// A byte raft would read as an RPC type: the server must never get that far.
	if _, err := nc.Write([]byte{0}); err != nil {
		return err
	}
	_, err = nc.Read(make([]byte, 1))
	return err
}

// peerSerial dials addr over TLS with cfg and returns the serial number of the certificate the
// server presented.
func peerSerial(addr string, cfg *tls.Config) (string, error) {
	nc, err := tls.DialWithDialer(&net.Dialer{Timeout: ioTimeout}, "tcp", addr, cfg)
	if err != nil {
		return "", err
	}
	defer nc.Close()
	return nc.ConnectionState().PeerCertificates[0].SerialNumber.String(), nil
}

// TestTLSReload: SIGHUP makes a node read its certificates again, on both ports: a new pair of
// the same CA is what the next connection sees; a broken file keeps the working pair.
func TestTLSReload(t *testing.T) {
	ca := newClusterCA(t)
	cli := ca.client(t, "client")
	clientCert := ca.nodeAs(t, "n1", "node")
	raftCert := ca.nodeAs(t, "n1", "raft")
	n := startNodeWith(t, ca.clientTLS(&cli), append(ca.clientFlags(clientCert), ca.raftFlags(raftCert)...)...)
	raftClient := ca.clientTLS(&cli)

	check := func(want map[string]*x509.Certificate) {
		t.Helper()
		testutil.WaitFor(t, 10*time.Second, func() error {
			for port, addr := range map[string]string{"client": n.addr, "raft": n.raftAddr} {
				got, err := peerSerial(addr, raftClient)
				if err != nil {
					return fmt.Errorf("%s port: %w", port, err)
				}
				if got != want[port].SerialNumber.String() {
					return fmt.Errorf("%s port presents serial %s; want %s", port, got, want[port].SerialNumber)
				}
			}
			return nil
		})
	}
	check(map[string]*x509.Certificate{"client": clientCert.Cert, "raft": raftCert.Cert})

	newPair := ca.nodeAs(t, "n1", "node") // the same files, a new pair
	newRaft := ca.nodeAs(t, "n1", "raft")
	if newPair.Cert.SerialNumber.Cmp(clientCert.Cert.SerialNumber) == 0 {
		t.Fatal("the new certificate has the old serial")
	}
	if err := n.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	check(map[string]*x509.Certificate{"client": newPair.Cert, "raft": newRaft.Cert})
	if err := pingTLS(n.addr, ca.clientTLS(&cli)); err != nil {
		t.Fatalf("PING after the reload: %v", err)
	}

	// A broken certificate file: the reload fails, is logged, and the node keeps the pair it has.
	if err := os.WriteFile(newPair.CertFile, []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := n.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		if !strings.Contains(n.Log(), "TLS reload failed") {
			return fmt.Errorf("no reload failure logged yet")
		}
		return nil
	})
	check(map[string]*x509.Certificate{"client": newPair.Cert, "raft": newRaft.Cert})
	if err := pingTLS(n.addr, ca.clientTLS(&cli)); err != nil {
		t.Fatalf("PING after the failed reload: %v", err)
	}
}
