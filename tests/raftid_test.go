package tests

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/raftlock/raftlock/certs"
	"github.com/raftlock/raftlock/tests/testutil"
)

// clusterCA is a CA made for one test, issuing certificates as `raftlock cert` does: node
// certificates that name their node, client certificates that name none.
type clusterCA struct {
	*certs.Authority
	dir  string
	File string // the CA certificate's PEM file
}

func newClusterCA(t *testing.T) *clusterCA {
	t.Helper()
	a, err := certs.NewAuthority("test cluster CA", 0)
	if err != nil {
		t.Fatal(err)
	}
	ca := &clusterCA{Authority: a, dir: t.TempDir()}
	if ca.File, _, err = certs.WriteFiles(ca.dir, "ca", a.Cert, a.Key); err != nil {
		t.Fatal(err)
	}
	return ca
}

func (ca *clusterCA) write(t *testing.T, name string, is *certs.Issued, err error) testutil.Issued {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
	out := testutil.Issued{Cert: is.Cert}
	if out.CertFile, out.KeyFile, err = certs.WriteFiles(ca.dir, name, is.Cert, is.Key); err != nil {
		t.Fatal(err)
	}
	if out.Pair, err = tls.LoadX509KeyPair(out.CertFile, out.KeyFile); err != nil {
		t.Fatal(err)
	}
	return out
}

// node issues node id's certificate, for 127.0.0.1 and localhost, as files named id.
func (ca *clusterCA) node(t *testing.T, id string) testutil.Issued {
	t.Helper()
	return ca.nodeAs(t, id, id)
}

// nodeAs is node with files named name (replacing any earlier pair of that name).
func (ca *clusterCA) nodeAs(t *testing.T, id, name string) testutil.Issued {
	t.Helper()
	is, err := ca.IssueNode(id, []string{"127.0.0.1", "localhost"}, 0)
	return ca.write(t, name, is, err)
}

// client issues a client certificate for user.
func (ca *clusterCA) client(t *testing.T, user string) testutil.Issued {
	t.Helper()
	is, err := ca.IssueClient(user, 0)
	return ca.write(t, "client-"+user, is, err)
}

// clientTLS is a client's config trusting the CA, presenting cert when asked (if not nil).
func (ca *clusterCA) clientTLS(cert *testutil.Issued) *tls.Config {
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	c := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if cert != nil {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert.Pair, nil }
	}
	return c
}

// raftFlags are the raft mTLS flags of a node with cert.
func (ca *clusterCA) raftFlags(cert testutil.Issued) []string {
	return []string{"--raft-tls-cert-file", cert.CertFile, "--raft-tls-key-file", cert.KeyFile, "--raft-tls-ca-cert-file", ca.File}
}

// clientFlags are the client-port TLS flags of a node with cert, client certificates required.
func (ca *clusterCA) clientFlags(cert testutil.Issued) []string {
	return []string{"--tls-cert-file", cert.CertFile, "--tls-key-file", cert.KeyFile, "--tls-ca-cert-file", ca.File, "--tls-auth-clients", "yes"}
}

// newSecureCluster starts size nodes n1..nsize whose raft transport is mutual TLS under ca,
// each with its own node certificate, and whose client ports speak TLS too if clientPort.
func newSecureCluster(t *testing.T, size int, ca *clusterCA, clientPort bool, extra ...string) *cluster {
	t.Helper()
	proto := &cluster{extra: extra, nodeArgs: func(i int) []string {
		cert := ca.node(t, fmt.Sprintf("n%d", i+1))
		args := ca.raftFlags(cert)
		if clientPort {
			args = append(args, ca.clientFlags(cert)...)
		}
		return args
	}}
	if clientPort {
		cli := ca.client(t, "tester")
		proto.clientTLS = ca.clientTLS(&cli)
	}
	return newClusterWith(t, size, proto)
}

