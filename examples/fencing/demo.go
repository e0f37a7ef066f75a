package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/examples/fencing/filestore"
	"github.com/raftlock/raftlock/examples/fencing/httpstore"
)

// Bounds on every wait of the demo.
const (
	stopTimeout = 10 * time.Second // worker 1 stopping itself after its LOCK
	lostTimeout = 10 * time.Second // past the lease: the lost-lock message
	exitTimeout = 20 * time.Second // worker 1 finishing once resumed
	lockWait    = 5 * time.Second  // worker 2's LOCK ... WAIT
)

const (
	value1 = "written by worker 1"
	value2 = "written by worker 2"
)

// runDemo is the parent: it sets up the resource, starts worker 1, waits until it is stopped,
// lets its lease run out, plays worker 2, resumes worker 1 and checks the outcome.
func runDemo(ctx context.Context, cfg config, out io.Writer) error {
	log := logger{out: out, t0: time.Now()}
	st, describe, cleanup, err := setUp(ctx, &cfg)
	if err != nil {
		return err
	}
	defer cleanup()
	defer st.close()
	v, tok, err := st.read(ctx)
	if err != nil {
		return fmt.Errorf("read %s: %w", describe, err)
	}
	log.printf("resource: %s = %q, token %d", describe, v, tok)

	rdb := redis.NewClient(&redis.Options{Addr: cfg.raftlock, Protocol: 2})
	defer rdb.Close()
	channel := "__lock__:" + cfg.key
	sub := rdb.Subscribe(ctx, channel)
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil { // the subscription's confirmation
		return fmt.Errorf("SUBSCRIBE %s: %w", channel, err)
	}
	msgs := sub.Channel()

	// Worker 1: this program again, as a child process, so that it can be frozen for real.
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	cmd := exec.CommandContext(ctx, exe, "-worker", "-raftlock", cfg.raftlock, "-resource", cfg.resource,
		"-dsn", cfg.dsn, "-dir", cfg.dir, "-url", cfg.url, "-key", cfg.key, "-ttl", cfg.ttl.String(),
		"-t0", strconv.FormatInt(log.t0.UnixNano(), 10))
	cmd.Stdout, cmd.Stderr = out, os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start worker 1: %w", err)
	}
	exited := make(chan error, 1) // buffered: the waiter never blocks on a demo that gave up
	go func() { exited <- cmd.Wait() }()
	pid := cmd.Process.Pid
	resumed := false
	defer func() {
		if !resumed { // a failure while worker 1 is frozen: end it
			cmd.Process.Kill()
			syscall.Kill(pid, syscall.SIGCONT)
			<-exited
		}
	}()

	stoppedAt, err := waitStopped(pid, exited, stopTimeout)
	if err != nil {
		return err
	}
	log.printf("parent: worker 1 (pid %d) is stopped (SIGSTOP) and still believes it holds the lock", pid)

	token1, err := waitLost(ctx, msgs, lostTimeout+cfg.ttl)
	if err != nil {
		return err
	}
	log.printf("parent: %s said \"lost %d expired\": the lease ran out while worker 1 was frozen", channel, token1)

	token2, err := rdb.Do(ctx, "LOCK", cfg.key, ms(cfg.ttl), "OWNER", "worker-2", "WAIT", ms(lockWait)).Int64()
	if err != nil {
		return fmt.Errorf("worker 2: LOCK: %w", err)
	}
	log.printf("worker 2: LOCK %s %s OWNER worker-2 WAIT %s -> token %d", cfg.key, ms(cfg.ttl), ms(lockWait), token2)
	if err := st.write(ctx, token2, value2); err != nil {
		return fmt.Errorf("worker 2: write with token %d: %w", token2, err)
	}
	log.printf("worker 2: wrote %q with token %d: accepted", value2, token2)
	if n, err := rdb.Do(ctx, "UNLOCK", cfg.key, token2).Int64(); err != nil || n != 1 {
		return fmt.Errorf("worker 2: UNLOCK %s %d: %d, %v", cfg.key, token2, n, err)
	}
	log.printf("worker 2: UNLOCK %s %d -> 1", cfg.key, token2)

	log.printf("parent: SIGCONT to worker 1, stopped for %.1fs", time.Since(stoppedAt).Seconds())
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		return fmt.Errorf("SIGCONT worker 1: %w", err)
	}
	resumed = true
	var werr error
	select {
	case werr = <-exited:
	case <-time.After(exitTimeout):
		cmd.Process.Kill()
		<-exited
		return fmt.Errorf("worker 1 did not finish within %v of its SIGCONT", exitTimeout)
	}
	refused := false
	var ee *exec.ExitError
	switch {
	case werr == nil:
	case errors.As(werr, &ee) && ee.ExitCode() == exitRefused:
		refused = true
	default:
		return fmt.Errorf("worker 1: %w", werr)
	}

	v, tok, err = st.read(ctx)
	if err != nil {
		return fmt.Errorf("read %s: %w", describe, err)
	}
	log.printf("resource: %s = %q, token %d", describe, v, tok)
	switch {
	case !refused:
		return fmt.Errorf("FAIL: worker 1's write with the stale token %d was accepted", token1)
	case v != value2 || tok != token2:
		return fmt.Errorf("FAIL: the resource holds %q, token %d; want %q, token %d", v, tok, value2, token2)
	}
	log.printf("OK: the stale write (token %d) was refused; the resource holds worker 2's value (token %d)", token1, token2)
	return nil
}

