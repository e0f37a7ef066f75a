package cluster

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/raftnode"
	"github.com/raftlock/raftlock/resp"
)

// Slot moves (docs/groups.md, "Moving slots"). A SlotMover runs on every node of a cluster of
// several raft groups. On the node that leads a move's source group it runs the move: a Freeze
// in the source, the range read from the source's table as applied after it, an Import in the
// target (proposed here when this node leads the target, else sent to the target's leader as
// RAFT MOVECMD), and a Release in the source. A move that cannot finish is decided by an Abort
// in the target, which the target's state machine refuses once the Import applied: applied, the
// move is undone (Unfreeze in the source); refused, the Import went through and the Release
// follows. Every node also looks, once a second, for a move in flight out of a group it leads
// (Slots.Moving in the group's table): a leader that took over a move whose mover stopped
// (crashed, deposed, partitioned) decides it the same way. The state machines make every step
// safe to repeat and to race: a Release applies only to the frozen move, an Import never after
// its Abort.

const (
	// moveStepTimeout bounds one proposal or one question to another node of a move.
	moveStepTimeout = 10 * time.Second
	// moveRecoverEvery is how often a node looks for a move to decide in the groups it leads.
	moveRecoverEvery = time.Second
	// moveRetry is the pause before a step that failed is tried again.
	moveRetry = 100 * time.Millisecond
	// moveBytes is the most keys one Import carries, encoded: a range that holds more moves in
	// smaller ranges. Below fsm.MaxMoveBytes and the peers' default argument bound (1 MiB),
	// with room for the command's other arguments.
	moveBytes = 768 << 10
)

// dropFenceFloor is set by a deliberately broken build (tag chaos_nofloor): a move carries no
// fence floor, so the target's counter is raised only to the tokens its keys hold.
var dropFenceFloor bool

// errMoveTooBig means a range's keys do not fit one Import.
var errMoveTooBig = errors.New("the range's keys do not fit one raft entry")

// SlotMover moves hash slots between the raft groups of this node (server.SlotMover).
type SlotMover struct {
	groups []*Member // index = group; groups[0] holds the member table and the peer client
	log    *slog.Logger
	// moving lets one RAFT MOVESLOTS at a time run on this node.
	moving sync.Mutex
	// mu guards running, the moves this node is running or deciding now (the recovery loop
	// leaves them alone), and, in a test build's node (StopAfter), stopAfter, the step after
	// which its moves stop undecided, and abandoned, those moves, which its recovery loop
	// leaves to another leader.
	mu        sync.Mutex
	running   map[uint64]bool
	stopAfter fsm.Kind
	abandoned map[uint64]bool
	stop      chan struct{}
	wg        sync.WaitGroup
	// ctx ends at Stop: the recovery's decisions end with it.
	ctx    context.Context
	cancel context.CancelFunc
}

// errMoveStopped is a move stopped by StopAfter.
var errMoveStopped = errors.New("stopped undecided (--test-move-stop)")

// StopAfter makes the moves this node runs stop, undecided, after step (a Freeze or an
// Import), and its recovery loop leave them alone: a test then stops this node and sees the
// source group's next leader decide them. For tests only.
func (s *SlotMover) StopAfter(step fsm.Kind) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stopAfter, s.abandoned = step, map[uint64]bool{}
}

// stopsAfter reports whether mv stops after step (StopAfter), and notes it abandoned.
func (s *SlotMover) stopsAfter(step fsm.Kind, mv fsm.Move) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopAfter != step {
		return false
	}
	s.abandoned[mv.ID] = true
	s.log.Warn("slot move stopped undecided (--test-move-stop)", "after", step, "move", mv.ID)
	return true
}

// StartSlotMover returns the mover of this node's groups and starts its recovery loop.
func StartSlotMover(groups []*Member, logger *slog.Logger) *SlotMover {
	if logger == nil {
		logger = slog.Default()
	}
	s := &SlotMover{groups: groups, log: logger.With("component", "slot-mover"), stop: make(chan struct{}), running: map[uint64]bool{}}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(moveRecoverEvery)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.recoverMoves()
			}
		}
	}()
	return s
}

// Stop ends the recovery loop. A move running on a client's request ends with its context.
func (s *SlotMover) Stop() {
	close(s.stop)
	s.cancel()
	s.wg.Wait()
}

