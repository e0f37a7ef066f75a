package main

import (
	"errors"
	"flag"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestParseArgs(t *testing.T) {
	def := DefaultConfig()
	with := func(f func(*options)) options {
		o := options{Config: def}
		f(&o)
		return o
	}
	tests := []struct {
		name string
		args []string
		want options
	}{
		{"defaults", nil, options{Config: def}},
		{"all flags", []string{
			"-addr", "10.0.0.1:7000", "-conns", "64", "-pipeline", "8", "-duration", "3s", "-ops", "1000",
			"-mode", "setnx-eval", "-workload", "distinct", "-ttl", "2500", "-wait", "1500", "-keys-prefix", "x:", "-warmup", "0", "-json",
		}, options{
			Config: Config{
				Addr: "10.0.0.1:7000", Conns: 64, Pipeline: 8, Duration: 3 * time.Second, Ops: 1000,
				Mode: ModeSetNXEval, Workload: WorkloadDistinct, TTL: 2500 * time.Millisecond, Wait: 1500 * time.Millisecond, KeysPrefix: "x:",
			},
			JSON: true,
		}},
		{"contended with pipeline 1", []string{"-workload", "contended", "-mode", "setnx"}, with(func(o *options) {
			o.Workload, o.Mode = WorkloadContended, ModeSetNX
		})},
		{"hot-wait", []string{"-workload", "hot-wait", "-wait", "2000"}, with(func(o *options) {
			o.Workload, o.Wait = WorkloadHotWait, 2*time.Second
		})},
		{"empty prefix", []string{"-keys-prefix", ""}, with(func(o *options) { o.KeysPrefix = "" })},
		{"tls and auth", []string{"-tls", "-tls-ca", "ca.crt", "-tls-cert", "c.crt", "-tls-key", "c.key", "-user", "alice", "-pass", "pw"},
			with(func(o *options) {
				o.Auth = Auth{TLS: true, CAFile: "ca.crt", CertFile: "c.crt", KeyFile: "c.key", User: "alice", Pass: "pw"}
			})},
		{"tls alone", []string{"-tls"}, with(func(o *options) { o.Auth.TLS = true })},
		{"password alone", []string{"-pass", "pw"}, with(func(o *options) { o.Auth.Pass = "pw" })},
		{"hostname addr", []string{"-addr", "localhost:6379"}, with(func(o *options) { o.Addr = "localhost:6379" })},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseArgs(tt.args, io.Discard)
			if err != nil {
				t.Fatalf("parseArgs(%q) = %v, want no error", tt.args, err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("parseArgs(%q) mismatch (-want +got):\n%s", tt.args, diff)
			}
		})
	}
}

func TestParseArgsRejects(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantMsg string // the message must name the offending flag
	}{
		{"zero conns", []string{"-conns", "0"}, "conns"},
		{"too many conns", []string{"-conns", "100000"}, "conns"},
		{"zero pipeline", []string{"-pipeline", "0"}, "pipeline"},
		{"zero duration", []string{"-duration", "0"}, "duration"},
		{"negative duration", []string{"-duration", "-1s"}, "duration"},
		{"negative ops", []string{"-ops", "-1"}, "ops"},
		{"negative warmup", []string{"-warmup", "-1s"}, "warmup"},
		{"zero ttl", []string{"-ttl", "0"}, "ttl"},
		{"huge ttl", []string{"-ttl", "9223372036854775807"}, "ttl"},
		{"unknown mode", []string{"-mode", "redlock"}, "mode"},
		{"unknown workload", []string{"-workload", "zipf"}, "workload"},
		{"contended pipelined", []string{"-workload", "contended", "-pipeline", "4"}, "pipeline"},
		{"addr without port", []string{"-addr", "localhost"}, "addr"},
		{"unknown flag", []string{"-frobnicate"}, "frobnicate"},
		{"malformed number", []string{"-conns", "many"}, "conns"},
		{"positional argument", []string{"extra"}, "extra"},
		{"ca without tls", []string{"-tls-ca", "ca.crt"}, "tls"},
		{"cert without key", []string{"-tls", "-tls-cert", "c.crt"}, "tls-key"},
		{"key without cert", []string{"-tls", "-tls-key", "c.key"}, "tls-cert"},
		{"user without password", []string{"-user", "alice"}, "pass"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stderr strings.Builder
			_, err := parseArgs(tt.args, &stderr)
			if !errors.Is(err, errUsage) {
				t.Fatalf("parseArgs(%q) = %v, want an error wrapping errUsage", tt.args, err)
			}
			if !strings.Contains(err.Error(), tt.wantMsg) {
				t.Errorf("error %q does not name %q", err, tt.wantMsg)
			}
			if !strings.Contains(stderr.String(), tt.wantMsg) {
				t.Errorf("stderr %q does not explain %q", stderr.String(), tt.wantMsg)
			}
			if got := exitCode(err, io.Discard); got != 2 {
				t.Errorf("exitCode = %d, want 2", got)
			}
		})
	}
}

func TestParseArgsHelp(t *testing.T) {
	var stderr strings.Builder
	_, err := parseArgs([]string{"-h"}, &stderr)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parseArgs(-h) = %v, want flag.ErrHelp", err)
	}
	for _, f := range []string{"-addr", "-conns", "-pipeline", "-duration", "-ops", "-mode", "-workload", "-ttl", "-keys-prefix", "-warmup", "-json", "-tls", "-tls-ca", "-tls-cert", "-tls-key", "-user", "-pass"} {
		if !strings.Contains(stderr.String(), f) {
			t.Errorf("usage does not mention %s", f)
		}
	}
	if got := exitCode(err, io.Discard); got != 0 {
		t.Errorf("exitCode = %d, want 0", got)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantMsg string // "" means valid
	}{
		{"default", func(*Config) {}, ""},
		{"sub-millisecond ttl", func(c *Config) { c.TTL = 1500 * time.Microsecond }, "ttl"},
		{"empty mode", func(c *Config) { c.Mode = "" }, "mode"},
		{"empty workload", func(c *Config) { c.Workload = "" }, "workload"},
		{"empty addr", func(c *Config) { c.Addr = "" }, "addr"},
		{"hot-wait", func(c *Config) { c.Workload = WorkloadHotWait }, ""},
		{"hot-wait needs native", func(c *Config) { c.Workload, c.Mode = WorkloadHotWait, ModeSetNX }, "mode native"},
		{"hot-wait needs a wait", func(c *Config) { c.Workload, c.Wait = WorkloadHotWait, 0 }, "wait"},
		{"hot-wait wait bounded", func(c *Config) { c.Workload, c.Wait = WorkloadHotWait, maxWait+time.Millisecond }, "wait"},
		{"hot-wait unpipelined", func(c *Config) { c.Workload, c.Pipeline = WorkloadHotWait, 2 }, "pipeline"},
		{"zero warmup is fine", func(c *Config) { c.Warmup = 0 }, ""},
		{"max conns is fine", func(c *Config) { c.Conns = maxConns }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.mutate(&c)
			err := c.Validate()
			switch {
			case tt.wantMsg == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.wantMsg != "" && (err == nil || !strings.Contains(err.Error(), tt.wantMsg)):
				t.Errorf("Validate() = %v, want an error naming %q", err, tt.wantMsg)
			}
		})
	}
}

func TestHardTimeout(t *testing.T) {
	c := DefaultConfig()
	c.Duration, c.Warmup = 10*time.Second, 2*time.Second
	if got, want := c.HardTimeout(), 42*time.Second; got != want {
		t.Errorf("HardTimeout() = %v, want %v", got, want)
	}
}