// joinWith is cluster.join for a node with flags of its own (its certificates).
func (c *cluster) joinWith(via *node, args func(id string) []string) *node {
	c.t.Helper()
	id := fmt.Sprintf("n%d", len(c.nodes)+1)
	var lastErr error
	for range 3 {
		ports := uniquePorts(c.t, 2)
		n := &node{
			id:       id,
			dir:      c.t.TempDir(),
			raftAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[1])),
			args:     append(append([]string{"--join", via.addr}, c.extra...), args(id)...),
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
		if c.clientTLS != nil {
			testutil.UseTLS(c.t, addr, c.clientTLS)
		}
		if lastErr = n.launch(c.t, addr); lastErr == nil {
			c.nodes = append(c.nodes, n)
			return n
		}
		if !strings.Contains(lastErr.Error(), "address already in use") {
			break
		}
	}
	c.t.Fatalf("join %s through %s: %v", id, via.id, lastErr)
	return nil
}

// forger is an attacker's raft client: hashicorp/raft's own NetworkTransport over a stream
// layer that dials over TLS with tls (nil: plain TCP) and, when hello is set, sends raftlock's
// raft handshake first, as a node would (handshake.go's layout, written out here).
type forger struct {
	tls   *tls.Config
	hello *helloFrame
}

// helloFrame is the raft handshake's hello: cluster ID, the sender's node ID, the node it dials.
type helloFrame struct{ cluster, from, to string }

func (h helloFrame) bytes() []byte {
	b := append([]byte("RLKH"), 1)
	for _, s := range []string{h.cluster, h.from, h.to} {
		b = append(b, byte(len(s)))
		b = append(b, s...)
	}
	return b
}

// forgerLayer is forger's raft.StreamLayer: it only dials.
type forgerLayer struct {
	f      forger
	ln     net.Listener
	closed chan struct{}
}

func (l *forgerLayer) Accept() (net.Conn, error) { <-l.closed; return nil, net.ErrClosed }
func (l *forgerLayer) Close() error              { l.ln.Close(); return nil }
func (l *forgerLayer) Addr() net.Addr            { return l.ln.Addr() }

func (l *forgerLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", string(addr), timeout)
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(ioTimeout))
	if l.f.tls != nil {
		tc := tls.Client(c, l.f.tls)
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, err
		}
		c = tc
	}
	if l.f.hello != nil {
		if _, err := c.Write(l.f.hello.bytes()); err != nil {
			c.Close()
			return nil, err
		}
		// The answer: status, cluster ID, reason.
		r := bufio.NewReaderSize(c, 16)
		status, err := r.ReadByte()
		for i := 0; err == nil && i < 2; i++ {
			var n byte
			if n, err = r.ReadByte(); err == nil {
				_, err = io.CopyN(io.Discard, r, int64(n))
			}
		}
		if err == nil && status != 0 {
			err = errors.New("hello refused")
		}
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("raft handshake: %w", err)
		}
	}
	c.SetDeadline(time.Time{})
	return c, nil
}

// transport returns the forger's NetworkTransport, closed when the test ends.
func (f forger) transport(t *testing.T) (*raft.NetworkTransport, raft.RPCHeader) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	layer := &forgerLayer{f: f, ln: ln, closed: make(chan struct{})}
	trans := raft.NewNetworkTransport(layer, 1, 2*time.Second, io.Discard)
	t.Cleanup(func() { close(layer.closed); trans.Close() })
	return trans, raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, Addr: []byte(ln.Addr().String())}
}

// attacks sends each of the issue's forged frames to raftAddr, with term where it has one
// (RequestVote with term 2^64-1), and returns the name of each that was answered.
func (f forger) attacks(t *testing.T, raftAddr string, term uint64) []string {
	t.Helper()
	trans, hdr := f.transport(t)
	to := raft.ServerAddress(raftAddr)
	var answered []string
	note := func(name string, err error) {
		if err == nil {
			answered = append(answered, name)
		}
	}
	var vr raft.RequestVoteResponse
	note("RequestVote(2^64-1)", trans.RequestVote("", to, &raft.RequestVoteRequest{RPCHeader: hdr, Term: math.MaxUint64,
		LastLogIndex: 1 << 40, LastLogTerm: math.MaxUint64, LeadershipTransfer: true}, &vr))
	var ar raft.AppendEntriesResponse
	note("AppendEntries", trans.AppendEntries("", to, &raft.AppendEntriesRequest{RPCHeader: hdr, Term: term,
		Entries: []*raft.Log{{Index: 1 << 30, Term: term, Type: raft.LogCommand, Data: []byte("intruder")}}}, &ar))
	note("AppendEntries(garbage configuration)", trans.AppendEntries("", to, &raft.AppendEntriesRequest{RPCHeader: hdr, Term: term,
		Entries: []*raft.Log{{Index: 1 << 30, Term: term, Type: raft.LogConfiguration, Data: []byte("\xffgarbage")}}}, &ar))
	data := []byte("intruder snapshot")
	var sr raft.InstallSnapshotResponse
	note("InstallSnapshot", trans.InstallSnapshot("", to, &raft.InstallSnapshotRequest{RPCHeader: hdr, SnapshotVersion: raft.SnapshotVersionMax,
		Term: term, LastLogIndex: 1 << 30, LastLogTerm: term, Size: int64(len(data)), ConfigurationIndex: 1 << 30}, &sr, strings.NewReader(string(data))))
	var tr raft.TimeoutNowResponse
	note("TimeoutNow", trans.TimeoutNow("", to, &raft.TimeoutNowRequest{RPCHeader: hdr}, &tr))
	return answered
}

