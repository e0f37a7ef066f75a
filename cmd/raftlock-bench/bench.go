package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/cmd/raftlock-bench/internal/latency"
)

// unlockScript is the compare-and-delete release of the SET NX locking
// recipe: delete the key only if it still holds our value.
const unlockScript = "if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end"

const (
	// maxLoggedErrors is how many failures are logged (and kept in Result);
	// the rest are only counted.
	maxLoggedErrors = 5
	// ioErrorPause keeps a worker whose connection fails from spinning on
	// reconnects.
	ioErrorPause = 10 * time.Millisecond
	// netTimeout bounds each dial, read and write.
	netTimeout = 5 * time.Second
)

// errNoConnection reports that a worker could not reach the server before
// the run started; nothing was measured.
var errNoConnection = errors.New("cannot connect")

// The measured operations, in the order they are reported.
const (
	opAttempt = iota // contended: every acquire attempt, granted or refused
	opAcquire        // a granted acquire
	opRelease        // a release of our own lock
	opCycle          // acquire + release (contended: a handoff)
	numOps
)

// OpStats summarises one measured operation type.
type OpStats struct {
	Name   string
	Count  uint64
	PerSec float64
	Min    time.Duration
	Mean   time.Duration
	P50    time.Duration
	P99    time.Duration
	P999   time.Duration
	Max    time.Duration
}

// Result is what a run measured. Counts and latencies cover the measured
// period only; the error counts include the warmup.
type Result struct {
	// Elapsed runs from the end of the warmup to the completion of the last
	// measured batch, failed or not.
	Elapsed time.Duration
	// Cycles counts completed cycles: distinct, acquire+release; contended,
	// acquire attempts answered without error (Handoffs + Refusals, unless a
	// release failed).
	Cycles int64
	// Handoffs counts granted and released locks in the contended workload.
	Handoffs int64
	// Refusals counts contended attempts refused because the key was held.
	Refusals int64
	// Errors is ServerErrors + IOErrors + UnexpectedReplies.
	Errors int64
	// ServerErrors counts error replies from the server.
	ServerErrors int64
	// IOErrors counts failures to send or receive (connection, timeout).
	IOErrors int64
	// UnexpectedReplies counts well-formed replies that are wrong, such as a
	// refused lock on a fresh key or a release that released nothing.
	UnexpectedReplies int64
	// FirstErrors holds the first few failures, as text.
	FirstErrors []string
	// Ops has one entry per measured operation type.
	Ops []OpStats
}

// Rate returns n per second of Elapsed, or 0 if nothing was measured.
func (r Result) Rate(n int64) float64 {
	if r.Elapsed <= 0 {
		return 0
	}
	return float64(n) / r.Elapsed.Seconds()
}

// unexpectedReplyError is a well-formed reply that the benchmark did not
// expect, e.g. a nil to a LOCK on a fresh key.
type unexpectedReplyError struct {
	cmd   string
	reply string
}

func (e *unexpectedReplyError) Error() string {
	return fmt.Sprintf("unexpected reply to %s: %s", e.cmd, e.reply)
}

// errorLog counts nothing; it keeps and logs the first few failures of all
// workers.
type errorLog struct {
	log *slog.Logger
	mu  struct {
		sync.Mutex
		first []string
	}
}

func (l *errorLog) note(workerID int, op, key string, err error) {
	l.mu.Lock()
	keep := len(l.mu.first) < maxLoggedErrors
	if keep {
		l.mu.first = append(l.mu.first, fmt.Sprintf("worker %d: %s %s: %v", workerID, op, key, err))
	}
	l.mu.Unlock()
	if keep {
		l.log.Warn("operation failed", "worker", workerID, "op", op, "key", key, "err", err)
	}
}

func (l *errorLog) first() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.mu.first...)
}

// plan is what all workers of one run share. Read-only once workers start,
// apart from budget and errs, which are safe for concurrent use.
type plan struct {
	cfg       Config
	ttlMS     int64
	runID     string
	warmupEnd time.Time
	end       time.Time
	budget    *atomic.Int64 // measured cycles left; nil without -ops
	errs      *errorLog
}

// claim takes up to n cycles from the budget and returns how many it got.
func (p *plan) claim(n int) int {
	if p.budget == nil {
		return n
	}
	for {
		left := p.budget.Load()
		if left <= 0 {
			return 0
		}
		k := min(int64(n), left)
		if p.budget.CompareAndSwap(left, left-k) {
			return int(k)
		}
	}
}

