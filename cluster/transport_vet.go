package cluster

import (
	"errors"
	"fmt"
	"io"

	"github.com/hashicorp/raft"
)

// A raft configuration that cannot be decoded makes hashicorp/raft panic: DecodeConfiguration
// panics on a follower that appends such a LogConfiguration entry (after it stored the entry,
// so again on every restart, when the log is replayed) or receives such an InstallSnapshot.
// Only a peer that passed the handshake (handshake.go) gets this far, but a bug or a
// compromised member must not be able to stop a node for good: the transport refuses an RPC
// that carries a configuration raft would not decode, or one that no raft node would write
// (no voter, an empty or repeated ID or address, an unknown suffrage), before raft sees it.

// errBadConfiguration is why such an RPC is refused.
var errBadConfiguration = errors.New("raft RPC refused: malformed configuration")

// vetLoop passes in's RPCs that vetRPC accepts to Consumer and answers the others with an
// error, until Close.
func (t *Transport) vetLoop(in <-chan raft.RPC) {
	for {
		var rpc raft.RPC
		select {
		case rpc = <-in:
		case <-t.stop:
			return
		}
		if err := vetRPC(rpc); err != nil {
			t.layer.guard.warn("raft RPC refused", "err", err)
			rpc.Respond(refusal(rpc.Command), err)
			continue
		}
		select {
		case t.vetted <- rpc:
		case <-t.stop:
			rpc.Respond(refusal(rpc.Command), raft.ErrTransportShutdown)
			return
		}
	}
}

// vetRPC checks the configurations an RPC carries. A refused InstallSnapshot's data is read
// and dropped, so that the connection's next frame is read where it starts.
func vetRPC(rpc raft.RPC) error {
	switch req := rpc.Command.(type) {
	case *raft.AppendEntriesRequest:
		for _, e := range req.Entries {
			if e == nil {
				return fmt.Errorf("%w: a nil entry", errBadConfiguration)
			}
			if e.Type != raft.LogConfiguration {
				continue
			}
			if err := vetConfiguration(e.Data); err != nil {
				return fmt.Errorf("entry %d: %w", e.Index, err)
			}
		}
	case *raft.InstallSnapshotRequest:
		if req.SnapshotVersion <= 0 {
			return nil // raft decodes the old peer list itself, and reports its errors
		}
		if err := vetConfiguration(req.Configuration); err != nil {
			if rpc.Reader != nil {
				io.Copy(io.Discard, rpc.Reader)
			}
			return fmt.Errorf("snapshot: %w", err)
		}
	}
	return nil
}

// vetConfiguration refuses what raft.DecodeConfiguration would panic on, and configurations no
// raft node writes.
func vetConfiguration(b []byte) error {
	c, err := decodeConfiguration(b)
	if err != nil {
		return err
	}
	ids, addrs, voters := map[raft.ServerID]bool{}, map[raft.ServerAddress]bool{}, 0
	for _, s := range c.Servers {
		switch {
		case s.ID == "" || s.Address == "":
			return fmt.Errorf("%w: a server without an ID or an address", errBadConfiguration)
		case ids[s.ID] || addrs[s.Address]:
			return fmt.Errorf("%w: server %q or address %q twice", errBadConfiguration, s.ID, s.Address)
		case s.Suffrage != raft.Voter && s.Suffrage != raft.Nonvoter && s.Suffrage != raft.Staging:
			return fmt.Errorf("%w: server %q of unknown suffrage %d", errBadConfiguration, s.ID, s.Suffrage)
		}
		ids[s.ID], addrs[s.Address] = true, true
		if s.Suffrage == raft.Voter {
			voters++
		}
	}
	if voters == 0 {
		return fmt.Errorf("%w: no voter", errBadConfiguration)
	}
	return nil
}

// decodeConfiguration is raft.DecodeConfiguration, which panics on bytes it cannot decode,
// with the panic turned into an error: the same decoder raft will run, so what passes here
// cannot panic there.
func decodeConfiguration(b []byte) (c raft.Configuration, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", errBadConfiguration, r)
		}
	}()
	return raft.DecodeConfiguration(b), nil
}

// refusal is the empty response of the kind req expects.
func refusal(req any) any {
	switch req.(type) {
	case *raft.AppendEntriesRequest:
		return &raft.AppendEntriesResponse{}
	case *raft.RequestVoteRequest:
		return &raft.RequestVoteResponse{}
	case *raft.RequestPreVoteRequest:
		return &raft.RequestPreVoteResponse{}
	case *raft.InstallSnapshotRequest:
		return &raft.InstallSnapshotResponse{}
	case *raft.TimeoutNowRequest:
		return &raft.TimeoutNowResponse{}
	}
	return nil
}
