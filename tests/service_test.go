package tests

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/certs"
	"github.com/raftlock/raftlock/tests/testutil"
)

// The files of docs/deploy: the example config and the systemd unit that runs the binary on it.
const (
	exampleConfig = "../docs/deploy/raftlock.conf"
	exampleUnit   = "../docs/deploy/raftlock.service"
	// unitConfigPath is where the unit (and docs/deploy/README.md) installs the config.
	unitConfigPath = "/etc/raftlock/raftlock.conf"
)

// configLine is one setting of a config file: "name = value" (active) or "#name = value" (shown
// at its default, commented out).
type configLine struct {
	n           int // line number, from 1
	name, value string
	active      bool
}

var (
	activeSetting   = regexp.MustCompile(`^([a-z][a-z-]*) = (.*)$`)
	optionalSetting = regexp.MustCompile(`^#([a-z][a-z-]*) = (.*)$`)
)

// readExampleConfig returns the lines of the example config and its settings. Every line is a
// blank, a comment ("# ..."), an optional setting or an active one, and no name is set twice.
func readExampleConfig(t *testing.T) (lines []string, settings []configLine) {
	t.Helper()
	b, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	lines = strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	seen := map[string]int{}
	for i, line := range lines {
		var m []string
		active := false
		switch {
		case line == "" || line == "#" || strings.HasPrefix(line, "# "):
			continue
		case activeSetting.MatchString(line):
			m, active = activeSetting.FindStringSubmatch(line), true
		case optionalSetting.MatchString(line):
			m = optionalSetting.FindStringSubmatch(line)
		default:
			t.Fatalf("%s:%d: %q is neither a comment (\"# ...\") nor a setting (\"name = value\", \"#name = value\")", exampleConfig, i+1, line)
		}
		if prev, ok := seen[m[1]]; ok {
			t.Fatalf("%s:%d: %s already appears on line %d", exampleConfig, i+1, m[1], prev)
		}
		seen[m[1]] = i + 1
		settings = append(settings, configLine{n: i + 1, name: m[1], value: m[2], active: active})
	}
	return lines, settings
}