// stats is one worker's tally; merged after the workers stop.
type stats struct {
	hist                                [numOps]latency.Histogram
	cycles, handoffs, refusals          int64
	serverErrs, ioErrs, unexpectedReply int64
	lastDone                            time.Time // completion of the last measured batch
}

type worker struct {
	id     int
	plan   *plan
	client *redis.Client
	owner  string
	seq    uint64
	st     stats
	// Reused per batch.
	keys, values []string
	tokens       []int64
	granted      []int
}

// runBench runs the benchmark described by cfg and returns what it
// measured. The first few failures are logged to log. It returns an error
// wrapping errNoConnection if the server cannot be reached, and the context's
// cause, with the partial result, if ctx ends before the run does. Failed
// operations are not an error: they are counted in the Result.
func runBench(ctx context.Context, cfg Config, log *slog.Logger) (Result, error) {
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	p := &plan{
		cfg:   cfg,
		ttlMS: cfg.TTL.Milliseconds(),
		runID: fmt.Sprintf("%08x", rand.Uint32()),
		errs:  &errorLog{log: log},
	}
	if cfg.Ops > 0 {
		p.budget = new(atomic.Int64)
		p.budget.Store(cfg.Ops)
	}

	tlsConf, err := cfg.Auth.tlsConfig()
	if err != nil {
		return Result{}, err
	}
	workers := make([]*worker, cfg.Conns)
	for i := range workers {
		workers[i] = &worker{
			id:     i,
			plan:   p,
			client: newWorkerClient(cfg, tlsConf),
			owner:  fmt.Sprintf("raftlock-bench-%s-%d", p.runID, i),
		}
	}
	defer func() {
		for _, w := range workers {
			_ = w.client.Close() // nothing to do about a failed close
		}
	}()
	clients := make([]*redis.Client, len(workers))
	for i, w := range workers {
		clients[i] = w.client
	}
	if err := connect(ctx, clients); err != nil {
		return Result{}, fmt.Errorf("%w to %s: %w", errNoConnection, cfg.Addr, err)
	}

	start := time.Now()
	p.warmupEnd = start.Add(cfg.Warmup)
	p.end = p.warmupEnd.Add(cfg.Duration)
	var wg sync.WaitGroup
	for _, w := range workers {
		wg.Go(func() { w.loop(ctx) })
	}
	wg.Wait()

	res := collect(p, workers)
	if ctx.Err() != nil {
		return res, fmt.Errorf("run aborted: %w", context.Cause(ctx))
	}
	return res, nil
}

// newClient returns a client that holds exactly one connection: one pool
// slot, pipelines on that same pool, no retries (a retried LOCK could take a
// second lock), RESP2, no CLIENT SETINFO, and the context's deadline honoured
// on every read and write. Over TLS with tlsConf if it is not nil; with
// auth.Pass, go-redis sends AUTH [user] pass first on every connection.
func newClient(addr string, auth Auth, tlsConf *tls.Config) *redis.Client {
	return redis.NewClient(clientOptions(addr, auth, tlsConf))
}

// newWorkerClient is newClient for a worker of cfg's run: in the hot-wait
// workload a read may take the whole WAIT.
func newWorkerClient(cfg Config, tlsConf *tls.Config) *redis.Client {
	o := clientOptions(cfg.Addr, cfg.Auth, tlsConf)
	if cfg.Workload == WorkloadHotWait {
		o.ReadTimeout = netTimeout + cfg.Wait
	}
	return redis.NewClient(o)
}

// clientOptions are newClient's.
func clientOptions(addr string, auth Auth, tlsConf *tls.Config) *redis.Options {
	return &redis.Options{
		Addr:                  addr,
		TLSConfig:             tlsConf,
		Username:              auth.User,
		Password:              auth.Pass,
		Protocol:              2,
		PoolSize:              1,
		PipelinePoolSize:      -1,
		MaxRetries:            -1,
		DisableIdentity:       true,
		ContextTimeoutEnabled: true,
		DialTimeout:           netTimeout,
		ReadTimeout:           netTimeout,
		WriteTimeout:          netTimeout,
	}
}

