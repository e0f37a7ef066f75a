package fsm_test

import (
	"bytes"
	"flag"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

var (
	modelSeed  = flag.Uint64("model.seed", 0, "run TestModel with this seed only")
	modelSteps = flag.Int("model.steps", 0, "commands per TestModel run (default 4000, 1000 with -short)")
)

// The reference model: a plain map, with the semantics of DESIGN.md §2–§3 written out again
// without looking at machine.go.

type modelLock struct {
	owner    string
	token    uint64
	leaseRev uint64
	leaseMs  uint64
}

type model struct {
	locks     map[string]modelLock
	applied   uint64
	lastToken uint64 // the largest token handed out
}

func newModel() *model { return &model{locks: map[string]modelLock{}} }

// modelValid: which commands are well formed.
func modelValid(c fsm.Command) bool {
	switch c.Kind {
	case fsm.KindNoop:
		return true
	case fsm.KindGrant:
		// A grant requires the key free, any state, the holder it saw, or an owner.
		ok := c.Match.Kind == fsm.MatchAny || c.Match.Kind == fsm.MatchAbsent || c.Match.Kind == fsm.MatchToken || c.Match.Kind == fsm.MatchOwner
		return ok && len(c.Key) > 0
	case fsm.KindRelease:
		ok := c.Match.Kind == fsm.MatchAny || c.Match.Kind == fsm.MatchToken || c.Match.Kind == fsm.MatchOwner || c.Match.Kind == fsm.MatchLease
		return ok && len(c.Key) > 0
	case fsm.KindRenew:
		ok := c.Match.Kind == fsm.MatchAny || c.Match.Kind == fsm.MatchToken || c.Match.Kind == fsm.MatchOwner || c.Match.Kind == fsm.MatchLease
		return ok && len(c.Key) > 0 && c.LeaseMs > 0
	case fsm.KindExpire:
		return len(c.Key) > 0 && c.Token != 0
	default:
		return false
	}
}

// guard: does a Release or Renew apply to the key's state?
func (m *model) guard(key string, mt fsm.Match, leaseRev uint64) (modelLock, bool) {
	cur, held := m.locks[key]
	if !held {
		return cur, false
	}
	switch mt.Kind {
	case fsm.MatchAny:
		return cur, true
	case fsm.MatchToken:
		return cur, cur.token == uint64(mt.Token)
	case fsm.MatchOwner:
		return cur, cur.owner == string(mt.Owner)
	case fsm.MatchLease:
		return cur, cur.token == uint64(mt.Token) && cur.leaseRev == leaseRev
	}
	return cur, false
}

func (m *model) apply(index uint64, c fsm.Command) fsm.Result {
	if index > m.applied {
		m.applied = index
	}
	if !modelValid(c) {
		return fsm.Result{Status: fsm.StatusNoop}
	}
	key := string(c.Key)
	switch c.Kind {
	case fsm.KindGrant:
		cur, held := m.locks[key]
		allowed := false
		switch c.Match.Kind {
		case fsm.MatchAny:
			allowed = true
		case fsm.MatchAbsent:
			allowed = !held
		case fsm.MatchToken:
			allowed = held && cur.token == uint64(c.Match.Token)
		case fsm.MatchOwner:
			allowed = held && cur.owner == string(c.Match.Owner)
		}
		if !allowed {
			// Rejected: report who holds the key (0: nobody).
			return fsm.Result{Status: fsm.StatusGrantRejected, Token: fsm.Token(cur.token)}
		}
		// A new holder gets the next token, at least the entry's index; the same owner holding
		// the key already keeps its own.
		next := modelLock{owner: string(c.Owner), leaseRev: index, leaseMs: c.LeaseMs}
		if held && cur.owner == next.owner {
			next.token = cur.token
		} else {
			next.token = max(m.lastToken+1, index)
			m.lastToken = next.token
		}
		// KEEPTTL: keep the lease in force (none on a free key).
		if c.KeepLease {
			next.leaseRev, next.leaseMs = cur.leaseRev, cur.leaseMs
			if !held {
				next.leaseRev = index
			}
		}
		m.locks[key] = next
		r := fsm.Result{Status: fsm.StatusGranted, Token: fsm.Token(next.token), LeaseRev: next.leaseRev,
			LeaseMs: next.leaseMs, Existed: held}
		if held {
			r.PrevOwner = []byte(cur.owner)
		}
		return r
	case fsm.KindRelease:
		cur, ok := m.guard(key, c.Match, c.LeaseRev)
		if !ok {
			return fsm.Result{Status: fsm.StatusNotFound}
		}
		delete(m.locks, key)
		return fsm.Result{Status: fsm.StatusReleased, Token: fsm.Token(cur.token)}
	case fsm.KindRenew:
		cur, ok := m.guard(key, c.Match, c.LeaseRev)
		if !ok {
			return fsm.Result{Status: fsm.StatusNotFound}
		}
		cur.leaseRev, cur.leaseMs = index, c.LeaseMs
		m.locks[key] = cur
		return fsm.Result{Status: fsm.StatusRenewed, Token: fsm.Token(cur.token), LeaseRev: index, LeaseMs: c.LeaseMs}
	case fsm.KindExpire:
		// Only the exact lease the leader's timer was armed for, and only a lease.
		cur, held := m.locks[key]
		if held && cur.token == uint64(c.Token) && cur.leaseRev == c.LeaseRev && cur.leaseMs != 0 {
			delete(m.locks, key)
			return fsm.Result{Status: fsm.StatusExpired, Existed: true, Token: fsm.Token(cur.token)}
		}
		return fsm.Result{Status: fsm.StatusExpired}
	}
	return fsm.Result{Status: fsm.StatusNoop}
}

// applyEntry applies an entry of commands: in order, each seeing what the ones before it did;
// if one's guard fails (a grant not allowed, a release or renew that does not match), the
// model goes back to where it was before the entry, that command keeps its result and the
// others are aborted.
func (m *model) applyEntry(index uint64, cmds []fsm.Command) []fsm.Result {
	saved, savedToken := maps.Clone(m.locks), m.lastToken
	out := make([]fsm.Result, len(cmds))
	for i, c := range cmds {
		out[i] = m.apply(index, c)
		if s := out[i].Status; s == fsm.StatusGrantRejected || s == fsm.StatusNotFound {
			m.locks, m.lastToken = saved, savedToken
			for j := range out {
				if j != i {
					out[j] = fsm.Result{Status: fsm.StatusAborted}
				}
			}
			break
		}
	}
	if index > m.applied {
		m.applied = index
	}
	return out
}

func (m *model) clone() *model {
	return &model{locks: maps.Clone(m.locks), applied: m.applied, lastToken: m.lastToken}
}

func (m *model) table() map[string]fsm.Lock {
	t := map[string]fsm.Lock{}
	for k, l := range m.locks {
		t[k] = fsm.Lock{Owner: []byte(l.owner), Token: fsm.Token(l.token), LeaseRev: l.leaseRev, LeaseMs: l.leaseMs}
	}
	return t
}

// matches reports whether m holds exactly the model's table. It is the cheap per-step check;
// cmp.Diff explains a mismatch.
func (m *model) matches(fm *fsm.Machine) bool {
	n := 0
	ok := true
	fm.Scan(func(key string, l fsm.Lock) bool {
		n++
		want, held := m.locks[key]
		ok = held && string(l.Owner) == want.owner && uint64(l.Token) == want.token &&
			l.LeaseRev == want.leaseRev && l.LeaseMs == want.leaseMs
		return ok
	})
	return ok && n == len(m.locks)
}

// sameResult is cmpResults(got, want) == "" without the cost of cmp on every step.
func sameResult(got, want fsm.Result) bool {
	return got.Status == want.Status && got.Token == want.Token && got.LeaseRev == want.LeaseRev &&
		got.LeaseMs == want.LeaseMs && got.Existed == want.Existed && bytes.Equal(got.PrevOwner, want.PrevOwner)
}

// generator makes random commands over a small key space, so guards collide often. It peeks at
// the model to aim some guards at the current holder and remembers old tokens and lease revisions
// to send stale ones.
type generator struct {
	rng    *rand.Rand
	model  *model
	keys   []string
	owners []string
	tokens []uint64 // every token and lease rev seen, for stale guards
	revs   []uint64
}

func (g *generator) pick(s []string) string { return s[g.rng.IntN(len(s))] }

func (g *generator) stale(s []uint64) uint64 {
	if len(s) == 0 {
		return 1 + g.rng.Uint64N(10)
	}
	return s[g.rng.IntN(len(s))]
}

// token returns a token for a guard on key: mostly the current one, else a stale or made-up one.
func (g *generator) token(key string) uint64 {
	cur, held := g.model.locks[key]
	switch n := g.rng.IntN(20); {
	case held && n < 11:
		return cur.token
	case n < 16:
		return g.stale(g.tokens)
	case n < 19:
		return 1 + g.rng.Uint64N(g.model.applied+1)
	default:
		return math.MaxUint64
	}
}

func (g *generator) leaseRev(key string) uint64 {
	cur, held := g.model.locks[key]
	switch n := g.rng.IntN(20); {
	case held && n < 12:
		return cur.leaseRev
	case n < 17:
		return g.stale(g.revs)
	default:
		return g.rng.Uint64N(g.model.applied + 2)
	}
}

func (g *generator) owner(key string) string {
	if cur, held := g.model.locks[key]; held && g.rng.IntN(2) == 0 {
		return cur.owner
	}
	return g.pick(g.owners)
}

func (g *generator) lease() uint64 {
	return []uint64{0, 1, 1000, 30000, math.MaxUint64}[g.rng.IntN(5)]
}

// releaseMatch is a guard for Release or Renew.
func (g *generator) releaseMatch(key string) fsm.Match {
	switch g.rng.IntN(10) {
	case 0, 1:
		return matchAny
	case 2, 3, 4, 5:
		return byToken(fsm.Token(g.token(key)))
	default:
		return byOwner(g.owner(key))
	}
}

func (g *generator) next() fsm.Command {
	key := g.pick(g.keys)
	switch n := g.rng.IntN(100); {
	case n < 32:
		var mt fsm.Match
		switch g.rng.IntN(3) {
		case 0:
			mt = matchAny
		case 1:
			mt = matchAbsent
		default:
			mt = byToken(fsm.Token(g.token(key)))
		}
		c := grant(key, g.owner(key), g.lease(), mt)
		c.KeepLease = g.rng.IntN(5) == 0
		return c
	case n < 52:
		return release(key, g.releaseMatch(key))
	case n < 67:
		return renew(key, g.releaseMatch(key), []uint64{1, 1000, math.MaxUint64}[g.rng.IntN(3)])
	case n < 90:
		return expire(key, fsm.Token(g.token(key)), g.leaseRev(key))
	case n < 95:
		return noop()
	default:
		bad := invalidCommands()
		c := bad[g.rng.IntN(len(bad))]
		if len(c.Key) > 0 {
			c.Key = []byte(key)
		}
		return c
	}
}

// observe records the tokens and lease revisions a result revealed.
func (g *generator) observe(r fsm.Result) {
	if r.Token != 0 {
		g.tokens = append(g.tokens, uint64(r.Token))
	}
	if r.LeaseRev != 0 {
		g.revs = append(g.revs, r.LeaseRev)
	}
}

// viaLog passes cmds through the codec, as a log entry does, a single command half the time in
// the format of older binaries; an entry with an invalid command, which DecodeEntry rejects, is
// applied as it is (ApplyEntry must treat the invalid command as a no-op).
func viaLog(t *testing.T, rng *rand.Rand, cmds []fsm.Command) []fsm.Command {
	t.Helper()
	valid := true
	for _, c := range cmds {
		valid = valid && c.Validate() == nil
	}
	enc := encode(cmds...)
	if len(cmds) == 1 && rng.IntN(2) == 0 {
		// As an older binary wrote it: a table key without its database byte, database 0's.
		switch c := cmds[0]; {
		case c.Kind != fsm.KindGrant && c.Kind != fsm.KindRelease && c.Kind != fsm.KindRenew && c.Kind != fsm.KindExpire:
			enc = encodeV1(c) // no table key to move
		case len(c.Key) > 1 && c.Key[0] == 0:
			c.Key = c.Key[1:]
			enc = encodeV1(c)
		}
	}
	d, err := fsm.DecodeEntry(nil, enc)
	if (err == nil) != valid {
		t.Fatalf("DecodeEntry(EncodeEntry(%+v)) error = %v, but all valid = %v", cmds, err, valid)
	}
	if err != nil {
		return cmds
	}
	return d
}

// entry is one log entry of the model run: the commands of one request, or an index raft used
// for itself.
type entry struct {
	index   uint64
	advance bool // raft's own entry: Advance, no command
	cmds    []fsm.Command
	results []fsm.Result // A's results
}

// nextEntry makes the commands of one entry: mostly one, sometimes several, each aimed at the
// state the ones before it leave (so some depend on them: a grant, then its release).
func (g *generator) nextEntry(index uint64) []fsm.Command {
	n := 1
	if g.rng.IntN(4) == 0 {
		n = 2 + g.rng.IntN(4)
	}
	if n == 1 {
		return []fsm.Command{g.next()}
	}
	ref := g.model
	defer func() { g.model = ref }()
	g.model = ref.clone()
	cmds := make([]fsm.Command, n)
	for i := range cmds {
		cmds[i] = g.next()
		g.model.apply(index, cmds[i])
	}
	return cmds
}

// pendingSnapshot is a snapshot taken of A at one step and serialized some steps later, while A
// went on applying (raft persists snapshots concurrently with Apply).
type pendingSnapshot struct {
	s         *fsm.Snapshot
	table     map[string]fsm.Lock
	applied   uint64
	lastToken fsm.Token
	at        int // step at which it is serialized and restored into B
}

// TestModel applies random commands to the machine A and to the reference model and compares
// every result and the table after every step. At random points it snapshots A, serializes the
// snapshot some steps later, restores it into B and replays the entries after the snapshot, as a
// raft follower does; from then on B applies every entry too and must produce A's results. At the
// end A, B and the model hold the same table and A and B write the same snapshot bytes.
func TestModel(t *testing.T) {
	steps := 4000
	if testing.Short() {
		steps = 1000
	}
	if *modelSteps > 0 {
		steps = *modelSteps
	}
	seeds := []uint64{1, 2, 3, 4, 5, 6, 7, 8}
	if *modelSeed != 0 {
		seeds = []uint64{*modelSeed}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			runModel(t, seed, steps)
		})
	}
}

