package testutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"
)

// CA is a certificate authority made up for one test: it issues node and client certificates
// into PEM files, so tests carry no key material in the repository.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	// File is the CA certificate's PEM file.
	File string
	dir  string
}

var serials atomic.Int64

// NewCA makes a CA named name, its files in a fresh tb.TempDir().
func NewCA(tb testing.TB, name string) *CA {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(serials.Add(1)),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		tb.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		tb.Fatal(err)
	}
	ca := &CA{cert: cert, key: key, dir: tb.TempDir()}
	ca.File = filepath.Join(ca.dir, name+"-ca.crt")
	writePEM(tb, ca.File, "CERTIFICATE", der)
	return ca
}

// Pool returns a pool holding the CA's certificate.
func (ca *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(ca.cert)
	return p
}

// Issued is one certificate the CA issued: its files, and the certificate for comparisons.
type Issued struct {
	CertFile, KeyFile string
	Cert              *x509.Certificate
	Pair              tls.Certificate
}

// Issue makes a certificate for name, good for both ends of a connection (server and client
// authentication) on 127.0.0.1 and localhost, and writes it as name.crt and name.key in the
// CA's directory (replacing any earlier pair of that name).
func (ca *CA) Issue(tb testing.TB, name string) Issued {
	tb.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serials.Add(1)),
		Subject:      pkix.Name{CommonName: name},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1)},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		tb.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		tb.Fatal(err)
	}
	is := Issued{CertFile: filepath.Join(ca.dir, name+".crt"), KeyFile: filepath.Join(ca.dir, name+".key")}
	// Written to temporary names and renamed, so a node reloading meanwhile sees the old pair
	// or the new, never half of each.
	writePEM(tb, is.CertFile+".tmp", "CERTIFICATE", der)
	writePEM(tb, is.KeyFile+".tmp", "EC PRIVATE KEY", kder)
	for _, f := range []string{is.KeyFile, is.CertFile} {
		if err := os.Rename(f+".tmp", f); err != nil {
			tb.Fatal(err)
		}
	}
	if is.Cert, err = x509.ParseCertificate(der); err != nil {
		tb.Fatal(err)
	}
	if is.Pair, err = tls.LoadX509KeyPair(is.CertFile, is.KeyFile); err != nil {
		tb.Fatal(err)
	}
	return is
}

// ClientTLS returns a client's config trusting the CA, presenting cert if it is not nil:
// always, when asked for one, even if the server names other CAs as acceptable (crypto/tls's
// own choice would send none then), so a test can show a stranger's certificate refused.
func (ca *CA) ClientTLS(cert *Issued) *tls.Config {
	c := &tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1", MinVersion: tls.VersionTLS12}
	if cert != nil {
		c.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return &cert.Pair, nil
		}
	}
	return c
}

func writePEM(tb testing.TB, path, kind string, der []byte) {
	tb.Helper()
	b := pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
	if err := os.WriteFile(path, b, 0o600); err != nil {
		tb.Fatal(err)
	}
}