// MoveSlots moves the slots first to last from group source, which this node leads, to group
// target, in as many moves as their keys need (each one Import of at most moveBytes), and
// returns how many keys moved.
func (s *SlotMover) MoveSlots(ctx context.Context, source, first, last, target int) (int, error) {
	if source < 0 || source >= len(s.groups) || target < 0 || target >= len(s.groups) || source == target {
		return 0, fmt.Errorf("no move from raft group %d to raft group %d in a cluster of %d", source, target, len(s.groups))
	}
	if err := s.targetRunsEverywhere(ctx, target); err != nil {
		return 0, err
	}
	s.moving.Lock()
	defer s.moving.Unlock()
	moved := 0
	for a := first; a <= last; {
		b := last
		for a < b && s.rangeBytes(source, a, b) > moveBytes {
			b = a + (b-a)/2
		}
		if a == b {
			if n := s.rangeBytes(source, a, b); n > moveBytes {
				return moved, fmt.Errorf("slot %d holds %d bytes of keys, more than one move carries (%d)", a, n, moveBytes)
			}
		}
		n, err := s.moveRange(ctx, fsm.Move{First: a, Last: b, Source: source, Target: target})
		if errors.Is(err, errMoveTooBig) && a < b {
			continue // it grew between the estimate and the freeze: the next try halves it
		}
		if err != nil {
			return moved, fmt.Errorf("slots %d-%d: %w", a, b, err)
		}
		moved += n
		a = b + 1
	}
	return moved, nil
}

// targetRunsEverywhere refuses a move to a group that a member does not run yet: a node of a
// cluster converting to more groups (RAFT GROUPS) runs them only once restarted, and until then
// could neither serve the moved slots nor, leading the source group, decide a move. It asks each
// other voter of group 0 this node reaches (RAFT STATS); one it cannot reach is not counted (a
// move may run while a node is down: docs/groups.md says what that node does when back).
func (s *SlotMover) targetRunsEverywhere(ctx context.Context, target int) error {
	book := s.groups[0]
	if layout := book.cfg.Core.Layout; layout == 0 || target < layout {
		return nil // a group the cluster was created with: every node runs it
	}
	c, err := book.configuration()
	if err != nil {
		return err
	}
	for _, srv := range c.Servers {
		id := string(srv.ID)
		addr, known := book.MemberAddr(id)
		if id == book.cfg.Core.ID || !known || addr == "" {
			continue
		}
		st, err := book.peerAPI.State(ctx, addr)
		if errors.As(err, new(*resp.ReplyError)) {
			return fmt.Errorf("member %s did not say which raft groups it runs (RAFT STATS: %w): a move to group %d waits until it can", id, err, target)
		}
		if runs := max(st.Groups, 1); err == nil && runs <= target {
			return fmt.Errorf("member %s runs %d raft groups, not group %d yet: restart it to run the groups its cluster planned (RAFT GROUPS) before moving slots there", id, runs, target)
		}
	}
	return nil
}

// rangeBytes is the encoded size of the keys of slots first to last in group g's table here.
func (s *SlotMover) rangeBytes(g, first, last int) int {
	var snap *fsm.Snapshot
	s.groups[g].Core().ReadTable(func(m *fsm.Machine) { snap = m.Snapshot() })
	b, err := fsm.EncodeRange(snap.RangeSnapshot(first, last))
	if err != nil {
		return 0
	}
	return len(b)
}