func runModel(t *testing.T, seed uint64, steps int) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	ref := newModel()
	g := &generator{
		rng:    rng,
		model:  ref,
		keys:   []string{"a", "b", "c", "\x00k", "k\r\n"},
		owners: []string{"", "o1", "o2", "o3"},
	}
	a := fsm.New()
	var b *fsm.Machine // nil until the first restore
	var pending *pendingSnapshot
	var log []entry
	var maxToken fsm.Token // largest token handed to a new holder so far
	restores := 0
	stats := map[string]int{}               // outcomes seen, to check the generator reaches them all
	forced := steps/4 + rng.IntN(steps/4+1) // at least one restore, in the middle of the run

	idx := uint64(0)
	for step := 0; step < steps; step++ {
		fail := func(format string, args ...any) {
			t.Helper()
			t.Fatalf("seed %d, step %d, index %d: %s", seed, step, idx, fmt.Sprintf(format, args...))
		}

		// Now and then an index raft used for itself.
		if rng.IntN(20) == 0 {
			idx++
			a.Advance(idx)
			ref.applied = idx
			if b != nil {
				b.Advance(idx)
			}
			log = append(log, entry{index: idx, advance: true})
		}

		idx++
		cmds := g.nextEntry(idx)
		type before struct {
			lock fsm.Lock
			held bool
		}
		prev := make([]before, len(cmds))
		for i, c := range cmds {
			prev[i].lock, prev[i].held = a.Get(c.Key)
		}
		snapBefore := a.Snapshot()
		want := ref.applyEntry(idx, cmds)
		got := a.ApplyEntry(nil, idx, viaLog(t, rng, cmds))
		for i := range cmds {
			if !sameResult(got[i], want[i]) {
				fail("A.ApplyEntry(nil, %+v) result %d (-got +model):\n%s", cmds, i, cmpResults(got[i], want[i]))
			}
		}
		if !ref.matches(a) {
			fail("A's table after %+v (-got +model):\n%s", cmds, diffTables(table(a), ref.table()))
		}
		if a.Applied() != idx || a.Len() != len(ref.locks) || uint64(a.LastToken()) != ref.lastToken {
			fail("A.Applied() = %d, A.Len() = %d, A.LastToken() = %d; want %d, %d, %d", a.Applied(), a.Len(),
				a.LastToken(), idx, len(ref.locks), ref.lastToken)
		}
		aborted := len(cmds) > 1 && got[0].Status == fsm.StatusAborted || len(cmds) > 1 && got[0].GuardFailed()
		if aborted {
			// Nothing of the entry applied: the machine writes the snapshot it wrote before,
			// but for the applied index.
			ref := restore(t, writeSnapshot(t, snapBefore))
			ref.Advance(idx)
			if !bytes.Equal(snapshotBytes(t, a), snapshotBytes(t, ref)) {
				fail("aborted entry %+v changed the machine", cmds)
			}
		}
		if b != nil {
			gotB := b.ApplyEntry(nil, idx, viaLog(t, rng, cmds))
			for i := range cmds {
				if !sameResult(gotB[i], got[i]) {
					fail("B.ApplyEntry(nil, %+v) result %d (-B +A):\n%s", cmds, i, cmpResults(gotB[i], got[i]))
				}
			}
		}
		for _, r := range got {
			g.observe(r)
		}
		log = append(log, entry{index: idx, cmds: cmds, results: got})
		switch {
		case aborted:
			stats["entry-aborted"]++
		case len(cmds) > 1:
			stats["entry-applied"]++
		}

		// Fencing: a token handed to a new holder is above every token handed out before. The
		// commands of an aborted entry handed out nothing.
		for i, r := range got {
			stats[outcome(prev[i].lock, prev[i].held, r)]++
			if r.Status != fsm.StatusGranted {
				continue
			}
			// Within an entry, compare with the key as the entry's earlier commands left it.
			wasHeld, prevLock := prev[i].held, prev[i].lock
			for j := 0; j < i; j++ {
				if string(cmds[j].Key) == string(cmds[i].Key) {
					wasHeld, prevLock = keyAfter(got[j], cmds[j], wasHeld, prevLock)
				}
			}
			sameHolder := wasHeld && r.Token == prevLock.Token
			if !sameHolder {
				if r.Token <= maxToken {
					fail("new holder of %q got token %d, not above the earlier token %d", cmds[i].Key, r.Token, maxToken)
				}
				maxToken = r.Token
			} else if !bytes.Equal(prevLock.Owner, cmds[i].Owner) {
				fail("key %q changed owner from %q to %q but kept token %d", cmds[i].Key, prevLock.Owner, cmds[i].Owner, r.Token)
			}
		}
		a.Scan(func(key string, l fsm.Lock) bool {
			if l.Token > a.LastToken() || l.LeaseRev > idx || l.Token == 0 {
				fail("lock %q = %+v does not fit applied index %d and last token %d", key, l, idx, a.LastToken())
			}
			return true
		})

		// Snapshots: take one now and then, serialize and restore it into B a little later.
		if pending == nil && (rng.IntN(steps/6+1) == 0 || step == forced) {
			pending = &pendingSnapshot{s: a.Snapshot(), table: table(a), applied: a.Applied(), lastToken: a.LastToken(), at: step + rng.IntN(40)}
		}
		if pending != nil && step >= pending.at {
			b = restoreAndReplay(t, rng, pending, log)
			pending = nil
			restores++
		}
	}

	if restores == 0 {
		t.Fatalf("seed %d: no restore happened, fix the test", seed)
	}
	if diff := diffTables(table(b), table(a)); diff != "" {
		t.Fatalf("seed %d: final tables (-B +A):\n%s", seed, diff)
	}
	if b.Applied() != a.Applied() || b.LastToken() != a.LastToken() {
		t.Fatalf("seed %d: B.Applied() = %d, B.LastToken() = %d; A's %d, %d", seed, b.Applied(), b.LastToken(), a.Applied(), a.LastToken())
	}
	if sa, sb := snapshotBytes(t, a), snapshotBytes(t, b); !bytes.Equal(sa, sb) {
		t.Fatalf("seed %d: final snapshot bytes differ:\nA %x\nB %x", seed, sa, sb)
	}
	// Every outcome of every guard was exercised.
	for _, o := range []string{"noop", "granted-new", "granted-replaced", "granted-same-holder", "grant-rejected",
		"released", "not-found", "renewed", "expired-removed", "expired-no-op", "aborted", "entry-applied", "entry-aborted"} {
		if stats[o] == 0 {
			t.Errorf("seed %d: no %s result in %d steps, the generator needs tuning", seed, o, steps)
		}
	}
	t.Logf("seed %d: %d steps, %d restores, %d locks at the end, results %v", seed, steps, restores, a.Len(), stats)
}

