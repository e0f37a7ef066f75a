package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/raftlock/raftlock/certs"
)

const certUsage = `usage:
  raftlock cert ca     [--out DIR] [--name NAME] [--days N]
  raftlock cert node   --id ID [--host NAME,IP,...] [--ca DIR] [--out DIR] [--days N]
  raftlock cert client --user USER [--ca DIR] [--out DIR] [--days N]

ca writes DIR/ca.crt and DIR/ca.key (keep ca.key off the nodes). node writes DIR/ID.crt and
DIR/ID.key: serverAuth and clientAuth, the node's name raftlock://node/ID (what makes it a raft
peer) and each --host as a DNS or IP SAN. client writes DIR/USER.crt and DIR/USER.key:
clientAuth only, Subject CN=USER. --ca is the directory of ca.crt and ca.key (default: --out).
Keys are written 0600.`

// runCert makes a CA, a node certificate or a client certificate (docs/security.md).
func runCert(args []string, stdout io.Writer) error {
	if len(args) == 0 || (args[0] != "ca" && args[0] != "node" && args[0] != "client") {
		return errors.New(certUsage)
	}
	kind := args[0]
	fs := flag.NewFlagSet("raftlock cert "+kind, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	out := fs.String("out", ".", "directory to write the files to")
	caDir := fs.String("ca", "", "directory of ca.crt and ca.key (default: --out)")
	name := fs.String("name", "raftlock CA", "the CA's name (ca)")
	id := fs.String("id", "", "the node's --id (node)")
	hosts := fs.String("host", "", "comma-separated DNS names and IP addresses the node is reached at (node)")
	user := fs.String("user", "", "the ACL user the certificate names, as its CN (client)")
	days := fs.Int("days", 0, "validity in days (default: 3650 for a CA, 397 otherwise)")
	if err := fs.Parse(args[1:]); err != nil {
		return fmt.Errorf("%w\n%s", err, certUsage)
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q\n%s", fs.Arg(0), certUsage)
	}
	if *days < 0 {
		return errors.New("--days must not be negative")
	}
	validity := time.Duration(*days) * 24 * time.Hour
	if kind == "ca" {
		ca, err := certs.NewAuthority(*name, validity)
		if err != nil {
			return err
		}
		return write(stdout, *out, "ca", &certs.Issued{Cert: ca.Cert, Key: ca.Key})
	}
	if *caDir == "" {
		*caDir = *out
	}
	ca, err := certs.LoadAuthority(filepath.Join(*caDir, "ca.crt"), filepath.Join(*caDir, "ca.key"))
	if err != nil {
		return err
	}
	var issued *certs.Issued
	var file string
	switch kind {
	case "node":
		if *id == "" {
			return errors.New("raftlock cert node: --id is required")
		}
		var hs []string
		if *hosts != "" {
			hs = strings.Split(*hosts, ",")
		}
		issued, err = ca.IssueNode(*id, hs, validity)
		file = *id
	case "client":
		if *user == "" {
			return errors.New("raftlock cert client: --user is required")
		}
		issued, err = ca.IssueClient(*user, validity)
		file = *user
	}
	if err != nil {
		return err
	}
	return write(stdout, *out, file, issued)
}

// write writes is as dir/name.crt and dir/name.key and says so on w.
func write(w io.Writer, dir, name string, is *certs.Issued) error {
	certFile, keyFile, err := certs.WriteFiles(dir, name, is.Cert, is.Key)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%s (key %s), valid until %s\n", certFile, keyFile, is.Cert.NotAfter.UTC().Format(time.DateOnly))
	return nil
}