// moveRange runs one move of mv's range (its ID and epoch chosen here).
func (s *SlotMover) moveRange(ctx context.Context, mv fsm.Move) (int, error) {
	core := s.groups[mv.Source].Core()
	var refused error
	core.ReadTable(func(m *fsm.Machine) {
		sl := m.Slots()
		if cur, moving := sl.Moving(); moving {
			refused = fmt.Errorf("a move of slots %d-%d is in flight from raft group %d", cur.First, cur.Last, mv.Source)
			return
		}
		for slot := mv.First; slot <= mv.Last; slot++ {
			r := sl.Of(slot)
			if r.State != fsm.SlotOwned {
				refused = fmt.Errorf("slot %d is not raft group %d's (%s)", slot, mv.Source, r.State)
				return
			}
			mv.Epoch = max(mv.Epoch, r.Epoch+1)
		}
	})
	if refused != nil {
		return 0, refused
	}
	if err := s.probeTarget(ctx, mv.Target); err != nil {
		return 0, err
	}
	mv.ID = newMoveID()
	s.setRunning(mv.ID, true)
	defer s.setRunning(mv.ID, false)
	status, err := s.propose(ctx, core, fsm.Command{Kind: fsm.KindFreezeSlots, Key: fsm.EncodeMove(mv)})
	switch {
	case err != nil:
		// Perhaps frozen: whoever leads the source decides it (recoverMoves), here now if we
		// still do.
		if derr := s.decide(ctx, mv); derr != nil {
			s.log.Warn("slot move not decided", "move", mv.ID, "err", derr)
		}
		return 0, fmt.Errorf("freeze: %w", err)
	case status != fsm.StatusSlots:
		return 0, fmt.Errorf("raft group %d refused to freeze the range (it changed, or another move started)", mv.Source)
	}
	s.log.Info("slots frozen", "first", mv.First, "last", mv.Last, "source", mv.Source, "target", mv.Target, "epoch", mv.Epoch, "move", mv.ID)
	if s.stopsAfter(fsm.KindFreezeSlots, mv) {
		return 0, errMoveStopped
	}
	keys, payload, floor, err := s.readRange(core, mv)
	if err == nil && len(payload) > moveBytes {
		err = errMoveTooBig
	}
	if err == nil {
		status, err = s.importRange(ctx, fsm.Command{Kind: fsm.KindImportSlots, Key: fsm.EncodeMove(mv), Owner: payload, Token: floor})
		if err == nil && status == fsm.StatusSlots {
			if s.stopsAfter(fsm.KindImportSlots, mv) {
				return 0, errMoveStopped
			}
			if err := s.inSource(ctx, mv, fsm.KindReleaseSlots); err != nil {
				return keys, fmt.Errorf("imported, release pending (the source's leader finishes it): %w", err)
			}
			s.log.Info("slots moved", "first", mv.First, "last", mv.Last, "source", mv.Source, "target", mv.Target, "keys", keys, "floor", floor)
			return keys, nil
		}
		if err == nil {
			err = fmt.Errorf("raft group %d refused the import", mv.Target)
		}
	}
	if derr := s.decide(ctx, mv); derr != nil {
		return 0, fmt.Errorf("%w; the move is not decided yet: %v", err, derr)
	}
	if s.released(mv) {
		// The import applied after all (a retry of one whose reply was lost was refused as a
		// repeat): the decision released the range, and the move is done.
		s.log.Info("slots moved", "first", mv.First, "last", mv.Last, "source", mv.Source, "target", mv.Target, "keys", keys, "floor", floor)
		return keys, nil
	}
	return 0, err
}

// importRange proposes a move's Import in its target group, again while the group has no
// leader (an election, a hand-off by the balancer) for up to moveStepTimeout: the range is
// frozen meanwhile, and an Import that applied before is refused as a repeat, which decide
// then reads as imported.
func (s *SlotMover) importRange(ctx context.Context, cmd fsm.Command) (fsm.Status, error) {
	until := time.Now().Add(moveStepTimeout)
	for {
		status, err := s.inTarget(ctx, cmd)
		if err == nil || !noLeaderNow(err) || time.Now().After(until) || pauseRetry(ctx) != nil {
			return status, err
		}
	}
}

// noLeaderNow reports whether err says a group had no leader to take a proposal: here, or as
// the node asked answered (TRYAGAIN, CLUSTERDOWN).
func noLeaderNow(err error) bool {
	var re *resp.ReplyError
	if errors.As(err, &re) {
		return re.Code() == "TRYAGAIN" || re.Code() == "CLUSTERDOWN"
	}
	return errors.As(err, new(*node.NotLeaderError))
}

// released reports whether mv's source released its range: the move went through.
func (s *SlotMover) released(mv fsm.Move) bool {
	var done bool
	s.groups[mv.Source].Core().ReadTable(func(m *fsm.Machine) { done = m.Slots().Decided(mv, fsm.KindReleaseSlots) })
	return done
}

// pauseRetry waits moveRetry before a step is tried again, or returns ctx's error.
func pauseRetry(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(moveRetry):
		return nil
	}
}

// setRunning notes whether this node runs or decides move id now.
func (s *SlotMover) setRunning(id uint64, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.running[id] = true
	} else {
		delete(s.running, id)
	}
}

