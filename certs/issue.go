package certs

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A node's certificate names the node: one URI SAN raftlock://node/<id>, where <id> is its
// --id (path-escaped). That name, not the chain alone, is what makes a certificate a raft peer
// (DESIGN.md §10): the raft listener admits a certificate only if the node it names is a member
// of the configuration, and a dialer checks that the certificate names the member it meant to
// reach. A client certificate of the same CA names no node and is good for clientAuth only.
const (
	nodeScheme = "raftlock"
	nodeHost   = "node"
)

// Validity of what Issue and NewAuthority make, unless told otherwise.
const (
	DefaultCAValidity   = 10 * 365 * 24 * time.Hour
	DefaultLeafValidity = 397 * 24 * time.Hour // the longest browsers accept; renew yearly
)

// NodeURI is the URI SAN that names node id.
func NodeURI(id string) *url.URL {
	return &url.URL{Scheme: nodeScheme, Host: nodeHost, Path: "/" + id}
}

// NodeID returns the node ID a certificate names (NodeURI), and false if it names none or more
// than one.
func NodeID(c *x509.Certificate) (string, bool) {
	id, n := "", 0
	for _, u := range c.URIs {
		if u.Scheme != nodeScheme || u.Host != nodeHost || !strings.HasPrefix(u.Path, "/") || len(u.Path) < 2 {
			continue
		}
		id, n = u.Path[1:], n+1
	}
	return id, n == 1
}

