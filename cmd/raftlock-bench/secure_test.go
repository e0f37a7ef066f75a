package main

import (
	"context"
	"errors"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
)

// startSecureNode builds raftlock and starts one node whose client port
// speaks TLS (client certificates optional) and whose default user has
// password pass. It returns the node's address and the CA.
func startSecureNode(t *testing.T, pass string) (string, *testutil.CA) {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and starts raftlock")
	}
	bin := filepath.Join(t.TempDir(), "raftlock")
	if err := testutil.GoBuild(bin, "github.com/raftlock/raftlock/cmd/raftlock", false); err != nil {
		t.Fatal(err)
	}
	ca := testutil.NewCA(t, "bench")
	srv := ca.Issue(t, "node")
	free := func() string {
		port, err := testutil.FreePort("127.0.0.1")
		if err != nil {
			t.Fatal(err)
		}
		return net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	}
	addr := free()
	p, err := testutil.Launch(t, "raftlock", bin, "--id", "n1", "--dir", t.TempDir(), "--addr", addr,
		"--raft-addr", free(), "--requirepass", pass,
		"--tls-cert-file", srv.CertFile, "--tls-key-file", srv.KeyFile, "--tls-ca-cert-file", ca.File,
		"--tls-auth-clients", "optional")
	if err != nil {
		t.Fatal(err)
	}
	auth := Auth{TLS: true, CAFile: ca.File, Pass: pass}
	tlsConf, err := auth.tlsConfig()
	if err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, 20*time.Second, func() error {
		if !p.Running() {
			t.Fatalf("raftlock exited:\n%s", p.Log())
		}
		c := newClient(addr, auth, tlsConf)
		defer c.Close()
		ctx, cancel := context.WithTimeout(t.Context(), time.Second)
		defer cancel()
		_, err := c.Do(ctx, "DBSIZE").Int64()
		return err
	})
	return addr, ca
}

// TestAgainstSecureNode runs the command against a node that wants TLS and
// a password: with the CA, a client certificate and the password it runs
// clean; without the password, with a wrong one or without TLS it fails
// to connect at all rather than counting failed operations.
func TestAgainstSecureNode(t *testing.T) {
	const pass = "bench-secret"
	addr, ca := startSecureNode(t, pass)
	client := ca.Issue(t, "client")
	base := []string{"-addr", addr, "-conns", "2", "-duration", "300ms", "-warmup", "100ms"}
	tests := []struct {
		name    string
		args    []string
		wantErr string // "" for a clean run
	}{
		{"tls and password", []string{"-tls", "-tls-ca", ca.File, "-pass", pass}, ""},
		{"client certificate and default user by name", []string{"-tls", "-tls-ca", ca.File,
			"-tls-cert", client.CertFile, "-tls-key", client.KeyFile, "-user", "default", "-pass", pass}, ""},
		{"no password", []string{"-tls", "-tls-ca", ca.File}, "NOAUTH"},
		{"wrong password", []string{"-tls", "-tls-ca", ca.File, "-pass", "guess"}, "WRONGPASS"},
		{"no tls", []string{"-pass", pass}, "cannot connect"},
		{"unknown CA", []string{"-tls", "-pass", pass}, "certificate"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr strings.Builder
			err := run(t.Context(), append(append([]string{}, base...), tt.args...), &stdout, &stderr)
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("run = %v, want nil\nstdout:\n%s\nstderr:\n%s", err, stdout.String(), stderr.String())
				}
				if !strings.Contains(stdout.String(), "tls=true auth=true") {
					t.Errorf("settings line lacks tls=true auth=true:\n%s", stdout.String())
				}
				return
			}
			if !errors.Is(err, errNoConnection) || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("run = %v, want errNoConnection naming %q", err, tt.wantErr)
			}
		})
	}
}
