package certs_test

import (
	"crypto/tls"
	"os"
	"testing"

	"github.com/raftlock/raftlock/certs"
	"github.com/raftlock/raftlock/tests/testutil"
)

// TestReload: a new pair in the same files replaces the old; a broken file keeps it.
func TestReload(t *testing.T) {
	ca := testutil.NewCA(t, "cluster")
	first := ca.Issue(t, "node")
	src, err := certs.Load(certs.Files{Cert: first.CertFile, Key: first.KeyFile, CA: ca.File})
	if err != nil {
		t.Fatal(err)
	}
	serial := func() string { return src.Leaf().SerialNumber.String() }
	if got, want := serial(), first.Cert.SerialNumber.String(); got != want {
		t.Fatalf("serial %s; want %s", got, want)
	}
	second := ca.Issue(t, "node")
	if err := src.Reload(); err != nil {
		t.Fatal(err)
	}
	if got, want := serial(), second.Cert.SerialNumber.String(); got != want {
		t.Fatalf("serial after reload %s; want %s", got, want)
	}
	if err := os.WriteFile(second.KeyFile, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := src.Reload(); err == nil {
		t.Fatal("reload of a broken key: no error")
	}
	if got, want := serial(), second.Cert.SerialNumber.String(); got != want {
		t.Fatalf("serial after a failed reload %s; want %s (kept)", got, want)
	}
	cfg, err := src.ServerConfig(tls.RequireAndVerifyClientCert).GetConfigForClient(nil)
	if err != nil || cfg.ClientAuth != tls.RequireAndVerifyClientCert || cfg.ClientCAs == nil || cfg.MinVersion != tls.VersionTLS12 {
		t.Fatalf("server config: %+v, %v; want client certificates required against the CA, TLS 1.2+", cfg, err)
	}
}

func TestLoadNeedsPair(t *testing.T) {
	if _, err := certs.Load(certs.Files{Cert: "x.crt"}); err == nil {
		t.Fatal("Load without a key file: no error")
	}
}