// setUp opens the resource for the parent, fresh (postgres: the row reset; file: a temporary
// directory unless -dir; http: the service started on a loopback port, its URL put in cfg for
// worker 1). It returns the store, its description and what undoes the setup.
func setUp(ctx context.Context, cfg *config) (store, string, func(), error) {
	nothing := func() {}
	switch cfg.resource {
	case "postgres":
		s, err := openPG(ctx, cfg.dsn, cfg.key)
		if err != nil {
			return nil, "", nil, err
		}
		if err := s.reset(ctx); err != nil {
			s.close()
			return nil, "", nil, err
		}
		return s, fmt.Sprintf("postgres row fencing_example[%s]", cfg.key), nothing, nil
	case "file":
		cleanup := nothing
		if cfg.dir == "" {
			dir, err := os.MkdirTemp("", "fencing-example-")
			if err != nil {
				return nil, "", nil, err
			}
			cfg.dir, cleanup = dir, func() { os.RemoveAll(dir) }
		}
		fs, err := filestore.Open(cfg.dir)
		if err != nil {
			cleanup()
			return nil, "", nil, err
		}
		s := fileStore{fs: fs, name: cfg.key}
		if err := s.fs.Write(cfg.key, 0, []byte("initial")); err != nil {
			cleanup()
			return nil, "", nil, fmt.Errorf("%s was written with a token already: use a fresh -dir (%w)", cfg.key, err)
		}
		return s, "file " + cfg.key + " in " + cfg.dir, cleanup, nil
	default: // http
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, "", nil, err
		}
		srv := &http.Server{Handler: httpstore.NewServer(), ReadHeaderTimeout: 5 * time.Second}
		done := make(chan struct{})
		go func() { srv.Serve(ln); close(done) }()
		cleanup := func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			srv.Shutdown(ctx)
			<-done
		}
		cfg.url = "http://" + ln.Addr().String()
		s := httpStore{hc: &http.Client{Timeout: 10 * time.Second}, base: cfg.url, name: cfg.key}
		if err := s.write(ctx, 0, "initial"); err != nil {
			cleanup()
			return nil, "", nil, err
		}
		return s, "http " + cfg.url + "/resources/" + cfg.key, cleanup, nil
	}
}