// connect opens every worker's connection with a PING, so that dialing is
// not measured and an unreachable server fails the run at once. An error
// reply to PING still proves the connection works, except NOAUTH or
// WRONGPASS (missing or wrong -user/-pass), which fails it. It returns the first
// failure and how many connections failed.
func connect(ctx context.Context, clients []*redis.Client) error {
	errs := make([]error, len(clients))
	var wg sync.WaitGroup
	for i, c := range clients {
		wg.Go(func() {
			err := c.Ping(ctx).Err()
			var rerr redis.Error
			if err != nil && (!errors.As(err, &rerr) || refusedAuth(err)) {
				errs[i] = err
			}
		})
	}
	wg.Wait()
	var (
		first  error
		failed int
	)
	for _, err := range errs {
		if err != nil {
			first = cmp.Or(first, err)
			failed++
		}
	}
	if first != nil {
		return fmt.Errorf("%w (%d of %d connections failed)", first, failed, len(clients))
	}
	return nil
}

// refusedAuth reports whether err is the server refusing the connection's
// credentials (or their absence): the run could only fail every operation.
func refusedAuth(err error) bool {
	msg := err.Error()
	return strings.HasPrefix(msg, "NOAUTH") || strings.HasPrefix(msg, "WRONGPASS")
}

// collect merges the workers' tallies.
func collect(p *plan, workers []*worker) Result {
	var (
		total    stats
		lastDone time.Time
	)
	for _, w := range workers {
		for i := range total.hist {
			total.hist[i].Merge(&w.st.hist[i])
		}
		total.cycles += w.st.cycles
		total.handoffs += w.st.handoffs
		total.refusals += w.st.refusals
		total.serverErrs += w.st.serverErrs
		total.ioErrs += w.st.ioErrs
		total.unexpectedReply += w.st.unexpectedReply
		if w.st.lastDone.After(lastDone) {
			lastDone = w.st.lastDone
		}
	}
	res := Result{
		Cycles:            total.cycles,
		Handoffs:          total.handoffs,
		Refusals:          total.refusals,
		ServerErrors:      total.serverErrs,
		IOErrors:          total.ioErrs,
		UnexpectedReplies: total.unexpectedReply,
		Errors:            total.serverErrs + total.ioErrs + total.unexpectedReply,
		FirstErrors:       p.errs.first(),
	}
	if lastDone.After(p.warmupEnd) {
		res.Elapsed = lastDone.Sub(p.warmupEnd)
	}
	names := [numOps]string{opAttempt: "attempt", opAcquire: "acquire", opRelease: "release", opCycle: "cycle"}
	ops := []int{opAcquire, opRelease, opCycle}
	switch p.cfg.Workload {
	case WorkloadContended:
		names[opCycle] = "handoff"
		ops = []int{opAttempt, opAcquire, opRelease, opCycle}
	case WorkloadHotWait:
		// acquire is the LOCK ... WAIT that was granted: its latency is the wait.
		names[opAcquire], names[opCycle] = "wait", "handoff"
		ops = []int{opAcquire, opRelease, opCycle}
	}
	for _, op := range ops {
		h := &total.hist[op]
		res.Ops = append(res.Ops, OpStats{
			Name:   names[op],
			Count:  h.Count(),
			PerSec: res.Rate(int64(h.Count())),
			Min:    h.Min(),
			Mean:   h.Mean(),
			P50:    h.Quantile(0.50),
			P99:    h.Quantile(0.99),
			P999:   h.Quantile(0.999),
			Max:    h.Max(),
		})
	}
	return res
}

// loop runs batches until the end time, the ops budget or ctx stops it.
func (w *worker) loop(ctx context.Context) {
	p := w.plan
	for ctx.Err() == nil {
		now := time.Now()
		if !now.Before(p.end) {
			return
		}
		measured := !now.Before(p.warmupEnd)
		n := p.cfg.Pipeline
		if measured {
			if n = p.claim(n); n == 0 {
				return
			}
		}
		var ioFailed bool
		if p.cfg.Workload != WorkloadDistinct {
			ioFailed = w.attempt(ctx, measured)
		} else {
			ioFailed = w.distinct(ctx, n, measured)
		}
		if measured {
			w.st.lastDone = time.Now()
		}
		if ioFailed {
			pause(ctx, min(ioErrorPause, time.Until(p.end)))
		}
	}
}

