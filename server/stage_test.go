package server

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/raftnode"
	"github.com/raftlock/raftlock/tests/testutil"
)

// pipelineOf writes cmds as one pipeline.
func pipelineOf(cmds [][]string) string {
	var b strings.Builder
	for _, c := range cmds {
		fmt.Fprintf(&b, "*%d\r\n", len(c))
		for _, a := range c {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	return b.String()
}

// sendPipeline writes cmds as one pipeline and reads their replies.
func sendPipeline(t *testing.T, r *rawConn, cmds [][]string) []string {
	t.Helper()
	r.nc.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := r.nc.Write([]byte(pipelineOf(cmds))); err != nil {
		t.Fatal(err)
	}
	got := make([]string, len(cmds))
	for i := range cmds {
		reply, err := readReply(r.br)
		if err != nil {
			t.Fatal(err)
		}
		got[i] = reply
	}
	return got
}

// checkReplies compares each reply with the one wanted; ":?" wants any integer (a token).
func checkReplies(t *testing.T, cmds [][]string, got, want []string) {
	t.Helper()
	for i, w := range want {
		if w == ":?" {
			if !strings.HasPrefix(got[i], ":") {
				t.Errorf("%v = %q; want an integer", cmds[i], got[i])
			}
			continue
		}
		if got[i] != w {
			t.Errorf("%v = %q; want %q", cmds[i], got[i], w)
		}
	}
}

// A pipeline that mixes staged lock commands (proposed from the connection's goroutine),
// their argument errors, refusals, and commands that run on workers gets every reply in the
// order sent, each what the command would have answered alone.
func TestStagedPipelineRepliesInOrder(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	cmds := [][]string{
		{"LOCK", "a", "5000"},
		{"LOCK", "a", "5000"},                 // held: refused (a read), after the grant replied
		{"LOCK", "b", "abc"},                  // replied by the first half, while a is in flight
		{"LOCK", "c", "5000", "BOGUS"},        // syntax
		{"UNLOCK", "zz"},                      // no token remembered
		{"UNLOCK", "a", "99999"},              // not the holder's token
		{"SET", "s", "v", "NX", "PX", "5000"}, // a worker's
		{"LOCK", "d", "5000", "OWNER", "me"},
		{"LOCK", "d", "5000", "OWNER", "me"}, // the same owner: renewed, same token
		{"UNLOCK", "a"},                      // the token the first LOCK remembered
		{"GET", "s"},
		{"LOCK", "s", "5000"}, // a string's key is held
		{"UNLOCK", "d"},
		{"EXISTS", "a", "d"},
	}
	got := sendPipeline(t, r, cmds)
	checkReplies(t, cmds, got, []string{":?", "$-1\r\n", "-ERR value is not an integer or out of range\r\n", "-ERR syntax error\r\n",
		"-ERR this connection holds no lock on 'zz': use UNLOCK with the token\r\n", ":0\r\n", "+OK\r\n", ":?", ":?",
		":1\r\n", "$1\r\nv\r\n", "$-1\r\n", ":1\r\n", ":0\r\n"})
	if got[7] != got[8] {
		t.Errorf("the same owner's second LOCK = %q; want its first token %q", got[8], got[7])
	}
}

// The Redis lock recipe pipelined (SET NX PX, then EVAL or EVALSHA of the compare-and-delete
// script), with its argument errors and refusals among the staged commands, replies in order.
func TestStagedRedisRecipeRepliesInOrder(t *testing.T) {
	addr, _ := startServer(t, nil)
	r := dialRaw(t, addr)
	sha := strings.SplitN(r.do("SCRIPT", "LOAD", unlockScript), "\r\n", 3)[1] // $40, the digest, ""
	cmds := [][]string{
		{"SET", "a", "me", "NX", "PX", "5000"},
		{"SET", "a", "you", "NX", "PX", "5000"}, // held: refused
		{"SET", "b", "me", "NX", "PX", "abc"},   // argument error while a is in flight
		{"SET", "b", "me", "NX", "XX"},          // syntax
		{"EVALSHA", sha, "1", "a", "you"},       // not the holder's value
		{"EVALSHA", "0000000000000000000000000000000000000000", "1", "a", "me"},
		{"EVAL", unlockScript, "2", "a"}, // more keys than arguments
		{"SET", "c", "me", "NX", "PX", "5000"},
		{"EVALSHA", sha, "1", "a", "me"},
		{"EVAL", unlockScript, "1", "c", "me"},
		{"EXISTS", "a", "c"},
		{"SET", "a", "v", "GET"}, // a plain SET with GET of a gone key
	}
	checkReplies(t, cmds, sendPipeline(t, r, cmds), []string{"+OK\r\n", "$-1\r\n", "-ERR value is not an integer or out of range\r\n",
		"-ERR syntax error\r\n", ":0\r\n", "-NOSCRIPT No matching script. Please use EVAL.\r\n",
		"-ERR Number of keys can't be greater than number of args\r\n", "+OK\r\n", ":1\r\n", ":1\r\n", ":0\r\n", "$-1\r\n"})
}

// DEL is staged too (a recipe's release without a script): a pipeline of SETs and DELs
// replies in order, counts a key named twice once, and starts no worker.
func TestStagedDelRepliesInOrder(t *testing.T) {
	addr, s := startServer(t, nil)
	r := dialRaw(t, addr)
	cmds := [][]string{
		{"SET", "a", "me", "NX", "PX", "5000"},
		{"SET", "b", "me", "NX", "PX", "5000"},
		{"SET", "c", "me", "NX", "PX", "5000"},
		{"DEL", "a", "b", "a", "nothing"},
		{"DEL", "a"},
		{"SET", "a", "you", "NX", "PX", "5000"}, // free again
		{"DEL", "c"},
	}
	checkReplies(t, cmds, sendPipeline(t, r, cmds), []string{"+OK\r\n", "+OK\r\n", "+OK\r\n", ":2\r\n", ":0\r\n", "+OK\r\n", ":1\r\n"})
	if started := s.workers.started.Load(); started != 0 {
		t.Errorf("%d workers started for a pipeline of SETs and DELs; want none", started)
	}
	if got := r.do("EXISTS", "a", "b", "c"); got != ":1\r\n" {
		t.Errorf("EXISTS a b c = %q after the pipeline; want :1 (a, taken again)", got)
	}
}

// A pipeline of LOCKs and UNLOCKs runs on the connection's own goroutine: no worker starts,
// and the whole pipeline is in flight at once (its grants commit together).
func TestStagedPipelineNeedsNoWorkers(t *testing.T) {
	spy := newFakeNode()
	addr, s := serveNode(t, spy, nil)
	r := dialRaw(t, addr)
	const n = 32
	spy.holdCommits(n)
	var cmds [][]string
	for i := range n {
		cmds = append(cmds, []string{"LOCK", fmt.Sprintf("k%02d", i), "5000"})
	}
	r.nc.SetDeadline(time.Now().Add(2 * holdTimeout))
	r.nc.Write([]byte(pipelineOf(cmds)))
	for i := range n {
		if reply, err := readReply(r.br); err != nil || !strings.HasPrefix(reply, ":") {
			t.Fatalf("LOCK %d = %q, %v", i, reply, err)
		}
	}
	spy.holdCommits(n)
	cmds = cmds[:0]
	for i := range n {
		cmds = append(cmds, []string{"UNLOCK", fmt.Sprintf("k%02d", i)})
	}
	r.nc.Write([]byte(pipelineOf(cmds)))
	for i := range n {
		if reply, err := readReply(r.br); err != nil || reply != ":1\r\n" {
			t.Fatalf("UNLOCK %d = %q, %v", i, reply, err)
		}
	}
	if most := spy.most.Load(); most < n {
		t.Errorf("at most %d commands were in flight at once; want all %d", most, n)
	}
	if started := s.workers.started.Load(); started != 0 {
		t.Errorf("%d workers started for a pipeline of LOCKs and UNLOCKs; want none", started)
	}
}

// A client that pipelines LOCKs and hangs up before their replies leaves no lock held: each
// staged grant is seen through with the connection's context, and released as a ghost. The
// node's commits are held (repliesAfterHangUp) until the client is gone.
func TestStagedPipelineHangUpReleasesGrants(t *testing.T) {
	addr, _ := serveNode(t, repliesAfterHangUp{startNode(t)}, nil)
	r := dialRaw(t, addr)
	var cmds [][]string
	for i := range 64 {
		cmds = append(cmds, []string{"LOCK", fmt.Sprintf("g%02d", i), "60000"})
	}
	r.nc.Write([]byte(pipelineOf(cmds)))
	check := dialRaw(t, addr)
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("all 64 grants applied", func() bool {
		return check.do("DBSIZE") == ":64\r\n"
	}))
	r.nc.Close()
	testutil.WaitFor(t, 5*time.Second, testutil.Cond("every ghost grant released", func() bool {
		return check.do("DBSIZE") == ":0\r\n"
	}))
}

// repliesAfterHangUp is a node whose proposals' outcomes reach their requests only once the
// request's client is gone: a client that hangs up before its reply, every time.
type repliesAfterHangUp struct{ *raftnode.Replica }

func (n repliesAfterHangUp) ProposeAll(ctx context.Context, reqs []node.Proposal) {
	n.Replica.ProposeAll(ctx, reqs)
	for i, r := range reqs {
		if r.Err == nil {
			reqs[i].Pending = afterHangUp{r.Pending, ctx}
		}
	}
}

type afterHangUp struct {
	node.Pending
	ctx context.Context
}

func (p afterHangUp) Done() <-chan struct{} { return p.ctx.Done() }

func (p afterHangUp) Wait() ([]fsm.Result, error) {
	<-p.ctx.Done()
	return p.Pending.Wait()
}

// A pipeline of refused LOCKs (reads, each answered after a leadership check) is proposed
// whole before the connection waits on the first check, so the checks overlap. The connection
// proposes the next command first only when its reader has handed it over already: now and then
// the connection's goroutine overtakes the reader's and finds none waiting (about one run in
// fifteen under -race), and then it waits on the first check early, as it should. So the
// scenario is played up to three times, and one whole pipeline must be proposed first.
func TestStagedReadsOverlap(t *testing.T) {
	const n = 16
	var got int32
	for range 3 {
		if got = stagedReadsProposedAtFirstWait(t, n); got == n {
			return
		}
	}
	t.Errorf("%d refused LOCKs were proposed when the first one's check was waited for; want all %d", got, n)
}

// stagedReadsProposedAtFirstWait pipelines n LOCKs of held keys on a fresh server and returns
// how many were proposed when the first one's check was waited for.
func stagedReadsProposedAtFirstWait(t *testing.T, n int) int32 {
	reads := &heldReads{fakeNode: newFakeNode(), want: int32(n), all: make(chan struct{})}
	addr, _ := serveNode(t, reads, nil)
	holder, other := dialRaw(t, addr), dialRaw(t, addr)
	var cmds [][]string
	for i := range n {
		key := fmt.Sprintf("k%02d", i)
		if got := holder.do("LOCK", key, "60000"); !strings.HasPrefix(got, ":") {
			t.Fatalf("LOCK %s = %q", key, got)
		}
		cmds = append(cmds, []string{"LOCK", key, "60000"})
	}
	other.nc.SetDeadline(time.Now().Add(time.Duration(n) * 2 * heldReadTimeout))
	other.nc.Write([]byte(pipelineOf(cmds)))
	for i := range n {
		if reply, err := readReply(other.br); err != nil || reply != "$-1\r\n" {
			t.Fatalf("LOCK %d of a held key = %q, %v; want nil", i, reply, err)
		}
	}
	return reads.atFirstWait.Load()
}

// heldReadTimeout bounds how long a held read waits for the rest (a failing test's cost).
const heldReadTimeout = time.Second

// heldReads is a fake node whose reads (requests that yield nothing) are answered only once
// want of them were proposed, or after heldReadTimeout; it records how many were proposed
// when the first one's outcome was waited for.
type heldReads struct {
	*fakeNode
	want        int32
	proposed    atomic.Int32
	atFirstWait atomic.Int32
	all         chan struct{}
}

func (h *heldReads) ProposeAll(ctx context.Context, reqs []node.Proposal) {
	for i, r := range reqs {
		p, err := h.fakeNode.Propose(ctx, r.Keys, r.Eval)
		reqs[i].Pending, reqs[i].Err = p, err
		if _, read := p.(fakeRead); err != nil || !read {
			continue
		}
		if h.proposed.Add(1) == h.want {
			close(h.all)
		}
		reqs[i].Pending = heldRead{h}
	}
}

type heldRead struct{ h *heldReads }

func (heldRead) Done() <-chan struct{} { return nil }

func (r heldRead) Wait() ([]fsm.Result, error) {
	r.h.atFirstWait.CompareAndSwap(0, r.h.proposed.Load())
	select {
	case <-r.h.all:
	case <-time.After(heldReadTimeout):
	}
	return nil, nil
}

// Connections that pipeline writes over the same few keys, each in its own order, all get
// their replies. A staged command's proposal marks its keys pending until it applies; the
// connection goes on to propose its next command before it collects the first's outcome, and
// that next proposal may wait on a key another connection marked the same way. The marks
// must clear when the entry applies, not when its connection collects the outcome: otherwise
// two such connections wait on each other for ever (redis-benchmark -r 1000 -P 32 -c 16 hung
// a node this way after a few hundred SETs).
func TestStagedPipelinesOnSharedKeysDoNotDeadlock(t *testing.T) {
	for _, mode := range []struct {
		name string
		mod  func(*raftnode.Config)
	}{
		{"group commit", nil},
		{"entry per request", func(c *raftnode.Config) { c.NoGroupCommit = true }},
	} {
		t.Run(mode.name, func(t *testing.T) {
			addr, _ := serveNode(t, startNodeWith(t, mode.mod), nil)
			const conns, rounds, depth, keys = 16, 20, 32, 8
			errs := make(chan error, conns)
			for c := range conns {
				r := dialRaw(t, addr)
				go func() {
					errs <- pipelineSharedKeys(r, c, rounds, depth, keys)
				}()
			}
			for range conns {
				if err := <-errs; err != nil {
					t.Fatal(err)
				}
			}
		})
	}
}

// pipelineSharedKeys sends rounds pipelines of depth SETs on keys k0..k(keys-1), in an order
// of its own (seeded by c), and checks every reply.
func pipelineSharedKeys(r *rawConn, c, rounds, depth, keys int) error {
	next := uint32(c*7919 + 1)
	for round := range rounds {
		cmds := make([][]string, depth)
		for i := range cmds {
			next = next*1664525 + 1013904223 // a fixed LCG: the same orders every run
			cmds[i] = []string{"SET", fmt.Sprintf("k%d", next>>16%uint32(keys)), fmt.Sprintf("c%d-r%d-%d", c, round, i)}
		}
		r.nc.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := r.nc.Write([]byte(pipelineOf(cmds))); err != nil {
			return err
		}
		for i := range cmds {
			reply, err := readReply(r.br)
			if err != nil {
				return fmt.Errorf("connection %d, round %d: reply %d of %d: %w (deadlocked?)", c, round, i, depth, err)
			}
			if reply != "+OK\r\n" {
				return fmt.Errorf("connection %d: %v = %q, want +OK", c, cmds[i], reply)
			}
		}
	}
	return nil
}

// A staged command goes through the same admission and accounting as one sent alone: in a
// pipeline of LOCKs and UNLOCKs, a user's ACL refusals, argument errors and grants reply as they
// do one by one, and the server's figures (commands, errors, refusals by reason, latency by
// family) grow by the same amounts. The pipeline's refusals start no worker: they are refused on
// the staged commands' own way in, not by a detour.
func TestStagedCommandsAdmittedAndCountedAsAlone(t *testing.T) {
	addr, s := startServer(t, nil)
	if got := dialRaw(t, addr).do("ACL", "SETUSER", "u", "on", ">pw", "~ok:*", "+lock", "+unlock", "+auth"); got != "+OK\r\n" {
		t.Fatalf("ACL SETUSER = %q", got)
	}
	cmds := [][]string{
		{"LOCK", "ok:a", "5000"},
		{"LOCK", "secret:a", "5000"}, // key not permitted
		{"UNLOCK", "ok:a"},
		{"SET", "ok:b", "v", "NX", "PX", "5000"}, // command not permitted
		{"LOCK", "ok:c", "5000"},
		{"UNLOCK", "secret:c", "1"}, // key not permitted
		{"LOCK", "ok:d", "abc"},     // argument error
		{"UNLOCK", "ok:c"},
	}
	asUser := func() *rawConn {
		r := dialRaw(t, addr)
		if got := r.do("AUTH", "u", "pw"); got != "+OK\r\n" {
			t.Fatalf("AUTH = %q", got)
		}
		return r
	}
	// run sends cmds one way and returns their replies (tokens as ":?") and what the server's
	// figures grew by.
	run := func(send func(r *rawConn) []string) ([]string, admissionFigures) {
		r := asUser()
		before := admissionFiguresOf(s)
		got := send(r)
		for i, g := range got {
			if strings.HasPrefix(g, ":") && g != ":0\r\n" && g != ":1\r\n" {
				got[i] = ":?"
			}
		}
		return got, admissionFiguresOf(s).minus(before)
	}
	aloneReplies, alone := run(func(r *rawConn) []string {
		var got []string
		for _, c := range cmds {
			got = append(got, r.do(c...))
		}
		return got
	})
	workers := s.workers.started.Load()
	pipedReplies, piped := run(func(r *rawConn) []string { return sendPipeline(t, r, cmds) })

	for i := range cmds {
		if pipedReplies[i] != aloneReplies[i] {
			t.Errorf("%v pipelined = %q; alone %q", cmds[i], pipedReplies[i], aloneReplies[i])
		}
	}
	if !strings.HasPrefix(aloneReplies[1], "-NOPERM") || !strings.HasPrefix(aloneReplies[3], "-NOPERM") {
		t.Errorf("the refused commands replied %q and %q; want NOPERM", aloneReplies[1], aloneReplies[3])
	}
	if diff := cmp.Diff(alone, piped, cmp.AllowUnexported(admissionFigures{})); diff != "" {
		t.Errorf("figures of the pipeline differ from those of the same commands alone (-alone +pipelined):\n%s", diff)
	}
	if alone.commands != uint64(len(cmds)) || alone.refused["noperm"] != 3 {
		t.Errorf("alone: %d commands, %d refused noperm; want %d and 3", alone.commands, alone.refused["noperm"], len(cmds))
	}
	if started := s.workers.started.Load() - workers; started != 0 {
		t.Errorf("%d workers started for a pipeline of LOCKs, UNLOCKs and their refusals; want none", started)
	}
}

// admissionFigures are the server's figures that dispatch keeps for every command.
type admissionFigures struct {
	commands, errors uint64
	refused          map[string]uint64
	timed            map[string]uint64 // latency observations by family
}

func admissionFiguresOf(s *Server) admissionFigures {
	st := s.ServerStats()
	f := admissionFigures{commands: st.Commands, errors: st.Errors, refused: map[string]uint64{}, timed: map[string]uint64{}}
	for _, r := range st.Refused {
		f.refused[r.Reason] = r.Count
	}
	for _, fam := range st.Families {
		f.timed[fam.Name] = fam.Latency.Count()
	}
	return f
}

// minus is what the figures grew by since before; the counts that did not grow are left out.
func (f admissionFigures) minus(before admissionFigures) admissionFigures {
	d := admissionFigures{commands: f.commands - before.commands, errors: f.errors - before.errors,
		refused: map[string]uint64{}, timed: map[string]uint64{}}
	for k, v := range f.refused {
		if v > before.refused[k] {
			d.refused[k] = v - before.refused[k]
		}
	}
	for k, v := range f.timed {
		if v > before.timed[k] {
			d.timed[k] = v - before.timed[k]
		}
	}
	return d
}
