package tests

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/backup"
	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/tests/testutil"
)

// heldLock is a LOCK acknowledged before the backup began: what the restored cluster must hold.
type heldLock struct {
	owner string
	token int64
	ttl   int64     // the lease asked for, ms
	sent  time.Time // when the LOCK was sent: no lease ends before sent+ttl
}

// TestBackupRestore is issue #14 item 2's test: a 3-node cluster under a bounded lock load;
// every LOCK acknowledged before the backup starts is recorded; `raftlock backup` takes the
// backup from a follower while the load goes on; `raftlock restore` seeds a fresh 3-node
// cluster from it (each node restored from the same file with the same --peers). The new
// cluster has a new cluster ID and holds every recorded lock with its owner and token and a
// lease that has kept counting (less than asked, by at least the time that passed before the
// backup, and not ended early); released locks are gone; a new LOCK gets a token above every
// token of the backup; the three nodes hold the same table.
func TestBackupRestore(t *testing.T) {
	c := newCluster(t, 3)
	oldCluster := clusterID(t, c.leader().addr)
	nodes := c.live()

	// Before the backup: 4 workers, each on its own node in turn, 30 locks each (bounded by
	// count and by time), a fifth of them released again; plus keys without a lease.
	held := map[string]heldLock{}
	released := map[string]bool{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	deadline := time.Now().Add(30 * time.Second)
	for w := range 4 {
		wg.Go(func() {
			addr := nodes[w%len(nodes)].addr
			for i := 0; i < 30 && time.Now().Before(deadline); i++ {
				key, owner := fmt.Sprintf("backup/%d/%d", w, i), fmt.Sprintf("owner-%d-%d", w, i)
				ttl := int64(60000 + 1000*i)
				sent := time.Now()
				tok, err := callInt(addr, "LOCK", key, strconv.FormatInt(ttl, 10), "OWNER", owner)
				if err != nil {
					t.Errorf("LOCK %s: %v", key, err)
					return
				}
				if i%5 == 4 {
					if r, err := callInt(addr, "UNLOCK", key, strconv.FormatInt(tok, 10)); err != nil || r != 1 {
						t.Errorf("UNLOCK %s %d: %d, %v", key, tok, r, err)
						return
					}
					mu.Lock()
					released[key] = true
					mu.Unlock()
					continue
				}
				mu.Lock()
				held[key] = heldLock{owner: owner, token: tok, ttl: ttl, sent: sent}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for i := range 5 {
		if v, err := call(c.leader().addr, "SET", fmt.Sprintf("plain/%d", i), fmt.Sprintf("value-%d", i)); err != nil || v != "OK" {
			t.Fatalf("SET plain/%d: %v, %v", i, v, err)
		}
	}
	var top int64
	for _, h := range held {
		top = max(top, h.token)
	}
	c.digests() // every node, the follower the backup is taken from included, applied them all
	settled := time.Now()

	// While the backup is taken: more grants and releases on other keys, through every node,
	// bounded by count and time, until the backup is done.
	stop := make(chan struct{})
	loadDone := make(chan struct{})
	go func() {
		defer close(loadDone)
		var lw sync.WaitGroup
		for w := range 3 {
			lw.Go(func() {
				addr := nodes[w].addr
				for i := 0; i < 2000; i++ {
					select {
					case <-stop:
						return
					default:
					}
					key := fmt.Sprintf("during/%d/%d", w, i)
					tok, err := callInt(addr, "LOCK", key, "60000")
					if err == nil && i%2 == 0 {
						callInt(addr, "UNLOCK", key, strconv.FormatInt(tok, 10))
					}
				}
			})
		}
		lw.Wait()
	}()
	defer func() {
		close(stop)
		<-loadDone
	}()
	// Leases must visibly run before the backup: let the load go on for 1.5 s first.
	select {
	case <-time.After(1500 * time.Millisecond):
	case <-loadDone:
		t.Fatal("the load ended before the backup")
	}

	file := filepath.Join(t.TempDir(), "cluster.rlbackup")
	from := c.followers()[0]
	backupStart := time.Now()
	out := runRaftlock(t, "backup", "--from", from.addr, "--out", file)
	t.Logf("raftlock backup --from %s (a follower):\n%s", from.id, out)
	h, _, err := backup.ReadFile(file)
	if err != nil {
		t.Fatalf("the backup written does not read back: %v", err)
	}
	if h.SourceNode != from.id || h.ClusterID != oldCluster || int64(h.LastToken) < top || h.AppliedIndex == 0 || h.Term == 0 {
		t.Errorf("backup header %+v: want source %s, cluster %s, token counter >= %d", h, from.id, oldCluster, top)
	}

	// Corrupt and truncated copies are refused, and change nothing.
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	flipped := append([]byte(nil), data...)
	flipped[len(flipped)/2] ^= 0x01
	for name, bad := range map[string][]byte{"flipped": flipped, "truncated": data[:len(data)-100], "empty": nil} {
		badFile := filepath.Join(t.TempDir(), name+".rlbackup")
		if err := os.WriteFile(badFile, bad, 0o600); err != nil {
			t.Fatal(err)
		}
		missing := filepath.Join(t.TempDir(), "new-dir")
		out, err := restoreCmd(t, "--in", badFile, "--dir", missing, "--id", "x1", "--raft-addr", "127.0.0.1:1")
		if err == nil || !strings.Contains(out, "restore refused, nothing written") || !strings.Contains(out, "corrupt or truncated") {
			t.Errorf("restore of a %s file: %v\n%s\nwant a refusal that says the file is corrupt", name, err, out)
		}
		if _, err := os.Stat(missing); !os.IsNotExist(err) {
			t.Errorf("restore of a %s file created %s (%v)", name, missing, err)
		}
		empty := t.TempDir()
		if _, err := restoreCmd(t, "--in", badFile, "--dir", empty, "--id", "x1", "--raft-addr", "127.0.0.1:1"); err == nil {
			t.Errorf("restore of a %s file into an empty dir succeeded", name)
		}
		if entries, _ := os.ReadDir(empty); len(entries) != 0 {
			t.Errorf("restore of a %s file wrote into %s: %v", name, empty, entries)
		}
	}
	// A dir that holds data is refused, even with a good file.
	if out, err := restoreCmd(t, "--in", file, "--dir", from.dir, "--id", "x1", "--raft-addr", "127.0.0.1:1"); err == nil || !strings.Contains(out, "is not empty") {
		t.Errorf("restore over a node's data dir: %v\n%s", err, out)
	}

	// A fresh 3-node cluster, each node restored from the file with the same --peers.
	restored := restoreCluster(t, file, func(n *node, out string) {
		if !strings.Contains(out, "restored") {
			t.Errorf("raftlock restore said nothing of what it did:\n%s", out)
		}
	})
	restored.waitAnnounced(3)
	l := restored.leader()
	if id := clusterID(t, l.addr); id == oldCluster {
		t.Errorf("the restored cluster kept the old cluster ID %s: it must be a new cluster", id)
	}

	ctx := testContext(t, 30*time.Second)
	rdb := newClient(t, l.addr, 2)
	for key, want := range held {
		checked := time.Now()
		st, ok, err := lockInfo(ctx, rdb, key)
		if err != nil || !ok || st.owner != want.owner || st.token != want.token {
			t.Errorf("LOCKINFO %s after restore: %+v held=%v, %v; want owner %s, token %d", key, st, ok, err, want.owner, want.token)
			continue
		}
		// Counting on: less than asked by at least the time (1.5 s or more) that ran between
		// every node applying it and the backup; never before sent+ttl (the backup's remaining
		// lease counts again from the restored node's start, which is after the backup).
		if hi := want.ttl - backupStart.Sub(settled).Milliseconds(); st.pttl > hi {
			t.Errorf("%s: pttl %d after restore, want at most %d (the lease must keep counting)", key, st.pttl, hi)
		}
		if lo := want.ttl - checked.Sub(want.sent).Milliseconds(); st.pttl < lo || st.pttl <= 0 {
			t.Errorf("%s: pttl %d after restore, want at least %d (a lease never ends early)", key, st.pttl, lo)
		}
	}
	for key := range released {
		if _, ok, err := lockInfo(ctx, rdb, key); err != nil || ok {
			t.Errorf("LOCKINFO %s (released before the backup): held=%v, %v; want free", key, ok, err)
		}
	}
	for i := range 5 {
		key := fmt.Sprintf("plain/%d", i)
		if v, err := call(l.addr, "GET", key); err != nil || v != fmt.Sprintf("value-%d", i) {
			t.Errorf("GET %s after restore: %v, %v", key, v, err)
		}
		if ttl, err := callInt(l.addr, "PTTL", key); err != nil || ttl != -1 {
			t.Errorf("PTTL %s after restore: %d, %v; want -1 (no lease)", key, ttl, err)
		}
	}
	for _, n := range restored.nodes { // through followers too
		tok, err := callInt(n.addr, "LOCK", "after-restore/"+n.id, "60000")
		if err != nil || tok <= int64(h.LastToken) || tok <= top {
			t.Errorf("LOCK through %s after restore: token %d, %v; want one above the backup's %d", n.id, tok, err, h.LastToken)
		}
	}
	restored.digests()
}

// restoreCluster makes a new 3-node cluster (r1, r2, r3) of nodes each restored from the backup
// file with the same --peers, starts it and waits until every node is ready. check, if not nil,
// looks at each node's restored dir and what raftlock restore printed, before the nodes start.
func restoreCluster(t *testing.T, file string, check func(n *node, out string)) *cluster {
	t.Helper()
	ports := uniquePorts(t, 6)
	var peers []string
	restored := &cluster{t: t}
	for i := range 3 {
		n := &node{id: fmt.Sprintf("r%d", i+1), dir: filepath.Join(t.TempDir(), "data"),
			raftAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[3+i]))}
		peers = append(peers, n.id+"="+n.raftAddr)
		restored.nodes = append(restored.nodes, n)
	}
	for _, n := range restored.nodes {
		n.args = []string{"--peers", strings.Join(peers, ",")}
		out := runRaftlock(t, "restore", "--in", file, "--dir", n.dir, "--id", n.id, "--peers", strings.Join(peers, ","))
		if check != nil {
			check(n, out)
		}
	}
	for i, n := range restored.nodes {
		if err := n.start(t, net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[i]))); err != nil {
			t.Fatal(err)
		}
	}
	for _, n := range restored.nodes {
		if err := n.waitReady(clusterReadyTimeout); err != nil {
			t.Fatal(err)
		}
	}
	return restored
}

// runRaftlock runs the raftlock binary with args and fails the test if it fails.
func runRaftlock(t *testing.T, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, raftlockBin, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("raftlock %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// restoreCmd runs raftlock restore with args and returns its output and error.
func restoreCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, raftlockBin, append([]string{"restore"}, args...)...).CombinedOutput()
	return string(out), err
}

// TestBackupAuthTLS: `raftlock backup` goes through the client port's TLS and AUTH like any
// client, and RAFT BACKUP is @admin: refused without TLS, without a password, and to a user
// denied @admin; taken with --tls and an @admin user (or the default user's password from
// RAFTLOCK_PASS).
func TestBackupAuthTLS(t *testing.T) {
	ca := testutil.NewCA(t, "cluster")
	cli := ca.Issue(t, "client")
	aclFile := filepath.Join(t.TempDir(), "users.acl")
	if err := os.WriteFile(aclFile, []byte("user reader on >rpass ~* &* +@all -@admin\nuser ops on >opass ~* &* +@all\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	n := startNodeWith(t, ca.ClientTLS(&cli), append(clientTLSFlags(ca, ca.Issue(t, "node"), "yes"), "--aclfile", aclFile)...)
	ctx := testContext(t, 30*time.Second)
	rdb := newClient(t, n.addr, 2).Conn() // one connection: AUTH holds for what follows
	defer rdb.Close()
	// The default user gets a password once the node serves (the start-up checks PING as it).
	if err := rdb.Do(ctx, "ACL", "SETUSER", "default", "on", ">s3cret").Err(); err != nil {
		t.Fatalf("ACL SETUSER default: %v", err)
	}
	if err := rdb.Do(ctx, "AUTH", "ops", "opass").Err(); err != nil {
		t.Fatalf("AUTH ops: %v", err)
	}
	tok, err := rdb.Do(ctx, "LOCK", "secure/job", "60000", "OWNER", "me").Int64()
	if err != nil {
		t.Fatalf("LOCK: %v", err)
	}

	tlsArgs := []string{"--tls", "--tls-ca", ca.File, "--tls-cert", cli.CertFile, "--tls-key", cli.KeyFile}
	file := filepath.Join(t.TempDir(), "secure.rlbackup")
	backupCmd := func(env []string, args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, raftlockBin, append([]string{"backup", "--from", n.addr, "--out", file, "--timeout", "20s"}, args...)...)
		cmd.Env = append(os.Environ(), env...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no TLS", []string{"--user", "ops", "--pass", "opass"}, "authenticate to"},
		{"no password", tlsArgs, "NOAUTH"},
		{"wrong password", append(tlsArgs, "--user", "ops", "--pass", "nope"), "WRONGPASS"},
		{"not @admin", append(tlsArgs, "--user", "reader", "--pass", "rpass"), "NOPERM"},
	} {
		out, err := backupCmd(nil, tc.args...)
		if err == nil || !strings.Contains(out, tc.want) {
			t.Errorf("backup with %s: %v\n%s\nwant a failure saying %q", tc.name, err, out, tc.want)
		}
		if _, err := os.Stat(file); !os.IsNotExist(err) {
			t.Fatalf("backup with %s left a file (%v)", tc.name, err)
		}
	}
	if out, err := backupCmd(nil, append(tlsArgs, "--user", "ops", "--pass", "opass")...); err != nil {
		t.Fatalf("backup as ops over TLS: %v\n%s", err, out)
	}
	_, tables, err := backup.ReadFile(file)
	if err != nil {
		t.Fatalf("read the backup: %v", err)
	}
	if l, ok := tables[0].Get(fsm.DBKey(0, []byte("secure/job"))); !ok || string(l.Owner) != "me" || int64(l.Token) != tok {
		t.Errorf("the backup holds %+v (%v) for secure/job, want owner me, token %d", l, ok, tok)
	}
	if out, err := backupCmd([]string{"RAFTLOCK_PASS=s3cret"}, tlsArgs...); err != nil {
		t.Errorf("backup as default with RAFTLOCK_PASS: %v\n%s", err, out)
	}
}
