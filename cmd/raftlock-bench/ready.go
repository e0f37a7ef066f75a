package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReadyConfig describes a wait for a (re)starting node to serve.
type ReadyConfig struct {
	// Addr is the node's host:port.
	Addr string
	// Since is when the node was started; every figure counts from it.
	Since time.Time
	// ReadKey, if set, is a key the node held before it restarted: GET must
	// return its value for the node to count as serving reads.
	ReadKey string
	// Interval is the pause between attempts: the figures' resolution.
	Interval time.Duration
	// Timeout bounds the wait, from Since.
	Timeout time.Duration
}

// readyTimes are the first successes, from Since; 0 means not yet.
type readyTimes struct {
	Connected time.Duration // first reply of any kind, errors included
	Write     time.Duration // first lock granted
	Read      time.Duration // first GET of ReadKey that found it
	Attempts  int
	LastErr   string
}

func (r *readyTimes) done(wantRead bool) bool {
	return r.Connected > 0 && r.Write > 0 && (r.Read > 0 || !wantRead)
}

// waitReady polls until the node grants a lock and, with a ReadKey, answers
// a read of it, or until the timeout.
func waitReady(ctx context.Context, c ReadyConfig) (readyTimes, error) {
	var (
		r      readyTimes
		client *redis.Client
	)
	defer func() {
		if client != nil {
			_ = client.Close() // nothing to do about a failed close
		}
	}()
	key := fmt.Sprintf("ready:%08x", rand.Uint32())
	giveUp := c.Since.Add(c.Timeout)
	for ctx.Err() == nil && time.Now().Before(giveUp) && !r.done(c.ReadKey != "") {
		r.Attempts++
		if client == nil {
			client = dialReady(ctx, c.Addr, &r)
		}
		if client != nil && r.poll(ctx, client, c, key) {
			_ = client.Close()
			client = nil
		}
		pause(ctx, min(c.Interval, time.Until(giveUp)))
	}
	if !r.done(c.ReadKey != "") {
		return r, fmt.Errorf("%w: %s did not serve within %v of its start (last error: %s)", errFailures, c.Addr, c.Timeout, r.LastErr)
	}
	return r, nil
}

// dialReady returns a client once the node accepts connections, or nil.
// It dials itself first: after a failed dial go-redis retries only once a
// second, which would hide when the node started listening.
func dialReady(ctx context.Context, addr string, r *readyTimes) *redis.Client {
	d := net.Dialer{Timeout: time.Second}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		r.LastErr = err.Error()
		return nil
	}
	_ = conn.Close() // it only proved the listener is up
	return redis.NewClient(&redis.Options{
		Addr: addr, Protocol: 2, PoolSize: 1, MaxRetries: -1, DisableIdentity: true, DialerRetries: 1,
		ContextTimeoutEnabled: true, DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
}

// poll makes one attempt at each step not yet done. It reports whether the
// connection failed, so that the next attempt dials afresh.
func (r *readyTimes) poll(ctx context.Context, client *redis.Client, c ReadyConfig, key string) (ioFailed bool) {
	fail := func(err error) bool {
		r.LastErr = err.Error()
		return kindOf(err) == failIO && !errors.Is(err, redis.Nil)
	}
	if r.Write == 0 {
		token, err := client.Do(ctx, "LOCK", key, 10_000).Int64()
		if err == nil || kindOf(err) == failServer {
			r.Connected = cmp.Or(r.Connected, time.Since(c.Since))
		}
		if err != nil {
			return fail(err)
		}
		r.Write = time.Since(c.Since)
		_ = client.Do(ctx, "UNLOCK", key, token).Err() // leave the table as it was; the lease ends it otherwise
	}
	if c.ReadKey != "" && r.Read == 0 {
		if err := client.Get(ctx, c.ReadKey).Err(); err != nil {
			return fail(err) // redis.Nil too: the node serves but lost the key
		}
		r.Read = time.Since(c.Since)
	}
	return false
}

func parseReadyArgs(args []string, stderr io.Writer) (ReadyConfig, bool, error) {
	c := ReadyConfig{Addr: "127.0.0.1:6379", Interval: 5 * time.Millisecond, Timeout: time.Minute}
	var (
		sinceNS int64
		js      bool
		fs      = flag.NewFlagSet("raftlock-bench ready", flag.ContinueOnError)
	)
	fs.Usage = usage(fs, stderr, "usage: raftlock-bench ready [flags]\n\n"+
		"Poll a starting node until it grants a lock (and, with -read-key, finds that\n"+
		"key); report how long each took from -since.")
	fs.StringVar(&c.Addr, "addr", c.Addr, "node `host:port`")
	fs.Int64Var(&sinceNS, "since", 0, "when the node was started, Unix `nanoseconds` (date +%s%N); 0 = now")
	fs.StringVar(&c.ReadKey, "read-key", "", "a key the node held before: GET must find it")
	fs.DurationVar(&c.Interval, "interval", c.Interval, "pause between attempts")
	fs.DurationVar(&c.Timeout, "timeout", c.Timeout, "give up this long after -since")
	fs.BoolVar(&js, "json", false, "print one JSON object on stdout")
	if err := parseFlags(fs, args, stderr); err != nil {
		return c, false, err
	}
	c.Since = time.Now()
	if sinceNS != 0 {
		c.Since = time.Unix(0, sinceNS)
	}
	var err error
	switch _, _, aerr := net.SplitHostPort(c.Addr); {
	case aerr != nil:
		err = fmt.Errorf("addr %q: want host:port: %w", c.Addr, aerr)
	case c.Interval <= 0 || c.Timeout <= 0:
		err = fmt.Errorf("interval and timeout must be positive, got %v and %v", c.Interval, c.Timeout)
	case time.Since(c.Since) > c.Timeout || time.Until(c.Since) > time.Second:
		err = fmt.Errorf("since must be a recent Unix time in nanoseconds, got %d", sinceNS)
	}
	if err != nil {
		return c, false, invalid(err, stderr)
	}
	return c, js, nil
}

// runReady is the ready subcommand.
func runReady(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	c, js, err := parseReadyArgs(args, stderr)
	if err != nil {
		return err
	}
	ctx, stop := bounded(ctx, c.Timeout+hardTimeoutGrace, stderr)
	defer stop()
	r, waitErr := waitReady(ctx, c)
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	if js {
		err = json.NewEncoder(stdout).Encode(map[string]any{
			"schema": "raftlock-bench-ready/1", "addr": c.Addr, "read_key": c.ReadKey,
			"connected_ms": ms(r.Connected), "write_ms": ms(r.Write), "read_ms": ms(r.Read),
			"attempts": r.Attempts, "last_error": r.LastErr,
		})
	} else {
		_, err = fmt.Fprintf(stdout, "raftlock-bench ready addr=%s connected_ms=%.1f write_ms=%.1f read_ms=%.1f attempts=%d\n",
			c.Addr, ms(r.Connected), ms(r.Write), ms(r.Read), r.Attempts)
	}
	return errors.Join(waitErr, err)
}