// keyAfter is what key held after the command c of the same entry had result r, given what it
// held before c.
func keyAfter(r fsm.Result, c fsm.Command, held bool, l fsm.Lock) (bool, fsm.Lock) {
	switch r.Status {
	case fsm.StatusGranted:
		return true, fsm.Lock{Owner: c.Owner, Token: r.Token, LeaseRev: r.LeaseRev, LeaseMs: r.LeaseMs}
	case fsm.StatusReleased:
		return false, fsm.Lock{}
	case fsm.StatusExpired:
		if r.Existed {
			return false, fsm.Lock{}
		}
	case fsm.StatusRenewed:
		l.LeaseRev, l.LeaseMs = r.LeaseRev, r.LeaseMs
	}
	return held, l
}

// outcome names a result finely enough to tell the guard outcomes apart.
func outcome(prev fsm.Lock, wasHeld bool, r fsm.Result) string {
	switch {
	case r.Status == fsm.StatusGranted && !wasHeld:
		return "granted-new"
	case r.Status == fsm.StatusGranted && r.Token == prev.Token:
		return "granted-same-holder"
	case r.Status == fsm.StatusGranted:
		return "granted-replaced"
	case r.Status == fsm.StatusExpired && r.Existed:
		return "expired-removed"
	case r.Status == fsm.StatusExpired:
		return "expired-no-op"
	}
	return r.Status.String()
}

