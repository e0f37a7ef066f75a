package main

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/raftlock/raftlock/backup"
	"github.com/raftlock/raftlock/cluster"
	"github.com/raftlock/raftlock/resp"
)

// backupUsage is what `raftlock backup` prints when its flags are wrong.
const backupUsage = `usage: raftlock backup --from HOST:PORT --out FILE [--user USER] [--pass PASS]
                       [--tls [--tls-ca F] [--tls-cert F --tls-key F]] [--timeout D]

Takes a consistent backup of the whole cluster state from the running node at --from (any
node: leader or follower) with RAFT BACKUP, checks it, and writes it to FILE (docs/backup.md).
The user needs @admin. The password may come from the environment, RAFTLOCK_PASS, instead.`

// runBackup is `raftlock backup`.
func runBackup(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("raftlock backup", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	from := fs.String("from", "", "client address of the node to back up")
	out := fs.String("out", "", "the backup file to write")
	user := fs.String("user", "", "ACL user to AUTH as (default: the default user)")
	pass := fs.String("pass", "", "password to AUTH with (default: $RAFTLOCK_PASS)")
	useTLS := fs.Bool("tls", false, "connect with TLS")
	caFile := fs.String("tls-ca", "", "PEM file of the CA that signed the node's certificate (default: the system's roots)")
	certFile := fs.String("tls-cert", "", "client certificate PEM file, for a node that asks for one")
	keyFile := fs.String("tls-key", "", "client key PEM file (with --tls-cert)")
	timeout := fs.Duration("timeout", 5*time.Minute, "bound on the whole backup")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%v\n%s", err, backupUsage)
	}
	if fs.NArg() > 0 || *from == "" || *out == "" {
		return errors.New(backupUsage)
	}
	if *pass == "" {
		*pass = os.Getenv("RAFTLOCK_PASS")
	}
	var tlsConf *tls.Config
	switch {
	case !*useTLS && (*caFile != "" || *certFile != "" || *keyFile != ""):
		return errors.New("backup: --tls-ca, --tls-cert and --tls-key need --tls")
	case *useTLS:
		var err error
		if tlsConf, err = clientTLSConfig(*caFile, *certFile, *keyFile); err != nil {
			return fmt.Errorf("backup: %w", err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	c, err := resp.DialTLS(ctx, *from, 0, tlsConf)
	if err != nil {
		return fmt.Errorf("backup: connect to %s: %w", *from, err)
	}
	defer c.Close()
	c.SetMaxReply(backup.MaxFile + 64)
	if *pass != "" || *user != "" {
		authArgs := []string{"AUTH", *pass}
		if *user != "" {
			authArgs = []string{"AUTH", *user, *pass}
		}
		if _, err := c.Do(ctx, authArgs...); err != nil {
			return fmt.Errorf("backup: authenticate to %s: %w", *from, err)
		}
	}
	v, err := c.Do(ctx, "RAFT", "BACKUP")
	// A node takes one backup at a time and at most one a second: wait a little and ask again.
	for try := 0; try < 10 && backupBusy(err); try++ {
		select {
		case <-ctx.Done():
			return fmt.Errorf("backup: RAFT BACKUP on %s: %w", *from, err)
		case <-time.After(500 * time.Millisecond):
		}
		v, err = c.Do(ctx, "RAFT", "BACKUP")
	}
	if err != nil {
		return fmt.Errorf("backup: RAFT BACKUP on %s: %w", *from, err)
	}
	if v.Kind != resp.KindBulk {
		return fmt.Errorf("backup: RAFT BACKUP on %s answered %q, not a backup", *from, v.Text())
	}
	data := v.Str
	h, tables, err := backup.DecodeGroups(data) // check it before it replaces anything
	if err != nil {
		return fmt.Errorf("backup: what %s sent: %w", *from, err)
	}
	if err := cluster.WriteFileAtomic(*out, data); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	sum := sha256.Sum256(data)
	if len(tables) == 1 {
		fmt.Fprintf(stdout, "backup written: %s (%d bytes, sha256 %s)\ncluster %s, taken on node %s at %s, applied index %d, term %d: %d keys, token counter %d\n",
			*out, len(data), hex.EncodeToString(sum[:]), h.ClusterID, h.SourceNode, h.Created.Format(time.RFC3339Nano),
			h.AppliedIndex, h.Term, tables[0].Len(), tables[0].LastToken())
		return nil
	}
	fmt.Fprintf(stdout, "backup written: %s (%d bytes, sha256 %s)\ncluster %s, taken on node %s at %s, %d raft groups:\n",
		*out, len(data), hex.EncodeToString(sum[:]), h.ClusterID, h.SourceNode, h.Created.Format(time.RFC3339Nano), len(tables))
	for g, p := range h.Groups {
		fmt.Fprintf(stdout, "raft group %d: applied index %d, term %d: %d keys, token counter %d\n",
			g, p.AppliedIndex, p.Term, tables[g].Len(), tables[g].LastToken())
	}
	return nil
}

// clientTLSConfig is the TLS config of a client of the node's port: the CA to verify it
// against (system roots when empty) and a client certificate to present (optional).
func clientTLSConfig(caFile, certFile, keyFile string) (*tls.Config, error) {
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-ca: %w", err)
		}
		conf.RootCAs = x509.NewCertPool()
		if !conf.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--tls-ca %s holds no PEM certificate", caFile)
		}
	}
	if (certFile == "") != (keyFile == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if certFile != "" {
		pair, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("--tls-cert/--tls-key: %w", err)
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	return conf, nil
}

// restoreUsage is what `raftlock restore` prints when its flags are wrong.
const restoreUsage = `usage: raftlock restore --in FILE --dir DIR --id ID [--raft-addr HOST:PORT | --peers ID=RAFTADDR,...]

Seeds a node of a NEW cluster from a backup file (docs/backup.md). It checks the whole file
first and refuses a corrupt or truncated one; DIR must not exist or be empty, and is written
only once everything succeeded. Run it with the same FILE and --peers for every voter of the
new cluster (each with its own --id and --dir), then start the nodes as usual; or restore one
node (--raft-addr) and let the others --join it. --id is the ID the node will be started with
(raftlock --id ID): a data dir belongs to one node ID, and a node refuses a dir written for another.
The new cluster chooses a new cluster ID;
fencing tokens continue above every token in the backup; each lock keeps the lease it had left
when the backup was taken, counted from when the restored node starts. A backup of a cluster of
several raft groups restores a node of as many groups (docs/groups.md).`

// runRestore is `raftlock restore`.
func runRestore(args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("raftlock restore", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	in := fs.String("in", "", "the backup file")
	dir := fs.String("dir", "", "the new data directory (must not exist, or be empty)")
	id := fs.String("id", "", "the node's ID, as it will be started with (raftlock --id ID)")
	raftAddr := fs.String("raft-addr", "127.0.0.1:7379", "the node's raft address, when it is the new cluster's only voter")
	peers := fs.String("peers", "", "the voters of the new cluster: ID=RAFTADDR,... (this node included)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return fmt.Errorf("%v\n%s", err, restoreUsage)
	}
	if fs.NArg() > 0 || *in == "" || *dir == "" {
		return errors.New(restoreUsage)
	}
	if *id == "" {
		// No default: the node's own default ID comes from its raft address, and a restore that
		// guessed it would write a dir that the node started under the ID its operator meant
		// refuses.
		return fmt.Errorf("restore: --id is required: the ID the node will be started with (raftlock --id ID; "+
			"started without --id, a node is %s)\n%s", defaultNodeID(*raftAddr), restoreUsage)
	}
	list := []cluster.Peer{{ID: *id, RaftAddr: *raftAddr}}
	if *peers != "" {
		var err error
		if list, err = parsePeers(*peers); err != nil {
			return err
		}
	}
	h, tables, err := backup.ReadFile(*in)
	if err != nil {
		return fmt.Errorf("restore refused, nothing written: %w", err)
	}
	logger := newLogger(stderr, *level, "text")
	for g, p := range h.Parts() {
		logger.Info("backup checked", "file", *in, "cluster_id", h.ClusterID, "source_node", h.SourceNode, "group", g,
			"created", h.Created.Format(time.RFC3339Nano), "applied", p.AppliedIndex, "term", p.Term, "keys", p.Keys, "last_token", p.LastToken)
	}
	return cluster.RestoreBackup(*dir, *id, list, tables, logger)
}

// backupBusy reports whether err is a node's "another backup is running, or one just ran"
// (server/limits.go rateGate), which asking again shortly cures.
func backupBusy(err error) bool {
	return err != nil && (strings.Contains(err.Error(), "RAFT BACKUP too soon") || strings.Contains(err.Error(), "RAFT BACKUP is busy"))
}
