// Command floor is the least a Go lock server can do per request: the
// yardstick that tells, on a given machine, which of raftlock's performance
// targets any Go server in the goroutine-per-connection model could meet,
// and how much of raftlock's cost is its own.
//
// It serves, over RESP on one address, exactly what the benchmark drivers
// send (PING, LOCK key ttl, UNLOCK key token, SET key value NX PX ttl,
// SCRIPT LOAD and EVALSHA of the compare-and-delete release, run natively)
// from one map under a mutex, with one goroutine per connection reading
// through a buffer and flushing its replies when no further command is
// buffered, as Go servers do (redcon, raftlock). It has no raft, no Lua, no
// ACLs, no lease timers (a lease is checked when its key is next touched),
// no metrics and no logging.
//
// With -dir it is durable the cheapest way: each write request appends a
// small record to one log file and its reply reaches the socket only once an
// fdatasync has covered it; one goroutine syncs, and everything that queued
// while it synced goes in the next write and the next sync (group commit, no
// timer). A pipeline's records queue together and its replies wait for one
// sync. That is one fsync per batch and two goroutine hand-offs per write
// request (or per pipeline), the least a server built of goroutines pays to
// share an fsync.
//
// With -peers it is the raft floor (raft.go): the log is replicated through
// hashicorp/raft, as raftlock's is, on one node or several, and a write's
// reply waits for its commit.
//
// It is a benchmark tool, not a lock server: the log is never read back,
// and nothing survives a change of leader.
package main

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:6399", "client address")
	dir := flag.String("dir", "", "directory of the log: with it, every write waits for an fdatasync (group commit); without, nothing is written")
	var rc raftConfig
	flag.StringVar(&rc.peers, "peers", "", "with -dir: replicate the log through hashicorp/raft among these nodes, id=host:port of each raft address, this one's included")
	flag.StringVar(&rc.id, "id", "n1", "with -peers: this node's id")
	flag.StringVar(&rc.addr, "raft-addr", "", "with -peers: this node's raft address")
	flag.StringVar(&rc.pace, "pace", "write", "with -peers: send the next batch once the leader has written the last (write) or once it has committed (commit)")
	flag.Parse()
	if err := run(*addr, *dir, rc); err != nil {
		fmt.Fprintln(os.Stderr, "floor:", err)
		os.Exit(1)
	}
}

// raftConfig is the raft floor's part of the command line.
type raftConfig struct{ peers, id, addr, pace string }

func run(addr, dir string, rc raftConfig) error {
	s := &server{locks: newTable()}
	switch {
	case rc.peers != "":
		if dir == "" || rc.addr == "" || rc.pace != "write" && rc.pace != "commit" {
			return errors.New("-peers needs -dir, -raft-addr and -pace write or commit")
		}
		n, err := startRaft(dir, rc.id, rc.addr, rc.peers, rc.pace == "commit")
		if err != nil {
			return err
		}
		s.raft, s.wal = n, n.j
	case dir != "":
		wal, err := openGroupLog(dir)
		if err != nil {
			return err
		}
		s.wal = wal
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-sig
		ln.Close()
	}()
	return s.acceptLoop(ln)
}

// acceptLoop serves every connection ln accepts until ln is closed.
func (s *server) acceptLoop(ln net.Listener) error {
	for {
		nc, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go s.serve(nc)
	}
}

type server struct {
	locks *table
	wal   journal   // nil: memory only
	raft  *raftNode // the raft floor's; nil otherwise
}

// journal is where a write's record goes before its reply: the returned
// batch's synced closes once the record is durable (or err says why not).
type journal interface {
	enqueue(rec []byte) *batch
}

// leads reports whether this node takes writes: always, but for a raft
// floor's follower.
func (s *server) leads() bool { return s.raft == nil || s.raft.leads() }

// client is one connection: its replies go out through w, buffered, and
// reach the socket only once every record queued before them is synced.
type client struct {
	w   *bufio.Writer
	out *syncedWriter
}

// serve reads commands and answers them in order, flushing once nothing more
// is buffered: a pipeline's records go to the log together, and its replies
// out in one write after one sync.
func (s *server) serve(nc net.Conn) {
	defer nc.Close()
	r := bufio.NewReaderSize(nc, 16<<10)
	c := &client{out: &syncedWriter{nc: nc}}
	c.w = bufio.NewWriterSize(c.out, 16<<10)
	var args [][]byte
	for {
		var err error
		args, err = readCommand(r, args[:0])
		if err != nil {
			var perr protocolError
			if errors.As(err, &perr) {
				c.w.WriteString("-ERR " + perr.Error() + "\r\n")
				c.w.Flush()
			}
			return
		}
		s.handle(c, args)
		if r.Buffered() == 0 {
			if c.w.Flush() != nil {
				return
			}
		}
	}
}

// durable queues rec in the log, when the server has one: the replies
// written after it wait for its sync.
func (s *server) durable(c *client, rec []byte) {
	if s.wal != nil {
		c.out.pending = s.wal.enqueue(rec)
	}
}

// syncedWriter is a connection's socket behind the log: a write first waits
// for the sync of the last record the connection queued (batches sync in
// order, so that covers every earlier one). A failed sync fails the write:
// the connection closes without the replies.
type syncedWriter struct {
	nc      net.Conn
	pending *batch
}

func (o *syncedWriter) Write(p []byte) (int, error) {
	if b := o.pending; b != nil {
		<-b.synced
		o.pending = nil
		if b.err != nil {
			return 0, b.err
		}
	}
	return o.nc.Write(p)
}

func writeError(w io.Writer, msg string) { io.WriteString(w, "-"+msg+"\r\n") }
