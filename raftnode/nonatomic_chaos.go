//go:build chaos_nonatomic

package raftnode

// A deliberately broken build for the chaos harness (tests/chaos, CHAOS_NONATOMIC=1): a
// request's commands are proposed as one raft entry each, as raftnode did before entries were
// atomic, so a change of leader between them, or a reader on a follower between their applies,
// sees the request half applied. To make the window wide enough for a short run to hit it, each
// entry is awaited before the next is proposed, with a short pause in between. Never built
// otherwise.

import (
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/fsm"
)

func init() { splitSubmit = submitSplit }

// splitPause is the gap between one command's entry applying and the next one's proposal.
const splitPause = 15 * time.Millisecond

// submitSplit proposes cmds one entry each, in order, waiting for each; it stops at the first
// that fails, leaving the earlier ones applied. The future it returns is already resolved.
func submitSplit(n *Replica, cmds []fsm.Command) raft.ApplyFuture {
	out := &splitFuture{resp: &entryResponse{}}
	for i, c := range cmds {
		if i > 0 {
			time.Sleep(splitPause)
		}
		f := n.raft.Apply(fsm.EncodeEntry(nil, []fsm.Command{c}), n.cfg.ApplyTimeout)
		n.stats.proposals.Add(1)
		if out.err = n.waitFuture(f); out.err != nil {
			return out
		}
		r, ok := f.Response().(*entryResponse)
		if !ok || len(r.results) != 1 {
			return out // await reports the missing results as uncertain
		}
		out.resp.results = append(out.resp.results, r.results[0])
		out.index = f.Index()
	}
	return out
}

// splitFuture is the resolved outcome of submitSplit's entries.
type splitFuture struct {
	err   error
	resp  *entryResponse
	index uint64
}

func (f *splitFuture) Error() error          { return f.err }
func (f *splitFuture) Index() uint64         { return f.index }
func (f *splitFuture) Response() interface{} { return f.resp }