// distinct runs n acquire+release cycles on fresh keys: one pipeline of n
// acquires, then one of the releases. Every operation of a batch is charged
// the batch's round trip. It reports whether an I/O error occurred.
func (w *worker) distinct(ctx context.Context, n int, measured bool) (ioFailed bool) {
	p := w.plan
	w.keys, w.values, w.tokens = w.keys[:0], w.values[:0], w.tokens[:0]
	acquires := make([][]any, n)
	for i := range n {
		w.seq++
		seq := strconv.FormatUint(w.seq, 10)
		key := p.cfg.KeysPrefix + p.runID + ":" + strconv.Itoa(w.id) + ":" + seq
		value := w.owner + ":" + seq
		w.keys = append(w.keys, key)
		w.values = append(w.values, value)
		acquires[i] = w.acquireArgs(key, value)
	}

	t0 := time.Now()
	cmds := w.exec(ctx, acquires)
	t1 := time.Now()
	w.granted = w.granted[:0]
	for i, cmd := range cmds {
		granted, token, err := w.parseAcquire(cmd)
		if err == nil && !granted {
			err = &unexpectedReplyError{cmd: w.acquireName(), reply: "nil (refused) on a fresh key"}
		}
		if err != nil {
			ioFailed = w.fail(ctx, "acquire", w.keys[i], err) || ioFailed
			continue
		}
		w.granted = append(w.granted, i)
		w.tokens = append(w.tokens, token)
	}
	if len(w.granted) == 0 {
		return ioFailed
	}

	releases := make([][]any, len(w.granted))
	for j, i := range w.granted {
		releases[j] = w.releaseArgs(w.keys[i], w.values[i], w.tokens[j])
	}
	t2 := time.Now()
	cmds = w.exec(ctx, releases)
	t3 := time.Now()
	var released uint64
	for j, cmd := range cmds {
		if err := w.checkRelease(cmd); err != nil {
			ioFailed = w.fail(ctx, "release", w.keys[w.granted[j]], err) || ioFailed
			continue
		}
		released++
	}
	if measured {
		w.st.hist[opAcquire].RecordN(t1.Sub(t0), uint64(len(w.granted)))
		w.st.hist[opRelease].RecordN(t3.Sub(t2), released)
		w.st.hist[opCycle].RecordN(t3.Sub(t0), released)
		w.st.cycles += int64(released)
	}
	return ioFailed
}

// attempt makes one try at the shared key (hot-wait: queues for it) and, if
// granted, releases it at once. It reports whether an I/O error occurred.
func (w *worker) attempt(ctx context.Context, measured bool) (ioFailed bool) {
	p := w.plan
	w.seq++
	key := p.cfg.KeysPrefix + p.runID + ":contended"
	value := w.owner + ":" + strconv.FormatUint(w.seq, 10)

	t0 := time.Now()
	cmd := w.client.Do(ctx, w.acquireArgs(key, value)...)
	t1 := time.Now()
	granted, token, err := w.parseAcquire(cmd)
	if err != nil {
		return w.fail(ctx, "acquire", key, err)
	}
	if measured {
		w.st.hist[opAttempt].Record(t1.Sub(t0))
		w.st.cycles++
	}
	if !granted {
		if measured {
			w.st.refusals++
		}
		return false
	}
	if measured {
		w.st.hist[opAcquire].Record(t1.Sub(t0))
	}

	t2 := time.Now()
	cmd = w.client.Do(ctx, w.releaseArgs(key, value, token)...)
	t3 := time.Now()
	if err := w.checkRelease(cmd); err != nil {
		return w.fail(ctx, "release", key, err)
	}
	if measured {
		w.st.hist[opRelease].Record(t3.Sub(t2))
		w.st.hist[opCycle].Record(t3.Sub(t0))
		w.st.handoffs++
	}
	return false
}

func (w *worker) exec(ctx context.Context, args [][]any) []*redis.Cmd {
	return execPipeline(ctx, w.client, args)
}

// execPipeline sends the commands as one pipeline, or as a plain request
// when there is only one. Each command's own Err tells how it fared.
func execPipeline(ctx context.Context, c *redis.Client, args [][]any) []*redis.Cmd {
	if len(args) == 1 {
		return []*redis.Cmd{c.Do(ctx, args[0]...)}
	}
	pipe := c.Pipeline()
	cmds := make([]*redis.Cmd, len(args))
	for i, a := range args {
		cmds[i] = pipe.Do(ctx, a...)
	}
	_, _ = pipe.Exec(ctx) // the first failure, which the commands also carry
	return cmds
}

func (w *worker) acquireName() string {
	switch w.plan.cfg.Mode {
	case ModeNative, ModeShared:
		return "LOCK"
	case ModeSemaphore:
		return "SEMACQUIRE"
	}
	return "SET NX"
}