// Authority is a CA's certificate and key, for issuing node and client certificates. The key
// is ECDSA for a CA NewAuthority made; LoadAuthority also takes an existing CA's RSA or Ed25519
// key.
type Authority struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// NewAuthority makes a self-signed CA named name, valid for validity (0: DefaultCAValidity).
func NewAuthority(name string, validity time.Duration) (*Authority, error) {
	if validity == 0 {
		validity = DefaultCAValidity
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: name},
		NotBefore:             now.Add(-time.Hour), // tolerate a clock a little behind
		NotAfter:              now.Add(validity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		MaxPathLenZero:        true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, fmt.Errorf("certs: create CA: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Authority{Cert: cert, Key: key}, nil
}

// LoadAuthority reads a CA's certificate and EC key from PEM files.
func LoadAuthority(certFile, keyFile string) (*Authority, error) {
	cb, err := os.ReadFile(certFile)
	if err != nil {
		return nil, fmt.Errorf("certs: read CA certificate: %w", err)
	}
	kb, err := os.ReadFile(keyFile)
	if err != nil {
		return nil, fmt.Errorf("certs: read CA key: %w", err)
	}
	cblock, _ := pem.Decode(cb)
	kblock, _ := pem.Decode(kb)
	if cblock == nil || kblock == nil {
		return nil, fmt.Errorf("certs: %s or %s holds no PEM block", certFile, keyFile)
	}
	cert, err := x509.ParseCertificate(cblock.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certs: CA certificate: %w", err)
	}
	if !cert.IsCA {
		return nil, fmt.Errorf("certs: %s is not a CA certificate", certFile)
	}
	key, err := parseKey(kblock.Bytes)
	if err != nil {
		return nil, fmt.Errorf("certs: CA key %s: %w", keyFile, err)
	}
	if pub, ok := key.Public().(interface{ Equal(crypto.PublicKey) bool }); !ok || !pub.Equal(cert.PublicKey) {
		return nil, errors.New("certs: the CA key does not match the CA certificate")
	}
	return &Authority{Cert: cert, Key: key}, nil
}

// parseKey reads a private key in SEC 1 (EC), PKCS #1 (RSA) or PKCS #8 form.
func parseKey(der []byte) (crypto.Signer, error) {
	if k, err := x509.ParseECPrivateKey(der); err == nil {
		return k, nil
	}
	if k, err := x509.ParsePKCS1PrivateKey(der); err == nil {
		return k, nil
	}
	k, err := x509.ParsePKCS8PrivateKey(der)
	if err != nil {
		return nil, errors.New("not an EC, RSA or PKCS #8 private key")
	}
	signer, ok := k.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("a %T cannot sign", k)
	}
	return signer, nil
}

// Issued is a certificate and its private key.
type Issued struct {
	Cert *x509.Certificate
	Key  crypto.Signer
}

// IssueNode makes node id's certificate: good for serverAuth and clientAuth (a node serves and
// dials both ports), naming the node (NodeURI) and each host (a DNS name or an IP address) it
// is reached at, valid for validity (0: DefaultLeafValidity).
func (a *Authority) IssueNode(id string, hosts []string, validity time.Duration) (*Issued, error) {
	if id == "" || strings.ContainsAny(id, " \t\r\n/") {
		return nil, fmt.Errorf("certs: node id %q: want a non-empty id without spaces or slashes", id)
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: id},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{NodeURI(id)},
	}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		switch ip := net.ParseIP(h); {
		case h == "":
		case ip != nil:
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		default:
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	return a.issue(tmpl, validity)
}

// IssueClient makes a client certificate for user: Subject CN=user (what
// --tls-auth-clients-user CN maps to an ACL user), clientAuth only and no node name, so it can
// never be a raft peer nor serve as a node.
func (a *Authority) IssueClient(user string, validity time.Duration) (*Issued, error) {
	if user == "" {
		return nil, errors.New("certs: a client certificate needs a user name")
	}
	return a.issue(&x509.Certificate{
		Subject:     pkix.Name{CommonName: user},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}, validity)
}

func (a *Authority) issue(tmpl *x509.Certificate, validity time.Duration) (*Issued, error) {
	if validity == 0 {
		validity = DefaultLeafValidity
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl.SerialNumber = serial()
	tmpl.NotBefore = now.Add(-time.Hour)
	tmpl.NotAfter = now.Add(validity)
	if tmpl.NotAfter.After(a.Cert.NotAfter) {
		tmpl.NotAfter = a.Cert.NotAfter // a certificate outliving its CA would fail earlier anyway
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.BasicConstraintsValid = true
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.Cert, &key.PublicKey, a.Key)
	if err != nil {
		return nil, fmt.Errorf("certs: issue %s: %w", tmpl.Subject.CommonName, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Issued{Cert: cert, Key: key}, nil
}

// WriteFiles writes cert as <dir>/<name>.crt (0644) and key as <dir>/<name>.key (0600), each
// through a temporary file renamed over the old one: a node reloading meanwhile (SIGHUP) reads
// the old file or the new, never half of one. It returns the two paths.
func WriteFiles(dir, name string, cert *x509.Certificate, key crypto.Signer) (certFile, keyFile string, err error) {
	kind, kder := "PRIVATE KEY", []byte(nil)
	if ec, ok := key.(*ecdsa.PrivateKey); ok {
		kind = "EC PRIVATE KEY"
		kder, err = x509.MarshalECPrivateKey(ec)
	} else {
		kder, err = x509.MarshalPKCS8PrivateKey(key)
	}
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, name+".crt"), filepath.Join(dir, name+".key")
	if err := writePEM(keyFile, kind, kder, 0o600); err != nil {
		return "", "", err
	}
	if err := writePEM(certFile, "CERTIFICATE", cert.Raw, 0o644); err != nil {
		return "", "", err
	}
	return certFile, keyFile, nil
}

func writePEM(path, kind string, der []byte, mode os.FileMode) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	// OpenFile's mode applies only to a new file: a leftover temporary file keeps its own.
	if err := f.Chmod(mode); err != nil {
		f.Close()
		return err
	}
	if err := pem.Encode(f, &pem.Block{Type: kind, Bytes: der}); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// serial returns a random 128-bit serial number (RFC 5280 allows up to 20 octets).
func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127)) // never fails (crypto/rand)
	return n.Add(n, big.NewInt(1))
}
