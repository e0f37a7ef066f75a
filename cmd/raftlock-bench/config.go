package main

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"time"
)

// Mode selects the commands that take and release a lock.
type Mode string

// The lock protocols the benchmark can drive.
const (
	// ModeNative is raftlock's own LOCK key ttl OWNER id / UNLOCK key token.
	ModeNative Mode = "native"
	// ModeSetNX is SET key value NX PX ttl / DEL key.
	ModeSetNX Mode = "setnx"
	// ModeSetNXEval is SET key value NX PX ttl / EVAL of the
	// compare-and-delete script.
	ModeSetNXEval Mode = "setnx-eval"
	// ModeShared is LOCK key ttl OWNER id SHARED / UNLOCK key token: a
	// share of a shared lock.
	ModeShared Mode = "shared"
	// ModeSemaphore is SEMACQUIRE key semPermits ttl OWNER id / SEMRELEASE
	// key token: a permit of a semaphore.
	ModeSemaphore Mode = "semaphore"
)

// semPermits is ModeSemaphore's permit count: a key that more workers
// contend on (workload contended) is full at this many.
const semPermits = 4

// tokens reports whether m's acquire replies a fencing token (raftlock's own
// commands) rather than SET's OK.
func (m Mode) tokens() bool { return m == ModeNative || m == ModeShared || m == ModeSemaphore }

// Workload selects which keys the workers lock.
type Workload string

// The workloads.
const (
	// WorkloadDistinct gives every cycle a key of its own: no lock is ever
	// refused, so it measures the raw cost of acquire and release.
	WorkloadDistinct Workload = "distinct"
	// WorkloadContended has all workers fight for one key, retrying at once
	// when refused: it measures handoffs.
	WorkloadContended Workload = "contended"
	// WorkloadHotWait has all workers queue on one key with LOCK ... WAIT
	// (native mode): each grantee releases at once and queues again, so it
	// measures the server's hand-offs to waiters, not clients' retries.
	WorkloadHotWait Workload = "hot-wait"
)

// maxWait is the server's bound on LOCK ... WAIT.
const maxWait = time.Minute

// Limits that keep a typo from exhausting memory or file descriptors.
const (
	maxConns    = 4096
	maxPipeline = 10000
)

// hardTimeoutGrace is how long the whole run may overrun warmup plus
// duration before it is abandoned.
const hardTimeoutGrace = 30 * time.Second

// Config describes one benchmark run.
type Config struct {
	// Addr is the server's host:port.
	Addr string
	// Conns is the number of workers, each with its own connection.
	Conns int
	// Pipeline is the number of acquire+release cycles a worker sends as one
	// pipeline (distinct workload only; 1 is request/response).
	Pipeline int
	// Duration is the measured time, after Warmup. It always bounds the run.
	Duration time.Duration
	// Ops, if positive, stops the run once this many measured cycles
	// (contended: acquire attempts) have been started, over all workers; a
	// failed cycle uses up its share too. 0 means no limit.
	Ops int64
	// Mode selects the lock commands.
	Mode Mode
	// Workload selects the keys.
	Workload Workload
	// TTL is the lease given to every lock; it is sent in whole milliseconds.
	TTL time.Duration
	// Wait is the WAIT of every LOCK in the hot-wait workload (whole
	// milliseconds); the connections' read timeout is extended by it.
	Wait time.Duration
	// KeysPrefix starts every key the benchmark touches.
	KeysPrefix string
	// Warmup runs the workload before measuring; nothing done during warmup
	// counts in the figures, except errors.
	Warmup time.Duration
	// Auth is how every connection proves who it is: TLS and AUTH.
	Auth Auth
}

// Auth is how the benchmark reaches a secured server: TLS on the client
// port, and a user and password sent as AUTH on every connection.
type Auth struct {
	// TLS makes every connection TLS, verifying the server's certificate
	// against CAFile (the system's roots if empty).
	TLS bool
	// CAFile is the PEM file of the CA that signed the server's certificate.
	CAFile string
	// CertFile and KeyFile, both or neither, are the client certificate
	// presented to a server that asks for one (tls-auth-clients yes).
	CertFile, KeyFile string
	// User is the ACL user AUTH names; empty means the default user.
	User string
	// Pass, if not empty, is sent as AUTH [User] Pass on every connection
	// before anything else.
	Pass string
}

// Validate reports the first inconsistent field.
func (a Auth) Validate() error {
	switch {
	case !a.TLS && (a.CAFile != "" || a.CertFile != "" || a.KeyFile != ""):
		return errors.New("tls-ca, tls-cert and tls-key need -tls")
	case (a.CertFile == "") != (a.KeyFile == ""):
		return errors.New("tls-cert and tls-key go together")
	case a.User != "" && a.Pass == "":
		return errors.New("user needs -pass")
	}
	return nil
}

