package server

import (
	"errors"
	"slices"
	"strings"

	"github.com/raftlock/raftlock/node"
)

// Disk is what INFO asks of the node about its disk (raftnode.Replica): its fault now, or nil.
type Disk interface {
	DiskFault() error
}

// diskReply is the MISCONF reply for err, whose chain holds df; uncertain when the request's
// entry may have reached the disk before it failed.
func diskReply(df node.DiskFault, uncertain bool) string {
	msg := "MISCONF " + df.Error()
	switch {
	case df.DiskFull():
		return msg + "; this node refuses writes until space is freed; nothing of this write was written"
	case uncertain:
		return msg + "; this node stopped acknowledging writes until it is restarted; the outcome of this write is unknown: read the key on another node before retrying"
	default:
		return msg + "; this node stopped acknowledging writes until it is restarted; retry on another node"
	}
}

// diskFields are INFO persistence's fields about the disk: aof_last_write_status as Redis has it
// (ok or err), disk_state (ok, full or failed) and disk_error (empty when ok).
func (s *Server) diskFields() []infoField {
	status, state, text := "ok", "ok", ""
	if err := s.diskFault(); err != nil {
		status, state, text = "err", "failed", strings.NewReplacer("\r", " ", "\n", " ").Replace(err.Error())
		var df node.DiskFault
		if errors.As(err, &df) && df.DiskFull() {
			state = "full"
		}
	}
	return []infoField{{"aof_last_write_status", status}, {"disk_state", state}, {"disk_error", text}}
}

// failedDisk is the reply for a request that needs the leader on a node whose disk failed: its
// raft is stopped, so it knows no leader to forward to, and the client must go to another node.
// ok is false while the disk works (or is only full: raft still runs and knows the leader).
func (s *Server) failedDisk() (reply string, ok bool) {
	var df node.DiskFault
	if !errors.As(s.diskFault(), &df) || df.DiskFull() {
		return "", false
	}
	return diskReply(df, false), true
}

// diskFault is the node's disk's fault now, or nil (Deps.Disk).
func (s *Server) diskFault() error {
	if s.disk == nil {
		return nil
	}
	return s.disk.DiskFault()
}

// subscribes reports whether the pub/sub command named name starts a subscription.
func subscribes(name string) bool {
	return name == "subscribe" || name == "psubscribe" || name == "ssubscribe"
}

// dropClientsOnFailedDisk closes, once, every client connection accepted before this node's
// disk failed. Its raft stopped, so this node applies nothing more: its subscribers, blocked pops,
// tracking clients and lock holders would wait in silence for what never comes, where a closed
// connection sends them to another node. New connections are served what this node can still
// answer (INFO, READONLY reads) and MISCONF for the rest. The forward watch calls it.
func (s *Server) dropClientsOnFailedDisk() {
	if s.diskDropped.Load() {
		return
	}
	if _, failed := s.failedDisk(); !failed {
		return
	}
	s.diskDropped.Store(true)
	// A connection accepted after the failure was never waiting on this node's raft, and its
	// client may already have read disk_state:failed and be about to ask something this node
	// still answers: closing it would turn that answer into a reset.
	conns := slices.DeleteFunc(s.connections(), func(c *conn) bool { return c.sinceDiskFailed })
	for _, c := range conns {
		c.kill()
	}
	s.log.Warn("disk failed: closed every client connection accepted before the failure, whose waits and subscriptions this node can no longer serve; new ones get MISCONF for what needs the leader",
		"closed", len(conns))
}

func isDisk(err error) bool {
	_, _, ok := diskError(err)
	return ok
}

// diskError finds a disk fault in err's chain; uncertain tells whether the outcome is unknown.
func diskError(err error) (df node.DiskFault, uncertain bool, ok bool) {
	if !errors.As(err, &df) {
		return nil, false, false
	}
	return df, errors.Is(err, node.ErrUncertain), true
}