// clusterState is what the forged frames must not change: the leader, each node's term, the
// table.
type clusterState struct {
	leader string
	terms  map[string]uint64
	sum    string
}

func stateOf(t *testing.T, c *cluster) clusterState {
	t.Helper()
	s := clusterState{leader: c.leader().id, terms: map[string]uint64{}, sum: c.digests().sum}
	for _, n := range c.live() {
		s.terms[n.id] = raftTerm(t, n.addr)
	}
	return s
}

// unchanged fails the test if c's leader, terms or table moved since before.
func (before clusterState) unchanged(t *testing.T, c *cluster) {
	t.Helper()
	after := stateOf(t, c)
	if after.leader != before.leader {
		t.Errorf("leader %s after the forged frames; want %s still", after.leader, before.leader)
	}
	for id, term := range before.terms {
		if after.terms[id] != term {
			t.Errorf("%s: term %d after the forged frames; want %d", id, after.terms[id], term)
		}
	}
	if after.sum != before.sum {
		t.Errorf("table digest %s after the forged frames; want %s", after.sum, before.sum)
	}
}

// TestRaftPeersAreMembers is the issue's second finding: with raft mutual TLS under one CA,
// only a certificate naming a member is a raft peer. Every forged frame (RequestVote with term
// 2^64-1, AppendEntries, one with a garbage configuration, InstallSnapshot, TimeoutNow) is
// refused when it comes with no certificate, with a client certificate of the cluster's CA
// (which the old transport took as a peer), or with the node certificate of a node of another
// cluster; the leader, the terms and the table stay as they were. A node joins the same
// cluster with its own node certificate.
func TestRaftPeersAreMembers(t *testing.T) {
	ca := newClusterCA(t)
	c := newSecureCluster(t, 3, ca, false)
	l := c.leader()
	tok, err := callInt(l.addr, "LOCK", "job", "600000", "OWNER", "alice")
	if err != nil {
		t.Fatal(err)
	}
	before := stateOf(t, c)
	cli := ca.client(t, "alice")
	stranger := ca.node(t, "n9") // a node of the same CA, not a member of this cluster
	withCert := func(cert *testutil.Issued) *tls.Config {
		cfg := ca.clientTLS(cert)
		cfg.InsecureSkipVerify = true // the attacker does not care whom it reaches
		return cfg
	}
	for _, a := range []struct {
		name string
		f    forger
	}{
		{"no certificate", forger{}},
		{"a client certificate of the cluster's CA", forger{tls: withCert(&cli)}},
		{"a client certificate of the cluster's CA, with a member's hello", forger{tls: withCert(&cli),
			hello: &helloFrame{cluster: clusterID(t, l.addr), from: "n2", to: l.id}}},
		{"a node certificate of another cluster's node", forger{tls: withCert(&stranger),
			hello: &helloFrame{cluster: "0123456789abcdef0123456789abcdef", from: "n9"}}},
		{"a node certificate of another cluster's node, without a hello", forger{tls: withCert(&stranger)}},
	} {
		for _, n := range c.live() {
			if got := a.f.attacks(t, n.raftAddr, before.terms[n.id]+1000); len(got) > 0 {
				t.Errorf("%s to %s: %s answered; want every forged frame refused", a.name, n.id, got)
			}
		}
	}
	before.unchanged(t, c)
	if st, held, err := lockInfo(testContext(t, 5*time.Second), newClient(t, l.addr, 3), "job"); err != nil || !held || st.token != tok || st.owner != "alice" {
		t.Errorf("LOCKINFO job: %+v held %v, %v; want alice's token %d", st, held, err, tok)
	}

	// A new node with its own certificate joins, catches up and is promoted.
	n4 := c.joinWith(c.others(l)[0], func(id string) []string { return ca.raftFlags(ca.node(t, id)) })
	waitMember(t, l, n4.id, "voter")
	c.digests()
}

