package powerloss

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/hashicorp/raft"
)

// errPowerOff is what a call to or from a node whose power went answers.
var errPowerOff = errors.New("powerloss: the node's power is off")

// fencedTransport is raft's in-memory transport with the power fence of both ends. A node
// whose power went sends nothing more. A reply counts only if the node that sent it still had
// power after the call returned (and was the same incarnation as when it began): raft replies
// only after it has synced what the reply promises, so the crash clone of that node, taken
// later, holds it. Without the fence, a node cut mid-append could still acknowledge the
// append from its old, discarded filesystem and the harness would report losses raft never
// made. Pipelining is off: a pipeline's replies arrive on a channel the fence would need a
// goroutine to watch, and the synchronous path replicates the same entries.
type fencedTransport struct {
	*raft.InmemTransport
	self *fence
	// peer returns the fence of target's current incarnation, or nil if it is down.
	peer func(target raft.ServerAddress) *fence
}

var (
	_ raft.Transport   = (*fencedTransport)(nil)
	_ raft.WithPreVote = (*fencedTransport)(nil)
	_ raft.WithClose   = (*fencedTransport)(nil)
)

func (t *fencedTransport) call(target raft.ServerAddress, fn func() error) error {
	if !t.self.up(nil) {
		return errPowerOff
	}
	pf := t.peer(target)
	if pf == nil {
		return errPowerOff
	}
	if err := fn(); err != nil {
		return err
	}
	if !pf.up(nil) || t.peer(target) != pf {
		return errPowerOff // the reply may come from after the cut
	}
	return nil
}

func (t *fencedTransport) AppendEntriesPipeline(raft.ServerID, raft.ServerAddress) (raft.AppendPipeline, error) {
	return nil, raft.ErrPipelineReplicationNotSupported
}

func (t *fencedTransport) AppendEntries(id raft.ServerID, target raft.ServerAddress, args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) error {
	return t.call(target, func() error { return t.InmemTransport.AppendEntries(id, target, args, resp) })
}

func (t *fencedTransport) RequestVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestVoteRequest, resp *raft.RequestVoteResponse) error {
	return t.call(target, func() error { return t.InmemTransport.RequestVote(id, target, args, resp) })
}

func (t *fencedTransport) RequestPreVote(id raft.ServerID, target raft.ServerAddress, args *raft.RequestPreVoteRequest, resp *raft.RequestPreVoteResponse) error {
	return t.call(target, func() error { return t.InmemTransport.RequestPreVote(id, target, args, resp) })
}

func (t *fencedTransport) InstallSnapshot(id raft.ServerID, target raft.ServerAddress, args *raft.InstallSnapshotRequest, resp *raft.InstallSnapshotResponse, data io.Reader) error {
	err := t.call(target, func() error { return t.InmemTransport.InstallSnapshot(id, target, args, resp, data) })
	if err != nil && debug {
		fmt.Fprintf(os.Stderr, "powerloss debug: %s InstallSnapshot(index %d) to %s: %v\n", t.LocalAddr(), args.LastLogIndex, target, err)
	}
	return err
}

func (t *fencedTransport) TimeoutNow(id raft.ServerID, target raft.ServerAddress, args *raft.TimeoutNowRequest, resp *raft.TimeoutNowResponse) error {
	return t.call(target, func() error { return t.InmemTransport.TimeoutNow(id, target, args, resp) })
}