// readRange reads mv's frozen range from the source's table as this node applied it: its keys
// with each lease as the time it has left (rounded up: late, never early), encoded for the
// Import, and the fence floor, the source's token counter.
func (s *SlotMover) readRange(core *raftnode.Replica, mv fsm.Move) (keys int, payload []byte, floor fsm.Token, err error) {
	var snap *fsm.Snapshot
	var clock int64
	core.ReadTable(func(m *fsm.Machine) {
		snap = m.Snapshot()
		clock = core.LeaseNow()
	})
	if cur, ok := snap.Slots().Moving(); !ok || cur != mv {
		return 0, nil, 0, fmt.Errorf("the range is not frozen for this move in raft group %d here", mv.Source)
	}
	part := snap.RangeSnapshot(mv.First, mv.Last).WithLeases(leaseLeft(clock))
	if dropFenceFloor {
		part = part.WithCounter(0)
	}
	payload, err = fsm.EncodeRange(part)
	return part.Len(), payload, part.LastToken(), err
}

// leaseLeft is the lease each lock of a table read at clock (this node's lease clock) has left,
// in whole milliseconds rounded up: what a backup records and a move carries.
func leaseLeft(clock int64) func(string, fsm.Lock) uint64 {
	return func(_ string, l fsm.Lock) uint64 {
		left := max(time.Duration(l.Deadline-clock), 0) // the Deadlines are this node's timers
		return uint64((left + time.Millisecond - 1) / time.Millisecond)
	}
}

// decide ends mv, frozen in its source, one way or the other: an Abort in the target says
// which (refused: the Import applied, so the source releases; applied: no Import ever will, so
// the source unfreezes). It keeps trying until ctx ends or this node no longer leads the source.
func (s *SlotMover) decide(ctx context.Context, mv fsm.Move) error {
	for {
		if !s.inFlight(mv) {
			return nil // decided (by this node's earlier try whose outcome it did not hear, or another)
		}
		status, err := s.inTarget(ctx, fsm.Command{Kind: fsm.KindAbortSlots, Key: fsm.EncodeMove(mv)})
		if err == nil {
			step := fsm.KindUnfreezeSlots
			if status != fsm.StatusSlots {
				step = fsm.KindReleaseSlots // the target refused the abort: it imported the range
			}
			if err = s.inSource(ctx, mv, step); err == nil {
				s.log.Info("slot move decided", "first", mv.First, "last", mv.Last, "source", mv.Source, "target", mv.Target,
					"move", mv.ID, "outcome", map[fsm.Kind]string{fsm.KindUnfreezeSlots: "undone", fsm.KindReleaseSlots: "moved"}[step])
				return nil
			}
		}
		if !s.groups[mv.Source].Core().IsLeader() {
			return fmt.Errorf("this node no longer leads raft group %d, whose next leader decides the move: %w", mv.Source, err)
		}
		select {
		case <-s.stop:
			return fmt.Errorf("stopping (last: %v)", err)
		default:
		}
		if perr := pauseRetry(ctx); perr != nil {
			return fmt.Errorf("%w (last: %v)", perr, err)
		}
	}
}

// inFlight reports whether the source's table here holds mv frozen.
func (s *SlotMover) inFlight(mv fsm.Move) bool {
	var cur fsm.Move
	var moving bool
	s.groups[mv.Source].Core().ReadTable(func(m *fsm.Machine) { cur, moving = m.Slots().Moving() })
	return moving && cur == mv
}

// recoverMoves decides every move in flight out of a group this node leads, each on a
// goroutine of its own, but the moves it runs or decides now (they decide themselves).
func (s *SlotMover) recoverMoves() {
	for g, m := range s.groups {
		core := m.Core()
		if !core.IsLeader() {
			continue
		}
		var mv fsm.Move
		var moving bool
		core.ReadTable(func(m *fsm.Machine) { mv, moving = m.Slots().Moving() })
		s.mu.Lock()
		skip := !moving || s.running[mv.ID] || s.abandoned[mv.ID]
		if !skip {
			s.running[mv.ID] = true
		}
		s.mu.Unlock()
		if skip {
			continue
		}
		s.log.Info("deciding a slot move in flight", "group", g, "first", mv.First, "last", mv.Last, "target", mv.Target, "move", mv.ID)
		// Each on its own: a move whose target has no leader must not hold up another group's.
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer s.setRunning(mv.ID, false)
			ctx, cancel := context.WithTimeout(s.ctx, 3*moveStepTimeout)
			defer cancel()
			if err := s.decide(ctx, mv); err != nil {
				s.log.Warn("slot move not decided", "move", mv.ID, "err", err)
			}
		}()
	}
}