// TestRaftHandshakeOnLoopback: without TLS, on loopback (the default), a cluster's raft port
// refuses raft frames that do not start with raftlock's handshake, and a handshake of another
// cluster: the issue's forged frames, sent as the old transport took them, are all refused, and
// so are they with a hello that names another cluster. (Plain raft authenticates nobody: a
// forger that copies a member's hello is answered, which is why a raft address that is not
// loopback needs mutual TLS; the control below shows it.)
func TestRaftHandshakeOnLoopback(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	before := stateOf(t, c)
	cluster := clusterID(t, l.addr)
	for _, n := range c.live() {
		for _, a := range []struct {
			name string
			f    forger
		}{
			{"raft frames without the handshake", forger{}},
			{"a hello of another cluster", forger{hello: &helloFrame{cluster: "0123456789abcdef0123456789abcdef", from: c.others(n)[0].id, to: n.id}}},
			{"a hello from a node that is not a member", forger{hello: &helloFrame{cluster: cluster, from: "n9", to: n.id}}},
			{"a hello meant for another node", forger{hello: &helloFrame{cluster: cluster, from: c.others(n)[0].id, to: "n9"}}},
		} {
			if got := a.f.attacks(t, n.raftAddr, before.terms[n.id]+1000); len(got) > 0 {
				t.Errorf("%s to %s: %s answered; want every forged frame refused", a.name, n.id, got)
			}
		}
	}
	before.unchanged(t, c)

	t.Run("control: a member's hello over plain TCP is answered", func(t *testing.T) {
		f := c.others(l)[0]
		trans, hdr := forger{hello: &helloFrame{cluster: cluster, from: l.id, to: f.id}}.transport(t)
		var out raft.TimeoutNowResponse
		if err := trans.TimeoutNow("", raft.ServerAddress(f.raftAddr), &raft.TimeoutNowRequest{RPCHeader: hdr}, &out); err != nil {
			t.Fatalf("TimeoutNow with the leader's hello to %s: %v; want answered (plain raft authenticates no one)", f.id, err)
		}
	})
}