func (w *worker) acquireArgs(key, value string) []any {
	switch {
	case w.plan.cfg.Workload == WorkloadHotWait:
		return []any{"LOCK", key, w.plan.ttlMS, "OWNER", w.owner, "WAIT", w.plan.cfg.Wait.Milliseconds()}
	case w.plan.cfg.Mode == ModeNative:
		return []any{"LOCK", key, w.plan.ttlMS, "OWNER", w.owner}
	case w.plan.cfg.Mode == ModeShared:
		return []any{"LOCK", key, w.plan.ttlMS, "OWNER", w.owner, "SHARED"}
	case w.plan.cfg.Mode == ModeSemaphore:
		return []any{"SEMACQUIRE", key, semPermits, w.plan.ttlMS, "OWNER", w.owner}
	}
	return []any{"SET", key, value, "NX", "PX", w.plan.ttlMS}
}

func (w *worker) releaseArgs(key, value string, token int64) []any {
	switch w.plan.cfg.Mode {
	case ModeNative, ModeShared:
		return []any{"UNLOCK", key, token}
	case ModeSemaphore:
		return []any{"SEMRELEASE", key, token}
	case ModeSetNX:
		return []any{"DEL", key}
	default:
		return []any{"EVAL", unlockScript, 1, key, value}
	}
}

// parseAcquire interprets the reply to an acquire: granted (with the fencing
// token in native mode), refused (nil reply), or an error.
func (w *worker) parseAcquire(cmd *redis.Cmd) (granted bool, token int64, err error) {
	return parseGrant(w.plan.cfg.Mode, cmd)
}

// parseGrant interprets the reply to an acquire sent in mode: LOCK's token,
// SET NX's OK, or nil for a refusal.
func parseGrant(mode Mode, cmd *redis.Cmd) (granted bool, token int64, err error) {
	v, err := cmd.Result()
	if errors.Is(err, redis.Nil) {
		return false, 0, nil
	}
	if err != nil {
		return false, 0, err
	}
	if mode.tokens() {
		token, ok := v.(int64)
		if !ok {
			return false, 0, &unexpectedReplyError{cmd: "LOCK", reply: fmt.Sprintf("%T %v, want an integer token", v, v)}
		}
		return true, token, nil
	}
	if s, ok := v.(string); !ok || s != "OK" {
		return false, 0, &unexpectedReplyError{cmd: "SET NX", reply: fmt.Sprintf("%T %v, want OK", v, v)}
	}
	return true, 0, nil
}

// checkRelease requires the reply :1, the only answer to a release of a lock
// we hold.
func (w *worker) checkRelease(cmd *redis.Cmd) error {
	v, err := cmd.Result()
	if errors.Is(err, redis.Nil) {
		v, err = nil, nil
	}
	if err != nil {
		return err
	}
	if n, ok := v.(int64); !ok || n != 1 {
		name := map[Mode]string{ModeNative: "UNLOCK", ModeSetNX: "DEL", ModeSetNXEval: "EVAL", ModeShared: "UNLOCK", ModeSemaphore: "SEMRELEASE"}[w.plan.cfg.Mode]
		return &unexpectedReplyError{cmd: name, reply: fmt.Sprintf("%T %v, want 1", v, v)}
	}
	return nil
}

// fail counts err and logs it if it is among the first few; it reports
// whether err is an I/O error. Failures caused by ctx ending are not
// counted: the run reports the abort itself.
func (w *worker) fail(ctx context.Context, op, key string, err error) (ioErr bool) {
	if ended(ctx) {
		return false
	}
	switch kindOf(err) {
	case failUnexpected:
		w.st.unexpectedReply++
	case failServer:
		w.st.serverErrs++
	default:
		w.st.ioErrs++
		ioErr = true
	}
	w.plan.errs.note(w.id, op, key, err)
	return ioErr
}

// failKind sorts a failure into the three counts every report keeps.
type failKind int

const (
	failIO         failKind = iota // the connection failed or timed out
	failServer                     // an error reply
	failUnexpected                 // a well-formed but wrong reply
)

func kindOf(err error) failKind {
	var (
		rerr redis.Error
		uerr *unexpectedReplyError
	)
	switch {
	case errors.As(err, &uerr):
		return failUnexpected
	case errors.As(err, &rerr):
		return failServer
	}
	return failIO
}

// ended reports whether ctx is done or past its deadline. The socket
// deadline that go-redis takes from ctx can fire a moment before ctx's own
// timer does, so a read timed out by it must not count as a failure.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// pause sleeps for d or until ctx ends.
func pause(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