// restoreAndReplay serializes a pending snapshot, restores it into a new machine, checks it holds
// the table the snapshot was taken of, and replays the log entries after the snapshot, checking
// each result against the one A produced.
func restoreAndReplay(t *testing.T, rng *rand.Rand, p *pendingSnapshot, log []entry) *fsm.Machine {
	t.Helper()
	b := restore(t, writeSnapshot(t, p.s))
	if diff := diffTables(table(b), p.table); diff != "" {
		t.Fatalf("snapshot taken at %d, serialized later, restored a different table (-got +want):\n%s", p.applied, diff)
	}
	if b.Applied() != p.applied || b.LastToken() != p.lastToken {
		t.Fatalf("restored Applied() = %d, LastToken() = %d; want %d, %d", b.Applied(), b.LastToken(), p.applied, p.lastToken)
	}
	for _, e := range log {
		if e.index <= p.applied {
			continue
		}
		if e.advance {
			b.Advance(e.index)
			continue
		}
		got := b.ApplyEntry(nil, e.index, viaLog(t, rng, e.cmds))
		for i := range got {
			if diff := cmpResults(got[i], e.results[i]); diff != "" {
				t.Fatalf("replay after restore from %d: ApplyEntry(%d, %+v) result %d (-B +A):\n%s", p.applied, e.index, e.cmds, i, diff)
			}
		}
	}
	return b
}