// TestRaftStrayNodeRefused is the issue's stray node: a member's data dir is lost and the node
// is started again on its address without --peers, so it forms a new single-node cluster of
// its own. The cluster's leader reaches it at the member's address, but the handshake names
// another cluster: the stray never follows the leader (the old transport made it follow with
// its own table and cluster ID, for good), and the cluster's table is untouched.
func TestRaftStrayNodeRefused(t *testing.T) {
	c := newCluster(t, 3)
	l := c.leader()
	if _, err := callInt(l.addr, "LOCK", "job", "600000", "OWNER", "bob"); err != nil {
		t.Fatal(err)
	}
	cluster := clusterID(t, l.addr)
	victim := c.others(l)[0]
	victim.kill9()
	stray := &node{id: victim.id, dir: t.TempDir(), raftAddr: victim.raftAddr}
	if err := stray.launch(t, victim.addr); err != nil {
		t.Fatalf("start the stray node: %v", err)
	}
	strayCluster := ""
	testutil.WaitFor(t, 10*time.Second, func() error {
		info, err := infoRaft(stray.addr)
		if err != nil {
			return err
		}
		if strayCluster = info["cluster_id"]; strayCluster == "" || strayCluster == cluster {
			return fmt.Errorf("stray cluster_id %q (the cluster's is %s)", strayCluster, cluster)
		}
		return nil
	})
	// The leader keeps trying to reach its member at that address: give it time.
	deadline := time.Now().Add(4 * time.Second)
	for time.Now().Before(deadline) {
		info, err := infoRaft(stray.addr)
		if err != nil {
			t.Fatal(err)
		}
		if info["cluster_id"] != strayCluster || info["raft_leader_id"] != stray.id {
			t.Fatalf("stray node: cluster_id %s, leader %q; want its own cluster %s and itself as leader (refused by the cluster)",
				info["cluster_id"], info["raft_leader_id"], strayCluster)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if st, held, err := lockInfo(testContext(t, 5*time.Second), newClient(t, l.addr, 3), "job"); err != nil || !held || st.owner != "bob" {
		t.Errorf("LOCKINFO job on the cluster's leader: %+v held %v, %v; want bob's", st, held, err)
	}
	if !strings.Contains(stray.Log(), "counts this node as its member "+stray.id) {
		t.Errorf("the stray node's log does not say that the cluster counts it as its member:\n%s", stray.Log())
	}
	if info, err := infoRaft(l.addr); err != nil || info["cluster_id"] != cluster {
		t.Errorf("the cluster's leader: cluster_id %q, %v; want %s", info["cluster_id"], err, cluster)
	}
}

// TestRaftInsecureFlag: a node whose raft address is not loopback does not start without raft
// mutual TLS; with --insecure-raft it starts, warns in its log and says raft_insecure:1 in
// INFO raft, where a loopback node says raft_insecure:0. (The address is advertised, not bound:
// every test listens on 127.0.0.1.)
func TestRaftInsecureFlag(t *testing.T) {
	dir := t.TempDir()
	raftAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	args := []string{"--dir", dir, "--addr", net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))), "--raft-addr", raftAddr,
		"--id", "n1", "--raft-advertise", "10.0.0.1:7379"}
	out, err := runBinary(t, args...)
	if err == nil || !strings.Contains(out, "--insecure-raft") {
		t.Fatalf("a node advertising raft on 10.0.0.1 without TLS: %v\n%s\nwant it refused at start, naming --insecure-raft", err, out)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("the refused node wrote %d entries to its dir; want nothing", len(entries))
	}

	n := startNodeWith(t, nil, "--raft-advertise", "10.0.0.1:7379", "--insecure-raft", "true")
	info, err := infoRaft(n.addr)
	if err != nil || info["raft_insecure"] != "1" {
		t.Errorf("INFO raft of a node with --insecure-raft: raft_insecure %q, %v; want 1", info["raft_insecure"], err)
	}
	if !strings.Contains(n.Log(), "INSECURE RAFT") {
		t.Errorf("the log of a node with --insecure-raft says nothing of it:\n%s", n.Log())
	}
	plain := startNode(t, t.TempDir())
	if info, err := infoRaft(plain.addr); err != nil || info["raft_insecure"] != "0" {
		t.Errorf("INFO raft of a loopback node: raft_insecure %q, %v; want 0", info["raft_insecure"], err)
	}
}

// runBinary runs raftlock with args to its end (at most 20 s) and returns its log and exit
// status.
func runBinary(t *testing.T, args ...string) (string, error) {
	t.Helper()
	p, err := testutil.Launch(t, "raftlock-"+args[0], raftlockBin, args...)
	if err != nil {
		t.Fatal(err)
	}
	p.ExpectExit()
	if err := p.WaitExit(20 * time.Second); err != nil {
		t.Fatal(err)
	}
	return p.Log(), p.ExitStatus()
}

// certCommand runs `raftlock cert` with args, writing into dir, and fails the test if it fails.
func certCommand(t *testing.T, dir string, args ...string) {
	t.Helper()
	out, err := runBinary(t, append(append([]string{"cert"}, args...), "--out", dir)...)
	if err != nil {
		t.Fatalf("raftlock cert %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}

// TestHTTPInsecureInInfo: a node started with --insecure-http says so in INFO server
// (http_insecure:1), as --insecure-raft does in INFO raft, so a monitor can alert on it; a node
// without it says http_insecure:0.
func TestHTTPInsecureInInfo(t *testing.T) {
	httpAddr := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--metrics-addr", httpAddr, "--insecure-http", "yes"}, "1"},
		{nil, "0"},
	} {
		n := startNodeWith(t, nil, tc.args...)
		v, err := call(n.addr, "INFO", "server")
		s, _ := v.(string)
		if err != nil || !strings.Contains(s, "\r\nhttp_insecure:"+tc.want+"\r\n") {
			t.Errorf("INFO server of a node started with %q: %v\n%s\nwant http_insecure:%s", tc.args, err, s, tc.want)
		}
	}
}