// binaryFlags returns the names of the flags `raftlock -h` lists.
func binaryFlags(t *testing.T) map[string]bool {
	t.Helper()
	out, _ := exec.Command(raftlockBin, "-h").CombinedOutput() // -h exits 1 after the usage
	flags := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z][a-z-]*)`).FindAllStringSubmatch(string(out), -1) {
		flags[m[1]] = true
	}
	for _, must := range []string{"config", "dir", "addr", "requirepass"} {
		if !flags[must] {
			t.Fatalf("raftlock -h lists no -%s: the usage changed shape?\n%s", must, out)
		}
	}
	return flags
}

// unitDirectives returns the unit file's directives, name to values in order.
func unitDirectives(t *testing.T) map[string][]string {
	t.Helper()
	f, err := os.Open(exampleUnit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: %q is not Key=value", exampleUnit, line)
		}
		out[k] = append(out[k], v)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// unitArgs returns the arguments ExecStart gives raftlock, after checking that it runs
// raftlock with --config at unitConfigPath and only flags the binary has.
func unitArgs(t *testing.T, unit map[string][]string, flags map[string]bool) []string {
	t.Helper()
	if len(unit["ExecStart"]) != 1 {
		t.Fatalf("%s: ExecStart = %q; want one", exampleUnit, unit["ExecStart"])
	}
	f := strings.Fields(unit["ExecStart"][0])
	if len(f) == 0 || filepath.Base(f[0]) != "raftlock" || !filepath.IsAbs(f[0]) {
		t.Fatalf("%s: ExecStart %q does not run an absolute path to raftlock", exampleUnit, unit["ExecStart"][0])
	}
	args := f[1:]
	if i := slices.Index(args, "--config"); i < 0 || i+1 >= len(args) || args[i+1] != unitConfigPath {
		t.Fatalf("%s: ExecStart %q; want --config %s", exampleUnit, unit["ExecStart"][0], unitConfigPath)
	}
	for _, a := range args {
		if name, ok := strings.CutPrefix(a, "--"); ok && !flags[strings.SplitN(name, "=", 2)[0]] {
			t.Errorf("%s: ExecStart passes %s, a flag raftlock does not have", exampleUnit, a)
		}
	}
	return args
}

// TestServiceFiles: every setting of the example config, active or commented out, is a flag
// of the binary; the unit runs the binary on the config's install path with flags it has, keeps
// the config's data dir as its StateDirectory, and systemd-analyze (where installed) finds
// nothing wrong with it.
func TestServiceFiles(t *testing.T) {
	flags := binaryFlags(t)
	_, settings := readExampleConfig(t)
	for _, s := range settings {
		if !flags[s.name] {
			t.Errorf("%s:%d: %s is not a setting raftlock has", exampleConfig, s.n, s.name)
		}
	}
	unit := unitDirectives(t)
	unitArgs(t, unit, flags)
	dir := ""
	for _, s := range settings {
		if s.name == "dir" && s.active {
			dir = s.value
		}
	}
	if sd := unit["StateDirectory"]; len(sd) != 1 || "/var/lib/"+sd[0] != dir {
		t.Errorf("unit StateDirectory=%q, config dir = %q; want the dir /var/lib/<StateDirectory>", sd, dir)
	}
	for k, want := range map[string]string{"Type": "notify", "User": "raftlock", "ExecReload": "/bin/kill -HUP $MAINPID", "Restart": "on-failure"} {
		if got := unit[k]; len(got) != 1 || got[0] != want {
			t.Errorf("unit %s=%q; want %q", k, got, want)
		}
	}
	if stop, err := time.ParseDuration(strings.Join(unit["TimeoutStopSec"], "")); err != nil || stop < testutil.StopGrace {
		t.Errorf("unit TimeoutStopSec=%q; want at least %v, the grace the tests give a node's shutdown", unit["TimeoutStopSec"], testutil.StopGrace)
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Log("systemd-analyze not installed: the unit's syntax is not verified")
		return
	}
	// verify wants ExecStart's binary to exist: point it at the one under test.
	b, err := os.ReadFile(exampleUnit)
	if err != nil {
		t.Fatal(err)
	}
	bin, err := filepath.Abs(raftlockBin)
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(b), "ExecStart="+strings.Fields(unit["ExecStart"][0])[0], "ExecStart="+bin, 1)
	path := filepath.Join(t.TempDir(), "raftlock.service")
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	// verify exits 0 on an unknown directive but prints it: any output is a finding.
	if out, err := exec.Command(analyze, "verify", path).CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", exampleUnit, err, out)
	}
}

// exampleRewrites is what TestServiceExampleConfig changes in the example to run it here: the
// node's identity, data dir and addresses, nothing else. Each entry holds the value the example
// must have, so a change to the example's shape fails the test rather than slipping past it.
var exampleRewrites = map[string]string{
	"id":                    "n1",
	"dir":                   "/var/lib/raftlock",
	"addr":                  "10.0.0.1:6379",
	"raft-addr":             "10.0.0.1:7379",
	"metrics-addr":          "10.0.0.1:9121",
	"peers":                 "n1=10.0.0.1:7379,n2=10.0.0.2:7379,n3=10.0.0.3:7379",
	"aclfile":               "/etc/raftlock/users.acl",
	"tls-cert-file":         "/etc/raftlock/tls/n1.crt",
	"tls-key-file":          "/etc/raftlock/tls/n1.key",
	"tls-ca-cert-file":      "/etc/raftlock/tls/ca.crt",
	"raft-tls-cert-file":    "/etc/raftlock/tls/n1.crt",
	"raft-tls-key-file":     "/etc/raftlock/tls/n1.key",
	"raft-tls-ca-cert-file": "/etc/raftlock/tls/ca.crt",
}

// exampleACL is the example's users file, which the test installs as the config's aclfile.
const exampleACL = "../docs/deploy/users.acl"

// serviceNode is one node of TestServiceExampleConfig, with its fake NOTIFY_SOCKET.
type serviceNode struct {
	id, addr, raftAddr, web, dir string
	notify                       *net.UnixConn
	proc                         *testutil.Proc
}

// TestServiceExampleConfig runs a 3-node cluster the way docs/deploy runs one: each node is
// started with the unit's ExecStart arguments on the example config, of which only the ids,
// data dirs, addresses and file paths are rewritten, under a fake service manager
// (NOTIFY_SOCKET). The example is the secure setup: TLS on the client port (client certificates
// required) and mutual TLS on raft, with certificates made by `raftlock cert`, and ACL users
// from docs/deploy/users.acl. A node tells the manager READY=1 only once a majority runs and
// /readyz says 200; each serves LOCK over TLS after the AUTH the example's requirepass asks for,
// and to the application's ACL user, which may not run admin commands; a raft peer with a
// client certificate of the same CA is refused; SIGTERM brings STOPPING=1.
func TestServiceExampleConfig(t *testing.T) {
	flags := binaryFlags(t)
	args := unitArgs(t, unitDirectives(t), flags)
	lines, settings := readExampleConfig(t)
	pass := ""
	for name := range exampleRewrites {
		if !slices.ContainsFunc(settings, func(s configLine) bool { return s.active && s.name == name }) {
			t.Fatalf("the example sets no %s: the test rewrites it (update exampleRewrites)", name)
		}
	}
	for _, s := range settings {
		if !s.active {
			continue
		}
		want, rewritten := exampleRewrites[s.name]
		switch {
		case rewritten && s.value != want:
			t.Fatalf("%s:%d: %s = %q; the test expects %q (update exampleRewrites)", exampleConfig, s.n, s.name, s.value, want)
		case !rewritten && (strings.Contains(s.value, "/") || strings.Contains(s.value, "10.0.0.")):
			t.Fatalf("%s:%d: %s = %q looks like a path or address the test does not rewrite (add it to exampleRewrites)", exampleConfig, s.n, s.name, s.value)
		case s.name == "requirepass":
			pass = s.value
		}
	}

	// The certificates, as docs/deploy says to make them.
	tlsDir := t.TempDir()
	certCommand(t, tlsDir, "ca")
	certCommand(t, tlsDir, "client", "--user", "app")
	for i := range 3 {
		certCommand(t, tlsDir, "node", "--id", fmt.Sprintf("n%d", i+1), "--host", "127.0.0.1,localhost")
	}
	ca, err := certs.LoadAuthority(filepath.Join(tlsDir, "ca.crt"), filepath.Join(tlsDir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	app, err := tls.LoadX509KeyPair(filepath.Join(tlsDir, "app.crt"), filepath.Join(tlsDir, "app.key"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	clientTLS := &tls.Config{RootCAs: roots, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{app}}
	aclText, err := os.ReadFile(exampleACL)
	if err != nil {
		t.Fatal(err)
	}
	aclFile := filepath.Join(t.TempDir(), "users.acl")
	if err := os.WriteFile(aclFile, aclText, 0o640); err != nil {
		t.Fatal(err)
	}
	appPass := ""
	for line := range strings.SplitSeq(string(aclText), "\n") {
		if f := strings.Fields(line); len(f) > 3 && f[0] == "user" && f[1] == "app" {
			appPass = strings.TrimPrefix(f[3], ">")
		}
	}
	if appPass == "" {
		t.Fatalf("%s has no user app with a password", exampleACL)
	}

	ports := uniquePorts(t, 9)
	nodes := make([]*serviceNode, 3)
	var peers []string
	for i := range nodes {
		at := func(p int) string { return net.JoinHostPort("127.0.0.1", strconv.Itoa(p)) }
		n := &serviceNode{id: fmt.Sprintf("n%d", i+1), addr: at(ports[i]), raftAddr: at(ports[3+i]), web: at(ports[6+i]), dir: t.TempDir()}
		peers = append(peers, n.id+"="+n.raftAddr)
		nodes[i] = n
	}
	start := func(n *serviceNode) {
		t.Helper()
		crt, key, caFile := filepath.Join(tlsDir, n.id+".crt"), filepath.Join(tlsDir, n.id+".key"), filepath.Join(tlsDir, "ca.crt")
		values := map[string]string{"id": n.id, "dir": n.dir, "addr": n.addr, "raft-addr": n.raftAddr,
			"metrics-addr": n.web, "peers": strings.Join(peers, ","), "aclfile": aclFile,
			"tls-cert-file": crt, "tls-key-file": key, "tls-ca-cert-file": caFile,
			"raft-tls-cert-file": crt, "raft-tls-key-file": key, "raft-tls-ca-cert-file": caFile}
		testutil.UseTLS(t, n.addr, clientTLS)
		out := slices.Clone(lines)
		for _, s := range settings {
			if v, ok := values[s.name]; ok && s.active {
				out[s.n-1] = s.name + " = " + v
			}
		}
		conf := filepath.Join(t.TempDir(), "raftlock.conf")
		if err := os.WriteFile(conf, []byte(strings.Join(out, "\n")+"\n"), 0o640); err != nil {
			t.Fatal(err)
		}
		n.notify = fakeNotifySocket(t)
		t.Setenv("NOTIFY_SOCKET", n.notify.LocalAddr().String()) // the child inherits it at start
		a := slices.Clone(args)
		a[slices.Index(a, unitConfigPath)] = conf
		p, err := testutil.Launch(t, "raftlock-service-"+n.id, raftlockBin, a...)
		if err != nil {
			t.Fatal(err)
		}
		n.proc = p
	}

	// One node of three has no quorum: it runs, and says why it is not ready, but not READY.
	start(nodes[0])
	waitNotice(t, nodes[0], "STATUS=not ready: ", 20*time.Second)
	if notices := readNotices(t, nodes[0].notify, time.Second); slices.Contains(notices, "READY=1") {
		t.Fatalf("n1 alone (no quorum) sent %q; want no READY=1", notices)
	}
	start(nodes[1])
	start(nodes[2])
	for _, n := range nodes {
		waitNotice(t, n, "READY=1", 20*time.Second)
		if code, err := httpStatus("http://" + n.web + "/readyz"); err != nil || code != http.StatusOK {
			t.Errorf("%s: /readyz on the config's metrics-addr right after READY=1 = %d, %v; want 200", n.id, code, err)
		}
	}

	for _, n := range nodes {
		if _, err := call(n.addr, "LOCK", "svc:"+n.id, "10000"); err == nil || !strings.Contains(err.Error(), "NOAUTH") {
			t.Errorf("%s: LOCK without AUTH: %v; want NOAUTH (the example sets requirepass)", n.id, err)
		}
		if pingTLS(n.addr, &tls.Config{RootCAs: roots, ServerName: "127.0.0.1"}) == nil {
			t.Errorf("%s: a TLS client without a certificate got in; want refused (tls-auth-clients yes)", n.id)
		}
		rdb := redis.NewClient(&redis.Options{Addr: n.addr, Password: pass, MaxRetries: -1, DialTimeout: 2 * time.Second, PoolSize: 1, TLSConfig: clientTLS})
		t.Cleanup(func() { rdb.Close() })
		// A follower forwards to the leader once the leader knows every member's client
		// address (announced about a second after start).
		testutil.WaitFor(t, 10*time.Second, func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			tok, err := rdb.Do(ctx, "LOCK", "svc:"+n.id, "10000").Int64()
			if err == nil && tok <= 0 {
				err = fmt.Errorf("LOCK = %d; want a positive token", tok)
			}
			if err != nil {
				return fmt.Errorf("%s: LOCK after AUTH: %w", n.id, err)
			}
			return nil
		})
	}

	// The application's ACL user locks, and may not change membership.
	asApp := redis.NewClient(&redis.Options{Addr: nodes[1].addr, Username: "app", Password: appPass, MaxRetries: -1,
		DialTimeout: 2 * time.Second, PoolSize: 1, TLSConfig: clientTLS})
	t.Cleanup(func() { asApp.Close() })
	ctx := testContext(t, 10*time.Second)
	if tok, err := asApp.Do(ctx, "LOCK", "svc:app", "10000").Int64(); err != nil || tok <= 0 {
		t.Errorf("LOCK as the example's user app: %d, %v; want a token", tok, err)
	}
	if err := asApp.Do(ctx, "RAFT", "REMOVE", "n3").Err(); err == nil || !strings.Contains(err.Error(), "NOPERM") {
		t.Errorf("RAFT REMOVE as the example's user app: %v; want NOPERM", err)
	}
	// A raft peer with the application's certificate (same CA) is refused.
	peerCfg := &tls.Config{InsecureSkipVerify: true, Certificates: []tls.Certificate{app}}
	if got := (forger{tls: peerCfg}).attacks(t, nodes[0].raftAddr, 1<<40); len(got) > 0 {
		t.Errorf("raft frames with the application's client certificate to n1: %s answered; want refused", got)
	}

	last := nodes[2]
	if err := last.proc.Stop(testutil.StopGrace); err != nil {
		t.Fatalf("%s: stop: %v", last.id, err)
	}
	waitNotice(t, last, "STOPPING=1", time.Second)
}

// fakeNotifySocket listens where a service manager would for a child's notices: a unixgram
// socket at a short path (a unix socket path has at most 107 bytes), closed when the test ends.
func fakeNotifySocket(t *testing.T) *net.UnixConn {
	t.Helper()
	dir, err := os.MkdirTemp("", "rl-sd")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: filepath.Join(dir, "notify"), Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// readNotices returns the lines of every notice that arrives on c within d.
func readNotices(t *testing.T, c *net.UnixConn, d time.Duration) []string {
	t.Helper()
	var lines []string
	buf := make([]byte, 4096)
	c.SetReadDeadline(time.Now().Add(d))
	for {
		n, err := c.Read(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return lines
		}
		if err != nil {
			t.Fatalf("read notify socket: %v", err)
		}
		lines = append(lines, strings.Split(strings.TrimSuffix(string(buf[:n]), "\n"), "\n")...)
	}
}

// waitNotice reads n's notices until one has a line that starts with want, for up to d.
func waitNotice(t *testing.T, n *serviceNode, want string, d time.Duration) {
	t.Helper()
	buf := make([]byte, 4096)
	n.notify.SetReadDeadline(time.Now().Add(d))
	var seen []string
	for {
		k, err := n.notify.Read(buf)
		if err != nil {
			t.Fatalf("%s: no %s within %v (notices %q): %v", n.id, want, d, seen, err)
		}
		lines := strings.Split(strings.TrimSuffix(string(buf[:k]), "\n"), "\n")
		if slices.ContainsFunc(lines, func(l string) bool { return strings.HasPrefix(l, want) }) {
			return
		}
		seen = append(seen, lines...)
	}
}

// httpStatus returns the status code of a GET of url.
func httpStatus(url string) (int, error) {
	c := http.Client{Timeout: 5 * time.Second}
	res, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	res.Body.Close()
	return res.StatusCode, nil
}
