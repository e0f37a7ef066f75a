package server

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"strings"
	"testing"
	"time"
)

// testCA signs certificates for one test.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestCA(t *testing.T) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &testCA{cert: cert, key: key, pool: pool}
}

// issue makes a certificate with Subject CN cn for a server (on 127.0.0.1) or a client.
func (ca *testCA) issue(t *testing.T, cn string, server bool) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	if server {
		tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
		tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1)}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// dialTLS connects to addr presenting cert (none if nil).
func dialTLS(t *testing.T, addr string, ca *testCA, cert *tls.Certificate) *rawConn {
	t.Helper()
	cfg := &tls.Config{RootCAs: ca.pool, ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	nc, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	return &rawConn{t: t, nc: nc, br: bufio.NewReader(nc)}
}

// With TLSAuthClientsUser "CN" (--tls-auth-clients-user CN), a client whose verified certificate
// names an enabled user is that user from its first command, without AUTH; a certificate that
// names no user, or a disabled one, leaves the connection as any other (Redis 7.2). On a node
// without a password and on one with --requirepass.
func TestClientCertificateMapsToUser(t *testing.T) {
	ca := newTestCA(t)
	serverCert := ca.issue(t, "node", true)
	alice, bob, nobody := ca.issue(t, "alice", false), ca.issue(t, "bob", false), ca.issue(t, "nobody", false)
	other := newTestCA(t).issue(t, "alice", false) // alice, from a CA the node does not trust
	for _, cfg := range nodeConfigs {
		for _, mode := range []string{"CN", "off"} {
			t.Run(cfg.name+"/"+mode, func(t *testing.T) {
				addr, _ := serveNode(t, newFakeNode(), func(c *Config) {
					secure(cfg.secured)(c)
					c.TLS = &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: ca.pool,
						ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12}
					c.TLSAuthClientsUser = mode
				})
				admin := dialTLS(t, addr, ca, nil)
				if cfg.secured {
					admin.do("AUTH", "adminpw")
				}
				for _, cmd := range [][]string{
					{"ACL", "SETUSER", "alice", "on", ">unused-password", "~alice:*", "+@all", "-@admin"},
					{"ACL", "SETUSER", "bob", "off", "nopass", "~*", "+@all"},
				} {
					if got := admin.do(cmd...); got != "+OK\r\n" {
						t.Fatalf("%q: %q", cmd, got)
					}
				}
				unmapped := "$7\r\ndefault\r\n" // ACL WHOAMI of a connection nobody logged in
				if cfg.secured {
					unmapped = "-NOAUTH Authentication required.\r\n"
				}
				mapped := "$5\r\nalice\r\n"
				if mode == "off" {
					mapped = unmapped
				}
				for _, tc := range []struct {
					name string
					cert *tls.Certificate
					want string
				}{{"alice", &alice, mapped}, {"disabled bob", &bob, unmapped}, {"no such user", &nobody, unmapped}, {"no certificate", nil, unmapped}} {
					if got := dialTLS(t, addr, ca, tc.cert).do("ACL", "WHOAMI"); got != tc.want {
						t.Errorf("%s: ACL WHOAMI: got %q, want %q", tc.name, got, tc.want)
					}
				}
				if mode != "CN" {
					return
				}
				// alice's permissions, not the default user's, apply; RESET makes it the default
				// user's again, as in Redis.
				c := dialTLS(t, addr, ca, &alice)
				for _, step := range [][]string{
					{"SET", "alice:1", "v", "+OK\r\n"},
					{"SET", "other", "v", "-NOPERM this user has no permissions to access one of the keys used as arguments\r\n"},
					{"RESET", "+RESET\r\n"},
					{"ACL", "WHOAMI", unmapped},
				} {
					if got := c.do(step[:len(step)-1]...); got != step[len(step)-1] {
						t.Errorf("alice: %q: got %q, want %q", step[:len(step)-1], got, step[len(step)-1])
					}
				}
				// A certificate the node does not trust is refused at the handshake.
				cfgOther := &tls.Config{RootCAs: ca.pool, ServerName: "127.0.0.1", Certificates: []tls.Certificate{other}}
				if nc, err := tls.Dial("tcp", addr, cfgOther); err == nil {
					nc.SetDeadline(time.Now().Add(5 * time.Second))
					nc.Write([]byte("ACL WHOAMI\r\n"))
					line, err := bufio.NewReader(nc).ReadString('\n')
					if err == nil && strings.Contains(line, "alice") {
						t.Errorf("a certificate of another CA logged in as alice: %q", line)
					}
					nc.Close()
				}
			})
		}
	}
}

func TestTLSAuthClientsUserValidated(t *testing.T) {
	for _, v := range []string{"", "off", "CN", "cn"} {
		c := DefaultConfig()
		c.TLSAuthClientsUser = v
		if err := c.Validate(); err != nil {
			t.Errorf("%q: %v", v, err)
		}
	}
	c := DefaultConfig()
	c.TLSAuthClientsUser = "SAN"
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "TLSAuthClientsUser") {
		t.Errorf("SAN: %v", err)
	}
}
