package certs_test

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/raftlock/raftlock/certs"
)

// issueFiles makes a CA in dir and a node certificate for n1 and a client one for alice,
// all written as files, and returns the CA's file.
func issueFiles(t *testing.T, dir string) (caFile string) {
	t.Helper()
	ca, err := certs.NewAuthority("test CA", 0)
	if err != nil {
		t.Fatal(err)
	}
	if caFile, _, err = certs.WriteFiles(dir, "ca", ca.Cert, ca.Key); err != nil {
		t.Fatal(err)
	}
	n1, err := ca.IssueNode("n1", []string{"localhost", "127.0.0.1"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := certs.WriteFiles(dir, "n1", n1.Cert, n1.Key); err != nil {
		t.Fatal(err)
	}
	alice, err := ca.IssueClient("alice", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := certs.WriteFiles(dir, "alice", alice.Cert, alice.Key); err != nil {
		t.Fatal(err)
	}
	return caFile
}

// TestIssue: a node certificate names its node and its hosts and serves both ends; a client
// certificate names its user, no node, and is good for clientAuth only; keys are 0600.
func TestIssue(t *testing.T) {
	dir := t.TempDir()
	caFile := issueFiles(t, dir)
	ca, err := certs.LoadAuthority(caFile, filepath.Join(dir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	load := func(name string) *x509.Certificate {
		t.Helper()
		pair, err := tls.LoadX509KeyPair(filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key"))
		if err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(filepath.Join(dir, name+".key"))
		if err != nil || fi.Mode().Perm() != 0o600 {
			t.Errorf("%s.key: mode %v, %v; want 0600", name, fi.Mode().Perm(), err)
		}
		return pair.Leaf
	}
	node := load("n1")
	if id, ok := certs.NodeID(node); !ok || id != "n1" {
		t.Errorf("node certificate names node %q, %v; want n1", id, ok)
	}
	if len(node.IPAddresses) != 1 || !node.IPAddresses[0].Equal(net.IPv4(127, 0, 0, 1)) || len(node.DNSNames) != 1 || node.DNSNames[0] != "localhost" {
		t.Errorf("node certificate SANs %v %v; want localhost and 127.0.0.1", node.DNSNames, node.IPAddresses)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		if _, err := node.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
			t.Errorf("node certificate for usage %v: %v", usage, err)
		}
	}
	client := load("alice")
	if id, ok := certs.NodeID(client); ok || client.Subject.CommonName != "alice" {
		t.Errorf("client certificate: node %q %v, CN %q; want no node, CN alice", id, ok, client.Subject.CommonName)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Errorf("client certificate for clientAuth: %v", err)
	}
	if _, err := client.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err == nil {
		t.Error("client certificate verified for serverAuth; want refused")
	}
	if _, err := ca.IssueNode("a/b", nil, 0); err == nil {
		t.Error("IssueNode(a/b): no error; want a slash refused")
	}
}

// TestPeerConfig: a node dialing another node accepts only a node certificate of its CA that
// names a node its check accepts: not a client certificate of the same CA, not the system's
// roots when it has no CA.
func TestPeerConfig(t *testing.T) {
	dir := t.TempDir()
	caFile := issueFiles(t, dir)
	files := func(name, ca string) certs.Files {
		return certs.Files{Cert: filepath.Join(dir, name+".crt"), Key: filepath.Join(dir, name+".key"), CA: ca}
	}
	serve := func(name string) string {
		src, err := certs.Load(files(name, caFile))
		if err != nil {
			t.Fatal(err)
		}
		ln, err := tls.Listen("tcp", "127.0.0.1:0", src.ServerConfig(tls.NoClientCert))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ln.Close() })
		go func() {
			for range 8 {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				c.(*tls.Conn).Handshake()
				c.Close()
			}
		}()
		return ln.Addr().String()
	}
	nodeAddr, clientAddr := serve("n1"), serve("alice")
	dialer, err := certs.Load(files("n1", caFile))
	if err != nil {
		t.Fatal(err)
	}
	noCA, err := certs.Load(files("n1", ""))
	if err != nil {
		t.Fatal(err)
	}
	errNotN2 := errors.New("not n2")
	for _, tc := range []struct {
		name  string
		src   *certs.Source
		addr  string
		check func(string) error
		ok    bool
	}{
		{"a node of the CA", dialer, nodeAddr, nil, true},
		{"a client certificate of the CA", dialer, clientAddr, nil, false},
		{"a node the check refuses", dialer, nodeAddr, func(id string) error {
			if id != "n2" {
				return errNotN2
			}
			return nil
		}, false},
		{"no CA file", noCA, nodeAddr, nil, false},
	} {
		c, err := tls.Dial("tcp", tc.addr, tc.src.PeerConfig(tc.check))
		if err == nil {
			c.Close()
		}
		if (err == nil) != tc.ok {
			t.Errorf("%s: dial err %v; want accepted %v", tc.name, err, tc.ok)
		}
	}
}

// TestLoadAuthorityOfAnotherKind: an existing CA made elsewhere (an RSA key in PKCS #8, as
// openssl genpkey writes it) issues node certificates too, which chain to it.
func TestLoadAuthorityOfAnotherKind(t *testing.T) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "old CA"}, IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, b := range map[string]*pem.Block{"ca.crt": {Type: "CERTIFICATE", Bytes: der}, "ca.key": {Type: "PRIVATE KEY", Bytes: kder}} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ca, err := certs.LoadAuthority(filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key"))
	if err != nil {
		t.Fatal(err)
	}
	n1, err := ca.IssueNode("n1", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AddCert(ca.Cert)
	if _, err := n1.Cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
		t.Errorf("a node certificate of the RSA CA: %v", err)
	}
	if !n1.Cert.NotAfter.Equal(ca.Cert.NotAfter) {
		t.Errorf("node certificate ends %v, after its CA (%v); want it cut to the CA's end", n1.Cert.NotAfter, ca.Cert.NotAfter)
	}
	if _, err := certs.LoadAuthority(filepath.Join(dir, "ca.crt"), filepath.Join(t.TempDir(), "missing.key")); err == nil {
		t.Error("LoadAuthority without its key file: no error")
	}
}
