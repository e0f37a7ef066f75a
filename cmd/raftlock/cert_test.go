package main

import (
	"crypto/tls"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/raftlock/raftlock/certs"
)

// TestCertCommand: raftlock cert ca, node and client each write a certificate and a 0600 key;
// the node's names its node and its hosts, the client's its user and no node.
func TestCertCommand(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"ca", "--out", dir},
		{"node", "--id", "n1", "--host", "n1.example,10.0.0.1", "--out", dir},
		{"client", "--user", "alice", "--out", dir, "--days", "30"},
	} {
		if err := runCert(args, io.Discard); err != nil {
			t.Fatalf("raftlock cert %q: %v", args, err)
		}
	}
	load := func(name string) *tls.Certificate {
		t.Helper()
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
		if err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Stat(filepath.Join(dir, name+".key")); err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s.key: %v, %v; want mode 0600", name, fi.Mode().Perm(), err)
		}
		return &pair
	}
	load("ca")
	node := load("n1").Leaf
	if id, ok := certs.NodeID(node); !ok || id != "n1" || len(node.DNSNames) != 1 || node.DNSNames[0] != "n1.example" ||
		len(node.IPAddresses) != 1 || node.IPAddresses[0].String() != "10.0.0.1" {
		t.Errorf("node certificate: node %q %v, DNS %v, IPs %v; want n1, n1.example, 10.0.0.1", id, ok, node.DNSNames, node.IPAddresses)
	}
	client := load("alice").Leaf
	if _, ok := certs.NodeID(client); ok || client.Subject.CommonName != "alice" {
		t.Errorf("client certificate: names a node %v, CN %q; want no node, CN alice", ok, client.Subject.CommonName)
	}
	if days := client.NotAfter.Sub(client.NotBefore).Hours() / 24; days > 32 {
		t.Errorf("client certificate valid %.0f days; want about 30 (--days 30)", days)
	}
	for _, bad := range [][]string{nil, {"server"}, {"node", "--out", dir}, {"client", "--out", dir}, {"node", "--id", "n2", "--out", t.TempDir()}} {
		if err := runCert(bad, io.Discard); err == nil {
			t.Errorf("raftlock cert %q: no error", bad)
		}
	}
}