// waitStopped waits until process pid is stopped (state T in /proc/pid/stat) and returns when
// it saw it so; it fails if the process exits first or the timeout passes.
func waitStopped(pid int, exited chan error, timeout time.Duration) (time.Time, error) {
	deadline := time.Now().Add(timeout)
	for {
		select {
		case err := <-exited:
			exited <- err // back for the caller, which waits for worker 1's end
			return time.Time{}, fmt.Errorf("worker 1 exited before it was stopped: %v", err)
		default:
		}
		stopped, err := isStopped(pid)
		switch {
		case errors.Is(err, os.ErrNotExist): // exited: the select above tells how, next time round
		case err != nil:
			return time.Time{}, err
		case stopped:
			return time.Now(), nil
		}
		if time.Now().After(deadline) {
			return time.Time{}, fmt.Errorf("worker 1 did not stop within %v", timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitLost waits for the lock channel's "lost <token> expired" and returns the token.
func waitLost(ctx context.Context, msgs <-chan *redis.Message, timeout time.Duration) (int64, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		select {
		case m, ok := <-msgs:
			if !ok {
				return 0, errors.New("the lock channel's subscription ended")
			}
			f := strings.Fields(m.Payload)
			if len(f) == 3 && f[0] == "lost" && f[2] == "expired" {
				return strconv.ParseInt(f[1], 10, 64)
			}
		case <-timer.C:
			return 0, fmt.Errorf("no \"lost <token> expired\" on the lock channel within %v", timeout)
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// runWorker1 is worker 1: it takes the lock, checks it still holds it, freezes itself with
// SIGSTOP just before its write, and, once resumed, writes with its token. It returns
// errRefused when the resource refused the write.
func runWorker1(ctx context.Context, cfg config, out io.Writer) error {
	log := logger{out: out, t0: time.Unix(0, cfg.t0)}
	var st store
	switch cfg.resource {
	case "postgres":
		s, err := openPG(ctx, cfg.dsn, cfg.key)
		if err != nil {
			return err
		}
		st = s
	case "file":
		fs, err := filestore.Open(cfg.dir)
		if err != nil {
			return err
		}
		st = fileStore{fs: fs, name: cfg.key}
	default:
		st = httpStore{hc: &http.Client{Timeout: 10 * time.Second}, base: cfg.url, name: cfg.key}
	}
	defer st.close()
	rdb := redis.NewClient(&redis.Options{Addr: cfg.raftlock, Protocol: 2})
	defer rdb.Close()

	token, err := rdb.Do(ctx, "LOCK", cfg.key, ms(cfg.ttl), "OWNER", "worker-1").Int64()
	if errors.Is(err, redis.Nil) {
		return fmt.Errorf("worker 1: LOCK %s: held by someone else", cfg.key)
	}
	if err != nil {
		return fmt.Errorf("worker 1: LOCK: %w", err)
	}
	log.printf("worker 1: LOCK %s %s OWNER worker-1 -> token %d", cfg.key, ms(cfg.ttl), token)
	if n, err := rdb.Do(ctx, "VALIDATE", cfg.key, token).Int64(); err != nil || n != 1 {
		return fmt.Errorf("worker 1: VALIDATE %s %d: %d, %v", cfg.key, token, n, err)
	}
	log.printf("worker 1: VALIDATE %s %d -> 1 (still the holder); about to write %q ... (SIGSTOP)", cfg.key, token, value1)

	// The pause: a stop-the-world GC, a suspended VM, a swapped-out process. Nothing runs here
	// until SIGCONT.
	if err := stopSelf(); err != nil {
		return fmt.Errorf("worker 1: SIGSTOP: %w", err)
	}

	log.printf("worker 1: resumed; writes %q with token %d", value1, token)
	werr := st.write(ctx, token, value1)
	switch {
	case errors.Is(werr, errStale):
		log.printf("worker 1: refused: %v", werr)
	case werr != nil:
		return fmt.Errorf("worker 1: write: %w", werr)
	default:
		log.printf("worker 1: accepted: the resource took a write from a holder whose lease had ended")
	}
	n, err := rdb.Do(ctx, "UNLOCK", cfg.key, token).Int64()
	if err != nil {
		return fmt.Errorf("worker 1: UNLOCK: %w", err)
	}
	if n == 0 {
		log.printf("worker 1: UNLOCK %s %d -> 0: the lock was no longer its own", cfg.key, token)
	} else {
		log.printf("worker 1: UNLOCK %s %d -> %d", cfg.key, token, n)
	}
	if werr != nil {
		return errRefused
	}
	return nil
}