// tlsConfig loads the files and returns the connections' TLS config, nil
// without TLS. The server name is the address's host (crypto/tls fills it
// in on dial).
func (a Auth) tlsConfig() (*tls.Config, error) {
	if !a.TLS {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12}
	if a.CAFile != "" {
		b, err := os.ReadFile(a.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls-ca: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(b) {
			return nil, fmt.Errorf("tls-ca %s: no PEM certificate in it", a.CAFile)
		}
	}
	if a.CertFile != "" {
		pair, err := tls.LoadX509KeyPair(a.CertFile, a.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls-cert/tls-key: %w", err)
		}
		c.Certificates = []tls.Certificate{pair}
	}
	return c, nil
}

// DefaultConfig returns the defaults of the command-line flags.
func DefaultConfig() Config {
	return Config{
		Addr:       "127.0.0.1:6379",
		Conns:      16,
		Pipeline:   1,
		Duration:   10 * time.Second,
		Mode:       ModeNative,
		Workload:   WorkloadDistinct,
		TTL:        10 * time.Second,
		Wait:       30 * time.Second,
		KeysPrefix: "bench:",
		Warmup:     time.Second,
	}
}

// Validate reports the first invalid field. Unlike the servers' configs, a
// zero field is not replaced by a default: a benchmark must run exactly what
// it was asked to.
func (c Config) Validate() error {
	if _, _, err := net.SplitHostPort(c.Addr); err != nil {
		return fmt.Errorf("addr %q: want host:port: %w", c.Addr, err)
	}
	switch {
	case c.Conns < 1 || c.Conns > maxConns:
		return fmt.Errorf("conns must be in [1, %d], got %d", maxConns, c.Conns)
	case c.Pipeline < 1 || c.Pipeline > maxPipeline:
		return fmt.Errorf("pipeline must be in [1, %d], got %d", maxPipeline, c.Pipeline)
	case c.Duration <= 0:
		return fmt.Errorf("duration must be positive, got %v", c.Duration)
	case c.Ops < 0:
		return fmt.Errorf("ops must be >= 0 (0 = until duration), got %d", c.Ops)
	case c.Warmup < 0:
		return fmt.Errorf("warmup must be >= 0, got %v", c.Warmup)
	case c.TTL < time.Millisecond:
		return fmt.Errorf("ttl must be at least 1 ms, got %v", c.TTL)
	case c.TTL%time.Millisecond != 0:
		return fmt.Errorf("ttl must be whole milliseconds, got %v", c.TTL)
	}
	if err := c.Auth.Validate(); err != nil {
		return err
	}
	switch c.Mode {
	case ModeNative, ModeSetNX, ModeSetNXEval, ModeShared, ModeSemaphore:
	default:
		return fmt.Errorf("mode must be %s, %s, %s, %s or %s, got %q", ModeNative, ModeSetNX, ModeSetNXEval, ModeShared, ModeSemaphore, c.Mode)
	}
	switch c.Workload {
	case WorkloadDistinct:
	case WorkloadContended:
		// The release depends on the acquire's reply (and, natively, its
		// token), so a worker cannot batch several attempts on the one key.
		if c.Pipeline != 1 {
			return fmt.Errorf("pipeline must be 1 with workload %s, got %d", WorkloadContended, c.Pipeline)
		}
	case WorkloadHotWait:
		switch {
		case c.Mode != ModeNative:
			return fmt.Errorf("workload %s needs mode %s (LOCK ... WAIT), got %s", WorkloadHotWait, ModeNative, c.Mode)
		case c.Pipeline != 1:
			return fmt.Errorf("pipeline must be 1 with workload %s, got %d", WorkloadHotWait, c.Pipeline)
		case c.Wait < time.Millisecond || c.Wait > maxWait || c.Wait%time.Millisecond != 0:
			return fmt.Errorf("wait must be whole milliseconds in [1ms, %v], got %v", maxWait, c.Wait)
		}
	default:
		return fmt.Errorf("workload must be %s, %s or %s, got %q", WorkloadDistinct, WorkloadContended, WorkloadHotWait, c.Workload)
	}
	return nil
}

// HardTimeout is the deadline of the whole run: warmup plus duration plus
// a 30 s grace for connecting, draining and slow replies.
func (c Config) HardTimeout() time.Duration {
	if c.Workload == WorkloadHotWait {
		return c.Warmup + c.Duration + c.Wait + hardTimeoutGrace // the last waits may run their WAIT out
	}
	return c.Warmup + c.Duration + hardTimeoutGrace
}

// options are the command line: the run's Config plus how to print it.
type options struct {
	Config
	JSON bool
}

// errUsage marks a command line that cannot be run; the message has been
// printed with the usage already.
var errUsage = errors.New("invalid command line")

// parseArgs parses and validates the command line. Usage and problems go to
// stderr. It returns flag.ErrHelp for -h, and an error wrapping errUsage for
// a bad command line.
func parseArgs(args []string, stderr io.Writer) (options, error) {
	def := DefaultConfig()
	var (
		o      options
		mode   string
		wl     string
		ttlMS  int64
		waitMS int64
		fs     = flag.NewFlagSet("raftlock-bench", flag.ContinueOnError)
	)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: raftlock-bench [flags]\n\n"+
			"Load generator for raftlock (or any Redis-protocol lock server): N workers,\n"+
			"each on its own connection, run acquire+release cycles and report\n"+
			"throughput and latency percentiles.\n\nflags:\n")
		fs.PrintDefaults()
	}
	fs.StringVar(&o.Addr, "addr", def.Addr, "server `host:port`")
	fs.IntVar(&o.Conns, "conns", def.Conns, "workers, one connection each")
	fs.IntVar(&o.Pipeline, "pipeline", def.Pipeline, "acquire+release cycles per pipeline (distinct workload; 1 = request/response)")
	fs.DurationVar(&o.Duration, "duration", def.Duration, "measured time, after warmup")
	fs.Int64Var(&o.Ops, "ops", def.Ops, "stop after this many measured cycles in total (contended: attempts); 0 = until duration")
	fs.StringVar(&mode, "mode", string(def.Mode), "lock commands: native (LOCK/UNLOCK), setnx (SET NX PX/DEL), setnx-eval (SET NX PX/EVAL compare-and-delete), shared (LOCK ... SHARED/UNLOCK) or semaphore (SEMACQUIRE key 4/SEMRELEASE)")
	fs.StringVar(&wl, "workload", string(def.Workload), "distinct (a new key per cycle), contended (all workers retry one key) or hot-wait (all workers queue on one key with LOCK ... WAIT; native mode)")
	fs.Int64Var(&ttlMS, "ttl", def.TTL.Milliseconds(), "lock lease in milliseconds")
	fs.Int64Var(&waitMS, "wait", def.Wait.Milliseconds(), "LOCK ... WAIT in milliseconds (hot-wait workload)")
	fs.StringVar(&o.KeysPrefix, "keys-prefix", def.KeysPrefix, "prefix of every key")
	fs.DurationVar(&o.Warmup, "warmup", def.Warmup, "unmeasured run before measuring")
	fs.BoolVar(&o.Auth.TLS, "tls", false, "connect with TLS")
	fs.StringVar(&o.Auth.CAFile, "tls-ca", "", "PEM `file` of the CA that signed the server's certificate (default: the system's roots)")
	fs.StringVar(&o.Auth.CertFile, "tls-cert", "", "client certificate PEM `file`, for a server that asks for one (with -tls-key)")
	fs.StringVar(&o.Auth.KeyFile, "tls-key", "", "client key PEM `file` (with -tls-cert)")
	fs.StringVar(&o.Auth.User, "user", "", "ACL user sent with AUTH (default: the default user; needs -pass)")
	fs.StringVar(&o.Auth.Pass, "pass", "", "password sent as AUTH [user] pass on every connection")
	fs.BoolVar(&o.JSON, "json", false, "print one JSON object on stdout (the table goes to stderr)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return options{}, err
		}
		return options{}, fmt.Errorf("%w: %w", errUsage, err) // flag printed it
	}
	if fs.NArg() > 0 {
		err := fmt.Errorf("%w: unexpected argument %q", errUsage, fs.Arg(0))
		fmt.Fprintln(stderr, err)
		fs.Usage()
		return options{}, err
	}
	if ttlMS < 1 || ttlMS > int64(math.MaxInt64/time.Millisecond) {
		err := fmt.Errorf("%w: ttl must be in [1, %d] ms, got %d", errUsage, int64(math.MaxInt64/time.Millisecond), ttlMS)
		fmt.Fprintln(stderr, err)
		return options{}, err
	}
	o.Mode, o.Workload, o.TTL = Mode(mode), Workload(wl), time.Duration(ttlMS)*time.Millisecond
	o.Wait = time.Duration(min(max(waitMS, 0), int64(maxWait/time.Millisecond)+1)) * time.Millisecond
	if err := o.Validate(); err != nil {
		err = fmt.Errorf("%w: %w", errUsage, err)
		fmt.Fprintln(stderr, err)
		return options{}, err
	}
	return o, nil
}
