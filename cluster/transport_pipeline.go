package cluster

import (
	"sync"

	"github.com/hashicorp/raft"
)

// maxUnreadResponses bounds the AppendEntries responses a pipeline holds that raft has not read
// yet: as many as raft may send ahead of its decoder before it notices the decoder stopped.
const maxUnreadResponses = 64

// AppendEntriesPipeline is raft's network pipeline to target, with its responses read as they
// come (drainedPipeline).
func (t *Transport) AppendEntriesPipeline(id raft.ServerID, target raft.ServerAddress) (raft.AppendPipeline, error) {
	p, err := t.NetworkTransport.AppendEntriesPipeline(id, target)
	if err != nil {
		return nil, err
	}
	return newDrainedPipeline(p), nil
}

var _ raft.AppendPipeline = (*drainedPipeline)(nil)

// drainedPipeline reads its pipeline's responses as soon as they are decoded and holds them
// (up to maxUnreadResponses) until raft reads them.
//
// hashicorp/raft's netPipeline (v1.7.2, and v1.8.0 alike) hands a decoded response over an unbuffered channel
// (MaxRPCsInFlight is 2 by default: its channels hold MaxRPCsInFlight-2) and takes the next
// request to decode from another one. When a follower answers an AppendEntries with failure
// (a newer term, say), raft's decoder (pipelineDecode) returns, and its sender loop may send
// one more AppendEntries before it notices: that send waits for the transport's decoder, which
// waits for someone to take the previous response, which nobody will. The sender never reaches
// pipeline.Close, replication to that follower stops for good while heartbeats go on, and
// raft's Shutdown waits for ever (TestPipelineSendAfterDecoderStopped). Taking every response at once breaks the cycle; the bound
// keeps the back-pressure raft meant, since raft reads each response promptly while its
// decoder runs.
type drainedPipeline struct {
	raft.AppendPipeline
	out    chan raft.AppendFuture
	closed chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
}

func newDrainedPipeline(p raft.AppendPipeline) *drainedPipeline {
	d := &drainedPipeline{AppendPipeline: p, out: make(chan raft.AppendFuture), closed: make(chan struct{})}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.forward(p.Consumer())
	}()
	return d
}

// forward moves responses from in to out, holding those raft has not read yet.
func (d *drainedPipeline) forward(in <-chan raft.AppendFuture) {
	var held []raft.AppendFuture
	for {
		var out chan raft.AppendFuture
		var next raft.AppendFuture
		if len(held) > 0 {
			out, next = d.out, held[0]
		}
		if len(held) == maxUnreadResponses {
			in = nil // back-pressure: raft's decoder reads them or the pipeline closes
		} else if in == nil {
			in = d.AppendPipeline.Consumer()
		}
		select {
		case f := <-in:
			held = append(held, f)
		case out <- next:
			held[0] = nil
			held = held[1:]
		case <-d.closed:
			return
		}
	}
}

// Consumer returns the responses, in the order of their requests.
func (d *drainedPipeline) Consumer() <-chan raft.AppendFuture { return d.out }

// Close closes the pipeline and stops forwarding. It is idempotent.
func (d *drainedPipeline) Close() error {
	d.once.Do(func() { close(d.closed) })
	err := d.AppendPipeline.Close()
	d.wg.Wait()
	return err
}