// inSource proposes mv's step (Release or Unfreeze) in its source group, on this node, which
// leads it, trying again after a failure until ctx ends or this node no longer leads it.
func (s *SlotMover) inSource(ctx context.Context, mv fsm.Move, kind fsm.Kind) error {
	core := s.groups[mv.Source].Core()
	for {
		status, err := s.propose(ctx, core, fsm.Command{Kind: kind, Key: fsm.EncodeMove(mv)})
		switch {
		case err == nil && status == fsm.StatusSlots:
			return nil
		case err == nil:
			return fmt.Errorf("raft group %d refused the move's %s", mv.Source, kind)
		case !core.IsLeader():
			return err
		}
		if perr := pauseRetry(ctx); perr != nil {
			return fmt.Errorf("%w (last: %v)", perr, err)
		}
	}
}

// inTarget proposes cmd (an Import or an Abort) in the move's target group: here when this node
// leads it, else on its leader, as RAFT MOVECMD.
func (s *SlotMover) inTarget(ctx context.Context, cmd fsm.Command) (fsm.Status, error) {
	mv, err := fsm.DecodeMove(cmd.Key)
	if err != nil {
		return 0, err
	}
	target := s.groups[mv.Target]
	if target.Core().IsLeader() {
		return s.propose(ctx, target.Core(), cmd)
	}
	book := s.groups[0]
	id, addr, err := groupLeaderAddr(book, target, mv.Target)
	if err != nil {
		return 0, err
	}
	args := []string{"RAFT", "MOVECMD", "ABORT", string(cmd.Key)}
	if cmd.Kind == fsm.KindImportSlots {
		args = []string{"RAFT", "MOVECMD", "IMPORT", string(cmd.Key), strconv.FormatUint(uint64(cmd.Token), 10), string(cmd.Owner)}
	}
	_, err = book.peerAPI.call(ctx, addr, moveStepTimeout, args...)
	switch {
	case err == nil:
		return fsm.StatusSlots, nil
	case errors.As(err, new(*resp.ReplyError)) && strings.HasPrefix(err.Error(), "MOVEREFUSED"):
		return fsm.StatusConflict, nil
	}
	return 0, fmt.Errorf("raft group %d's leader %s at %s: %w", mv.Target, id, addr, err)
}

// probeLeaderWait bounds how long a move waits for its target group's leader before its freeze.
const probeLeaderWait = 10 * time.Second

// probeTarget checks, before a range is frozen, that the target group's leader, when it is
// another node, takes this node's RAFT MOVECMD (the peer user may lack raft|movecmd): a move
// that could not send its import would hold its range frozen until it is undone. A group
// electing a leader (a node just restarted, the balancer handing it over) is waited for, up to
// probeLeaderWait: nothing is frozen yet.
func (s *SlotMover) probeTarget(ctx context.Context, target int) error {
	t := s.groups[target]
	book := s.groups[0]
	var id, addr string
	for wait := time.Now().Add(probeLeaderWait); ; {
		if t.Core().IsLeader() {
			return nil
		}
		var err error
		if id, addr, err = groupLeaderAddr(book, t, target); err == nil {
			break
		}
		if time.Now().After(wait) {
			return err
		}
		if err := pauseRetry(ctx); err != nil {
			return err
		}
	}
	if _, err := book.peerAPI.call(ctx, addr, moveStepTimeout, "RAFT", "MOVECMD", "PROBE"); err != nil {
		return fmt.Errorf("raft group %d's leader %s at %s does not take this node's moves (the peer user needs raft|movecmd): %w", target, id, addr, err)
	}
	return nil
}

// propose replicates one move command in the group core serves, which this node leads.
func (s *SlotMover) propose(ctx context.Context, core *raftnode.Replica, cmd fsm.Command) (fsm.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, moveStepTimeout)
	defer cancel()
	res, err := core.Exec(ctx, nil, func(node.View) []fsm.Command { return []fsm.Command{cmd} }, nil)
	if err != nil {
		return 0, err
	}
	return res[0].Status, nil
}

// newMoveID is a random nonzero move ID.
func newMoveID() uint64 {
	var b [8]byte
	for {
		_, _ = rand.Read(b[:])
		if id := binary.LittleEndian.Uint64(b[:]); id != 0 {
			return id
		}
	}
}
