package tests

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/raftlock/raftlock/tests/testutil"
)

// TestFencing runs the fencing examples (examples/fencing, docs/fencing.md) against a real
// raftlock node and a real PostgreSQL: the pause demo on each resource (a row, a file, an HTTP
// service), where worker 1 is frozen with SIGSTOP past its lease and its write with the old
// token must be refused, and the redis-py + psycopg2 and ioredis + pg snippets, whose
// conditional UPDATE must refuse the stale token. Each exits 0 only if the stale write was
// refused and the resource holds the second worker's value.
func TestFencing(t *testing.T) {
	dsn := startPostgres(t)
	n := startNode(t, t.TempDir())
	demo := filepath.Join(t.TempDir(), "fencing")
	if err := testutil.GoBuild(demo, "github.com/raftlock/raftlock/examples/fencing", raceEnabled); err != nil {
		t.Fatal(err)
	}
	for _, resource := range []string{"postgres", "file", "http"} {
		t.Run(resource, func(t *testing.T) {
			out := runExample(t, nil, demo, "-raftlock", n.addr, "-resource", resource, "-dsn", dsn,
				"-dir", t.TempDir(), "-key", "fencing-"+resource)
			for _, want := range []string{"is stopped (SIGSTOP)", "worker 1: refused: ", "OK: the stale write"} {
				if !strings.Contains(out, want) {
					t.Errorf("the demo's output lacks %q", want)
				}
			}
		})
	}
	env := []string{"RAFTLOCK_ADDR=" + n.addr, "PG_DSN=" + dsn}
	t.Run("python", func(t *testing.T) {
		runExample(t, env, "/usr/bin/python3", "../examples/fencing/python/fenced_update.py")
	})
	t.Run("node", func(t *testing.T) {
		modules, err := filepath.Abs("nodejs/node_modules")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(filepath.Join(modules, "pg")); err != nil {
			t.Fatalf("tests/nodejs has no pg installed (scripts/setup.sh runs npm ci there): %v", err)
		}
		runExample(t, append(env, "NODE_PATH="+modules), "node", "../examples/fencing/node/fenced_update.js")
	})
}

// runExample runs an example program with env added to the test's, in a process group of its
// own (killed whole if it outlives its minute: the demo's worker 1 may be stopped), logs its
// output, fails the test unless it exits 0 and prints its OK line, and returns the output.
func runExample(t *testing.T, env []string, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	b, err := cmd.CombinedOutput()
	out := string(b)
	t.Logf("%s %s:\n%s", filepath.Base(bin), strings.Join(args, " "), out)
	if err != nil {
		t.Fatalf("%s: %v", filepath.Base(bin), err)
	}
	if !strings.Contains(out, "OK: the stale write") {
		t.Fatal("no OK line in the output")
	}
	return out
}

// startPostgres starts a PostgreSQL server for the test (Debian's binaries, scripts/setup.sh
// installs them) in a fresh temporary directory, on a free loopback port with its socket in that
// directory, trusting local connections, and returns a DSN of its postgres database. It is
// stopped, and its directory removed, when the test ends. PostgreSQL refuses to run as root:
// then initdb and the server run as the user nobody.
func startPostgres(t *testing.T) string {
	t.Helper()
	bindir := postgresBinDir(t)
	// Not t.TempDir(): its parent is root's alone, where nobody cannot reach.
	dir, err := os.MkdirTemp("", "raftlock-fencing-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	cred := postgresCredential(t)
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatal(err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bindir, "initdb"), "-D", data, "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	initdb.Dir, initdb.Env = dir, []string{"HOME=" + dir, "PATH=/usr/bin:/bin"}
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}

	var lastErr error
	for range 3 { // a port picked free may be taken by someone else before postgres binds it
		port := freePort(t)
		dsn, err := launchPostgres(t, bindir, dir, port, cred)
		if err == nil {
			return dsn
		}
		lastErr = err
	}
	t.Fatalf("start postgres: %v", lastErr)
	return ""
}

// launchPostgres starts the server of dir/data on port and waits until it answers a query.
func launchPostgres(t *testing.T, bindir, dir string, port int, cred *syscall.Credential) (string, error) {
	t.Helper()
	logPath := filepath.Join(dir, fmt.Sprintf("postgres-%d.log", port))
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(filepath.Join(bindir, "postgres"), "-D", filepath.Join(dir, "data"),
		"-p", strconv.Itoa(port), "-k", dir, "-c", "listen_addresses=127.0.0.1",
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=20", "-c", "shared_buffers=16MB")
	cmd.Dir, cmd.Env = dir, []string{"HOME=" + dir, "PATH=/usr/bin:/bin"}
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		// Fast shutdown (SIGINT); after 10 s, SIGKILL to its process group (the backends too).
		syscall.Kill(pid, syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			t.Errorf("postgres (pid %d) did not stop within 10 s of SIGINT: killed", pid)
			syscall.Kill(-pid, syscall.SIGKILL)
			<-exited
		}
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			t.Logf("postgres log (%s):\n%s", logPath, b)
		}
	})

	dsn := fmt.Sprintf("postgresql://postgres@127.0.0.1:%d/postgres?sslmode=disable&connect_timeout=5", port)
	err = testutil.Poll(20*time.Second, 50*time.Millisecond, func() error {
		select {
		case err := <-exited:
			exited <- err // for the cleanup
			b, _ := os.ReadFile(logPath)
			return fmt.Errorf("%w: postgres exited: %v\n%s", testutil.ErrGiveUp, err, b)
		default:
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		var one int
		return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
	})
	if err != nil {
		return "", err
	}
	return dsn, nil
}

// postgresBinDir returns the directory of PostgreSQL's server binaries: Debian's
// /usr/lib/postgresql/<version>/bin, the newest version, else where initdb is on the PATH.
func postgresBinDir(t *testing.T) string {
	t.Helper()
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	slices.SortFunc(dirs, func(a, b string) int { return pgVersion(a) - pgVersion(b) })
	if len(dirs) > 0 {
		return filepath.Dir(dirs[len(dirs)-1])
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		return filepath.Dir(p)
	}
	t.Fatal("PostgreSQL's server is not installed (no /usr/lib/postgresql/*/bin/initdb, no initdb on the PATH): scripts/setup.sh installs Debian's postgresql")
	return ""
}

// pgVersion is the major version in a path /usr/lib/postgresql/<version>/bin/initdb.
func pgVersion(path string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(filepath.Dir(path))))
	return v
}

// postgresCredential returns the user PostgreSQL runs as: nil (this process's) unless this
// process is root, then nobody.
func postgresCredential(t *testing.T) *syscall.Credential {
	t.Helper()
	if os.Geteuid() != 0 {
		return nil
	}
	u, err := user.Lookup("nobody")
	if err != nil {
		t.Fatalf("running as root, postgres needs an unprivileged user: %v", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("user nobody: %v", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
}
