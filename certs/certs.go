// Package certs holds one set of a node's TLS material (a certificate, its key and the CA that
// signs its peers' certificates), reloadable while the node runs, and the tls.Configs built on
// it: the listening side of a port, and the dialing side of one node's connection to another.
// It also makes certificates (issue.go): a CA, a node's (which names the node) and a client's.
//
// Reload swaps the material atomically; a handshake reads the material current when it starts
// (GetConfigForClient, GetClientCertificate, VerifyConnection), so a new certificate or CA
// applies to the next connection without a restart, and connections already open keep theirs.
package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
)

// Files names the PEM files of one set of material. Cert and Key are required; CA is required
// to verify peers' certificates, clients' and other nodes' alike (without it, node-to-node
// connections are refused: PeerConfig).
type Files struct {
	Cert string
	Key  string
	CA   string
}

// Source is reloadable TLS material. Its methods are safe for concurrent use.
type Source struct {
	files Files
	cur   atomic.Pointer[material]
}

// material is one loaded generation of the files, with the listening-side configs built on it
// (one per client-auth mode, built once so their session ticket keys live as long as it does).
type material struct {
	cert   *tls.Certificate
	pool   *x509.CertPool // nil: no CA file
	server map[tls.ClientAuthType]*tls.Config
}

// Load reads files and returns a Source of them.
func Load(files Files) (*Source, error) {
	if files.Cert == "" || files.Key == "" {
		return nil, errors.New("certs: a certificate file and a key file are both required")
	}
	s := &Source{files: files}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Reload reads the files again. On any error it keeps the material it had and returns the
// error: a half-written or mismatched new pair never replaces a working one.
func (s *Source) Reload() error {
	pair, err := tls.LoadX509KeyPair(s.files.Cert, s.files.Key)
	if err != nil {
		return fmt.Errorf("certs: load %s and %s: %w", s.files.Cert, s.files.Key, err)
	}
	m := &material{cert: &pair}
	if s.files.CA != "" {
		pem, err := os.ReadFile(s.files.CA)
		if err != nil {
			return fmt.Errorf("certs: read CA: %w", err)
		}
		m.pool = x509.NewCertPool()
		if !m.pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("certs: %s holds no PEM certificate", s.files.CA)
		}
	}
	m.server = make(map[tls.ClientAuthType]*tls.Config)
	for _, auth := range []tls.ClientAuthType{tls.NoClientCert, tls.VerifyClientCertIfGiven, tls.RequireAndVerifyClientCert} {
		m.server[auth] = &tls.Config{
			MinVersion:   tls.VersionTLS12,
			Certificates: []tls.Certificate{pair},
			ClientAuth:   auth,
			ClientCAs:    m.pool,
		}
	}
	s.cur.Store(m)
	return nil
}

// NodeID returns the node ID the current certificate names (NodeID), if any.
func (s *Source) NodeID() (string, bool) { return NodeID(s.Leaf()) }

// HasCA reports whether the Source verifies peers against a CA file of its own.
func (s *Source) HasCA() bool { return s.files.CA != "" }

// Leaf returns the current certificate, parsed.
func (s *Source) Leaf() *x509.Certificate { return s.cur.Load().cert.Leaf }

// ServerConfig returns the listening side's config: the current certificate, TLS 1.2 or newer,
// and client certificates as auth says (NoClientCert, VerifyClientCertIfGiven or
// RequireAndVerifyClientCert), verified against the current CA. The two verifying modes need
// a CA file.
func (s *Source) ServerConfig(auth tls.ClientAuthType) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.cur.Load().server[auth], nil
		},
	}
}

// ErrNoCA means a node-to-node connection was refused because this node has no CA file to
// verify the other node against: node links never fall back to the system's roots, which
// vouch for anyone's web server, not for a member.
var ErrNoCA = errors.New("certs: no CA file to verify the other node against")

// PeerConfig returns the dialing side's config for one node's connection to another node, on
// either port: it presents the current certificate when asked for one, and accepts the other
// node's certificate only if it chains to the current CA (never the system's roots: ErrNoCA),
// is good for serverAuth, and names a node (NodeID) that check accepts (nil: any node). Nodes
// dial each other by the addresses members announce, so the node's name, not a host name, is
// what is verified: a client certificate of the same CA names no node and is refused.
func (s *Source) PeerConfig(check func(nodeID string) error) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// Verification is not skipped: VerifyConnection below does it, against the CA current
		// at the handshake, which a static RootCAs could not follow across a reload.
		InsecureSkipVerify: true,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return s.cur.Load().cert, nil
		},
		VerifyConnection: func(cs tls.ConnectionState) error {
			id, err := s.VerifyNode(cs.PeerCertificates, x509.ExtKeyUsageServerAuth)
			if err != nil {
				return err
			}
			if check != nil {
				return check(id)
			}
			return nil
		},
	}
}

// VerifyNode checks that chain (leaf first) chains to the current CA for usage and that its
// leaf names a node, and returns that node's ID.
func (s *Source) VerifyNode(chain []*x509.Certificate, usage x509.ExtKeyUsage) (string, error) {
	if len(chain) == 0 {
		return "", errors.New("certs: the peer sent no certificate")
	}
	pool := s.cur.Load().pool
	if pool == nil {
		return "", ErrNoCA
	}
	opts := x509.VerifyOptions{
		Roots:         pool,
		Intermediates: x509.NewCertPool(),
		KeyUsages:     []x509.ExtKeyUsage{usage},
	}
	for _, c := range chain[1:] {
		opts.Intermediates.AddCert(c)
	}
	if _, err := chain[0].Verify(opts); err != nil {
		return "", fmt.Errorf("certs: peer certificate: %w", err)
	}
	id, ok := NodeID(chain[0])
	if !ok {
		return "", fmt.Errorf("certs: peer certificate %q names no node (a URI SAN %s): not a node's certificate",
			chain[0].Subject.CommonName, NodeURI("<id>"))
	}
	return id, nil
}
