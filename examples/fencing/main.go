// Command fencing shows why a lease alone does not protect a resource, and how a fencing token
// does: two workers update one resource under one raftlock lock, and the first is frozen with
// SIGSTOP between taking the lock and writing, past its lease.
//
//	worker 1 (a child process): LOCK, VALIDATE (still the holder), then SIGSTOP to itself
//	the lease runs out; __lock__:<key> says "lost <token> expired"
//	worker 2 (this process): LOCK ... WAIT, writes with its larger token
//	worker 1 is resumed (SIGCONT) and writes with its old token: the resource refuses it
//
// The resource is a PostgreSQL row (a conditional UPDATE), a file (filestore: write to a
// temporary name, rename only if the token is the largest seen) or an HTTP service that keeps
// the largest token per resource (httpstore, served by this process). The program exits 0 only
// if worker 1's stale write was refused and the resource holds worker 2's value.
//
//	fencing -raftlock 127.0.0.1:6379 -resource postgres -dsn postgres://user@127.0.0.1:5432/db
//	fencing -raftlock 127.0.0.1:6379 -resource file [-dir DIR]
//	fencing -raftlock 127.0.0.1:6379 -resource http
//
// Linux: it reads /proc to see that worker 1 is stopped.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"
)

// exitRefused is worker 1's exit status when the resource refused its write: the outcome the
// program wants.
const exitRefused = 3

// errRefused is worker 1's result when its write was refused as stale.
var errRefused = errors.New("the stale write was refused")

// config is what the flags say.
type config struct {
	raftlock string
	resource string // postgres, file or http
	dsn      string
	dir      string
	url      string // http: the service, given to worker 1 by the parent
	key      string
	ttl      time.Duration
	worker   bool  // this process is worker 1
	t0       int64 // the parent's start, Unix nanoseconds: worker 1's timestamps count from it
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	switch {
	case err == nil:
		os.Exit(0)
	case errors.Is(err, errRefused):
		os.Exit(exitRefused)
	default:
		fmt.Fprintln(os.Stderr, "fencing:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, out io.Writer) error {
	var cfg config
	fs := flag.NewFlagSet("fencing", flag.ContinueOnError)
	fs.StringVar(&cfg.raftlock, "raftlock", "127.0.0.1:6379", "raftlock's address")
	fs.StringVar(&cfg.resource, "resource", "postgres", "the fenced resource: postgres, file or http")
	fs.StringVar(&cfg.dsn, "dsn", "", "postgres: the database, as a URL or key=value DSN")
	fs.StringVar(&cfg.dir, "dir", "", "file: the store's directory (default: a temporary one)")
	fs.StringVar(&cfg.url, "url", "", "http: the service's base URL (worker 1 only)")
	fs.StringVar(&cfg.key, "key", "fencing-example", "the lock's key, and the resource's name")
	fs.DurationVar(&cfg.ttl, "ttl", time.Second, "the lease")
	fs.BoolVar(&cfg.worker, "worker", false, "run as worker 1 (started by the program itself)")
	fs.Int64Var(&cfg.t0, "t0", 0, "the parent's start, Unix nanoseconds (worker 1 only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if err := cfg.validate(); err != nil {
		return err
	}
	if cfg.worker {
		return runWorker1(ctx, cfg, out)
	}
	return runDemo(ctx, cfg, out)
}

func (c *config) validate() error {
	switch c.resource {
	case "postgres":
		if c.dsn == "" {
			return errors.New("-resource postgres needs -dsn")
		}
	case "file":
	case "http":
		if c.worker && c.url == "" {
			return errors.New("worker 1 of -resource http needs -url")
		}
	default:
		return fmt.Errorf("-resource %q: want postgres, file or http", c.resource)
	}
	if c.ttl < time.Millisecond {
		return fmt.Errorf("-ttl %v: want at least 1ms", c.ttl)
	}
	if c.key == "" {
		return errors.New("-key is empty")
	}
	return nil
}

// logger prints the program's story, each line stamped with the time since the parent began.
type logger struct {
	out io.Writer
	t0  time.Time
}

func (l logger) printf(format string, args ...any) {
	fmt.Fprintf(l.out, "%5.2fs  %s\n", time.Since(l.t0).Seconds(), fmt.Sprintf(format, args...))
}

func ms(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) }
