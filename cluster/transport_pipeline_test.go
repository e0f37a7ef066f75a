package cluster

import (
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// chanPipeline has hashicorp/raft's netPipeline's hand-offs at its default
// MaxRPCsInFlight (2): a request waits on an unbuffered channel for the decoder, which hands
// each response over another unbuffered channel before it takes the next request.
type chanPipeline struct {
	inprogress, done chan raft.AppendFuture
	shutdown         chan struct{}
	once             sync.Once
}

func newChanPipeline() *chanPipeline {
	p := &chanPipeline{inprogress: make(chan raft.AppendFuture), done: make(chan raft.AppendFuture), shutdown: make(chan struct{})}
	go func() {
		for {
			select {
			case f := <-p.inprogress:
				select {
				case p.done <- f:
				case <-p.shutdown:
					return
				}
			case <-p.shutdown:
				return
			}
		}
	}()
	return p
}

func (p *chanPipeline) AppendEntries(args *raft.AppendEntriesRequest, resp *raft.AppendEntriesResponse) (raft.AppendFuture, error) {
	f := &sentFuture{args: args, resp: resp}
	select {
	case p.inprogress <- f:
		return f, nil
	case <-p.shutdown:
		return nil, raft.ErrPipelineShutdown
	}
}

func (p *chanPipeline) Consumer() <-chan raft.AppendFuture { return p.done }
func (p *chanPipeline) Close() error                       { p.once.Do(func() { close(p.shutdown) }); return nil }

type sentFuture struct {
	args *raft.AppendEntriesRequest
	resp *raft.AppendEntriesResponse
}

func (f *sentFuture) Error() error                          { return nil }
func (f *sentFuture) Start() time.Time                      { return time.Time{} }
func (f *sentFuture) Request() *raft.AppendEntriesRequest   { return f.args }
func (f *sentFuture) Response() *raft.AppendEntriesResponse { return f.resp }

// TestPipelineSendAfterDecoderStopped: raft's decoder stops reading responses (a follower
// answered with failure) and its sender sends a few more before it notices, then closes the
// pipeline. Over raft's own pipeline the second of those sends waits for ever (the
// transport's decoder waits for someone to take a response), so the sender never closes the
// pipeline and raft's Shutdown hangs; over drainedPipeline every send returns and Close ends.
// The responses raft did read came in the order of their requests.
func TestPipelineSendAfterDecoderStopped(t *testing.T) {
	d := newDrainedPipeline(newChanPipeline())
	for i := range uint64(3) {
		if _, err := d.AppendEntries(&raft.AppendEntriesRequest{LeaderCommitIndex: i}, &raft.AppendEntriesResponse{}); err != nil {
			t.Fatal(err)
		}
		f := <-d.Consumer()
		if got := f.Request().LeaderCommitIndex; got != i {
			t.Fatalf("response %d is for request %d", i, got)
		}
	}
	// The decoder stops reading; the sender goes on a few times, then closes.
	sent := make(chan error, 1)
	go func() {
		for i := range 5 {
			if _, err := d.AppendEntries(&raft.AppendEntriesRequest{LeaderCommitIndex: uint64(10 + i)}, &raft.AppendEntriesResponse{}); err != nil {
				sent <- err
				return
			}
		}
		sent <- d.Close()
	}()
	select {
	case err := <-sent:
		if err != nil {
			t.Fatalf("send or close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a send after the decoder stopped, or Close, did not return within 10s")
	}
	if err := d.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
