package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/google/go-cmp/cmp"

	"github.com/raftlock/raftlock/resp"
)

// Every checker is shown to fail on a deliberately broken history (and to pass the same
// history unbroken), so a green chaos run means the checks ran, not that they cannot fire.

const ms = int64(time.Millisecond)

func grant(c int, tok uint64, ttl, inv, comp int64) Op {
	return Op{Client: c, Key: "k", Kind: Acquire, Via: "lock", Owner: "o" + string(rune('a'+c)), TTL: ttl, Token: tok,
		Invoke: inv * ms, Complete: comp * ms, Outcome: OK, Granted: true}
}

func read(c int, inv, comp int64, owner string, tok uint64) Op {
	return Op{Client: c, Key: "k", Kind: Read, Invoke: inv * ms, Complete: comp * ms, Outcome: OK,
		Free: owner == "", RdOwner: owner, RdToken: tok}
}

func linResult(ops []Op, clk *clockTimeline) porcupine.CheckResult {
	return checkLinearizable(ops, clk, 10*time.Second)[0].Result
}

func TestLinearizabilityChecker(t *testing.T) {
	// node 0's lease clock jumped 300 ms forward around t=500ms
	jump := newClockTimeline([]ClockEvent{{Node: 0, Invoke: 500 * ms, Complete: 501 * ms, Offset: 300 * ms}})
	setNX := func(c int, ttl, inv, comp int64) Op {
		op := grant(c, 0, ttl, inv, comp)
		op.Via = "set"
		return op
	}
	cases := []struct {
		name string
		ops  []Op
		clk  *clockTimeline
		want porcupine.CheckResult
	}{
		{"two holders within the lease", []Op{grant(0, 5, 1000, 0, 1), grant(1, 7, 1000, 500, 600)}, nil, porcupine.Illegal},
		{"second grant after the lease", []Op{grant(0, 5, 1000, 0, 1), grant(1, 7, 1000, 1100, 1200)}, nil, porcupine.Ok},
		{"expiry earlier than invoke+ttl", []Op{grant(0, 5, 1000, 100, 101), grant(1, 7, 1000, 900, 1050)}, nil, porcupine.Illegal},
		{"expiry early by a forward clock jump", []Op{grant(0, 5, 1000, 100, 101), grant(1, 7, 1000, 900, 1050)}, jump, porcupine.Ok},
		{"expiry earlier than the clock jump explains", []Op{grant(0, 5, 1000, 100, 101), grant(1, 7, 1000, 700, 750)}, jump, porcupine.Illegal},
		{"a jump after the lease ended does not excuse it", []Op{grant(0, 5, 1000, 600, 601), grant(1, 7, 1000, 1300, 1400)}, jump, porcupine.Illegal},
		{"token not increasing", []Op{grant(0, 5, 100, 0, 1), grant(1, 4, 100, 500, 501)}, nil, porcupine.Illegal},
		{"read free while held", []Op{grant(0, 5, 1000, 0, 1), read(1, 10, 11, "", 0)}, nil, porcupine.Illegal},
		{"read wrong token", []Op{grant(0, 5, 1000, 0, 1), read(1, 10, 11, "oa", 6)}, nil, porcupine.Illegal},
		{"renew after release", []Op{grant(0, 5, 1000, 0, 1),
			{Client: 0, Key: "k", Kind: Release, Owner: "oa", Token: 5, Invoke: 10 * ms, Complete: 11 * ms, Outcome: OK, Success: true},
			{Client: 0, Key: "k", Kind: Renew, Owner: "oa", Token: 5, TTL: 1000, Invoke: 20 * ms, Complete: 21 * ms, Outcome: OK, Success: true}}, nil, porcupine.Illegal},
		{"renewed lease ended early", []Op{grant(0, 5, 1000, 0, 1),
			{Client: 0, Key: "k", Kind: Renew, Owner: "oa", Token: 5, TTL: 1000, Invoke: 800 * ms, Complete: 801 * ms, Outcome: OK, Success: true},
			grant(1, 7, 1000, 1200, 1300)}, nil, porcupine.Illegal},
		{"unknown grant seen by a read, then released by the leader", []Op{
			{Client: 0, Key: "k", Kind: Acquire, Owner: "oa", TTL: 10000, Invoke: 0, Complete: never, Outcome: Unknown},
			read(1, 10, 11, "oa", 3), read(1, 20, 21, "", 0)}, nil, porcupine.Ok},
		{"nil while free", []Op{{Client: 0, Key: "k", Kind: Acquire, Owner: "oa", TTL: 1000, Invoke: 0, Complete: ms, Outcome: OK}}, nil, porcupine.Illegal},
		{"SET NX granted, its token read after", []Op{setNX(0, 1000, 0, 1), read(0, 0, 2, "oa", 9), grant(1, 12, 1000, 1100, 1101)}, nil, porcupine.Ok},
		{"SET NX granted while held", []Op{grant(1, 7, 1000, 0, 1), setNX(0, 1000, 10, 11)}, nil, porcupine.Illegal},
		{"SET NX token lower than an earlier grant's", []Op{grant(1, 7, 100, 0, 1), setNX(0, 1000, 200, 201), read(0, 200, 202, "oa", 6)}, nil, porcupine.Illegal},
	}
	for _, c := range cases {
		if got := linResult(c.ops, c.clk); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestClockSlack(t *testing.T) {
	clk := newClockTimeline([]ClockEvent{
		{Node: 0, Invoke: 100, Complete: 110, Offset: 50},   // forward 50
		{Node: 0, Invoke: 200, Complete: 210, Offset: -30},  // back 80
		{Node: 0, Invoke: 300, Complete: 310, Offset: 20},   // forward 50
		{Node: 1, Invoke: 400, Complete: never, Offset: 70}, // forward 70, reply lost
	})
	for _, c := range []struct{ from, to, want int64 }{
		{0, 99, 0}, {0, 105, 50}, {150, 250, 0}, {150, 350, 50}, {0, 350, 50}, {250, 1000, 70}, {500, 600, 70},
	} {
		if got := clk.slack(c.from, c.to); got != c.want {
			t.Errorf("slack(%d, %d) = %d, want %d", c.from, c.to, got, c.want)
		}
	}
	if (*clockTimeline)(nil).slack(0, 1) != 0 {
		t.Error("no clock events: slack must be 0")
	}
}

func TestFencingChecker(t *testing.T) {
	if bad := checkFencing([]Op{grant(0, 5, 1000, 0, 1), grant(1, 9, 1000, 2, 3)}, nil); len(bad) != 0 {
		t.Errorf("good history flagged: %v", bad)
	}
	if bad := checkFencing([]Op{grant(0, 9, 1000, 0, 1), grant(1, 7, 1000, 2, 3)}, nil); len(bad) != 1 {
		t.Errorf("decreasing tokens in real-time order: got %v", bad)
	}
	a, b := grant(0, 9, 1000, 0, 1), grant(1, 9, 1000, 0, 1)
	b.Key = "other"
	if bad := checkFencing([]Op{a, b}, nil); len(bad) == 0 {
		t.Error("duplicate token across keys not flagged")
	}
	// concurrent grants may come in either order
	if bad := checkFencing([]Op{grant(0, 9, 1000, 0, 5), grant(1, 7, 1000, 2, 3)}, nil); len(bad) != 0 {
		t.Errorf("concurrent grants flagged: %v", bad)
	}
}

func TestResourceChecker(t *testing.T) {
	acc := func(c int, tok uint64, at, validUntil, based int64, accepted bool) Access {
		a := Access{Client: c, Key: "k", Token: tok, Start: at - 1, At: at, ValidUntil: validUntil, Based: based, Accepted: accepted}
		if !accepted {
			a.Rejected = "write"
		}
		return a
	}
	good := []Access{acc(0, 5, 1, 10, 0, true), acc(0, 5, 11, 10, 1, false), acc(1, 7, 12, 20, 1, true)}
	if bad := checkResource(good, nil); len(bad) != 0 {
		t.Errorf("good accesses flagged: %v", bad)
	}
	for name, h := range map[string][]Access{
		"fenced off inside its lease": {acc(1, 7, 1, 10, 0, true), acc(0, 5, 2, 10, 0, false)},
		"accepted out of order":       {acc(1, 7, 1, 10, 0, true), acc(0, 5, 2, 10, 1, true)},
		"lost update":                 {acc(0, 5, 1, 10, 0, true), acc(1, 7, 2, 10, 0, true)},
	} {
		if got := checkResource(h, nil); len(got) != 1 {
			t.Errorf("%s: got %v, want one violation", name, got)
		}
	}
	// a forward clock jump excuses a fence-off by exactly its size
	jump := newClockTimeline([]ClockEvent{{Node: 2, Invoke: 0, Complete: 0, Offset: 5}})
	early := []Access{acc(1, 7, 1, 20, 0, true), acc(0, 5, 6, 10, 0, false)}
	if got := checkResource(early, jump); len(got) != 0 {
		t.Errorf("fence-off within the clock slack flagged: %v", got)
	}
	early[1].At = 4
	if got := checkResource(early, jump); len(got) != 1 {
		t.Errorf("fence-off beyond the clock slack: got %v", got)
	}

	// the in-harness resource itself fences off an older token, on reads as on writes
	r := newRecorder(1)
	if _, ok := r.fencedRead("k", 7); !ok {
		t.Fatal("fresh resource refused a read")
	}
	if _, ok := r.fencedRead("k", 5); ok {
		t.Error("resource let an older token read")
	}
	if !r.fencedWrite(Access{Key: "k", Token: 7, ValidUntil: 1 << 62}) || r.fencedWrite(Access{Key: "k", Token: 5, ValidUntil: 1 << 62}) {
		t.Error("resource accepted a lower token")
	}
	if got := checkResource(r.h.Fenced, nil); len(got) != 1 {
		t.Errorf("recorded fence-off inside the lease: got %v", got)
	}
}

func TestUnfencedOverlap(t *testing.T) {
	span := func(tok uint64, start, at int64) Access {
		return Access{Key: "k", Token: tok, Start: start, At: at, Accepted: true}
	}
	if n, _ := unfencedOverlap([]Access{span(5, 0, 10), span(7, 20, 30), span(7, 25, 40)}); n != 0 {
		t.Errorf("disjoint holders: %d overlaps", n)
	}
	paused := span(5, 0, 100)
	paused.Paused = true
	if n, np := unfencedOverlap([]Access{paused, span(7, 20, 30), span(9, 200, 300)}); n != 2 || np != 0 {
		t.Errorf("a paused holder over a newer one: %d overlaps (%d without a pause), want 2 (0)", n, np)
	}
	if n, np := unfencedOverlap([]Access{span(5, 0, 100), span(7, 20, 30)}); n != 2 || np != 2 {
		t.Errorf("a holder working past its lease over a newer one: %d overlaps (%d without a pause), want 2 (2)", n, np)
	}
	stale := span(5, 50, 60)
	stale.Stale = true
	if n, np := unfencedOverlap([]Access{span(7, 20, 30), stale}); n != 1 || np != 1 {
		t.Errorf("a stale write after a newer holder's: %d overlaps (%d without a pause), want 1 (1)", n, np)
	}
	r := newRecorder(1)
	r.unfencedWrite(Access{Key: "k", Token: 7, Start: r.now()})
	time.Sleep(time.Millisecond)
	r.unfencedWrite(Access{Key: "k", Token: 5, Start: r.now()})
	if n, _ := unfencedOverlap(r.h.Unfenced); n != 1 {
		t.Errorf("the unfenced resource took a stale write unnoticed: %d overlaps", n)
	}
}

func TestDurableChecker(t *testing.T) {
	g := Op{Client: 9, Key: "d9.0", Kind: Acquire, Owner: "c9-1", TTL: 3600000, Token: 12, Outcome: OK, Granted: true}
	rel := Op{Client: 9, Key: "d9.0", Kind: Release, Owner: "c9-1", Token: 12, Outcome: OK, Success: true}
	held := finalRead{Owner: "c9-1", Token: 12}
	free := finalRead{Free: true}
	unknown := func(op Op) Op { op.Outcome = Unknown; return op }
	failed := func(op Op) Op { op.Outcome, op.Granted, op.Token = Fail, false, 0; return op }
	cases := []struct {
		name  string
		ops   []Op
		final []finalRead // per node
		bad   int
	}{
		{"granted and kept", []Op{g}, []finalRead{held, held}, 0},
		{"granted, lost on one node", []Op{g}, []finalRead{held, free}, 1},
		{"granted, another token", []Op{g}, []finalRead{{Owner: "c9-1", Token: 13}, held}, 1},
		{"released", []Op{g, rel}, []finalRead{free, free}, 0},
		{"released, still held", []Op{g, rel}, []finalRead{held, free}, 1},
		{"release unknown", []Op{g, unknown(rel)}, []finalRead{held, held}, 0},
		{"grant unknown, not granted", []Op{unknown(g)}, []finalRead{free, free}, 0},
		{"grant failed (TRYAGAIN), yet held", []Op{failed(g)}, []finalRead{held, held}, 2},
	}
	for _, c := range cases {
		final := map[string]map[string]finalRead{}
		for i, f := range c.final {
			final[string(rune('a'+i))] = map[string]finalRead{"d9.0": f}
		}
		if got := checkDurable(c.ops, final); len(got) != c.bad {
			t.Errorf("%s: got %v, want %d violations", c.name, got, c.bad)
		}
	}
}

func TestDigestsAgree(t *testing.T) {
	if !digestsAgree([]string{"n1:40/abc", "n2:40/abc", "n3:40/abc"}) {
		t.Error("equal digests disagree")
	}
	if digestsAgree([]string{"n1:40/abc", "n2:40/abd", "n3:40/abc"}) {
		t.Error("a different table agrees")
	}
	if digestsAgree([]string{"n1:40/abc", "n2:39/abc"}) {
		t.Error("a node behind agrees")
	}
}

// fakeServer answers every command with reply until the test ends.
func fakeServer(t *testing.T, reply string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := resp.NewReader(c, resp.Limits{})
				for {
					if _, err := r.ReadCommand(); err != nil {
						return
					}
					c.Write([]byte(reply))
				}
			}()
		}
	}()
	return ln.Addr().String()
}

func TestRecoveryChecker(t *testing.T) {
	down := fakeServer(t, "-CLUSTERDOWN no leader elected yet; retry shortly\r\n")
	if err := freshAcquire([]string{down}, time.Now().Add(500*time.Millisecond)); err == nil {
		t.Error("recovery passed against a cluster that never grants")
	}
	up := fakeServer(t, ":42\r\n")
	if err := freshAcquire([]string{down, up}, time.Now().Add(2*time.Second)); err != nil {
		t.Errorf("recovery failed against a node that grants: %v", err)
	}
}

func TestLogChecker(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "n1.log")
	os.WriteFile(p, []byte(`ok
panic: boom
==================
WARNING: DATA RACE
Read at 0x00c0000062e8 by goroutine 267:
  github.com/raftlock/raftlock/server.(*conn).watchLeader.func1()
      /work/main/server/forward.go:198 +0x18d
fatal error: concurrent map writes
`), 0o644)
	b, _ := os.ReadFile(p)
	p2 := filepath.Join(dir, "n2.log")
	os.WriteFile(p2, b, 0o644)
	got := checkLogs([]string{p, p2})
	if len(got) != 3 {
		t.Fatalf("got %v, want the panic, the race and the fatal error, each found twice", got)
	}
	if !strings.Contains(got[1], "server.(*conn).watchLeader.func1() forward.go:198") || !strings.Contains(got[1], "2 times") {
		t.Errorf("the race does not say where, or how often: %s", got[1])
	}
}

// TestFailureFolder forces a failing evaluation and checks the folder it leaves: the history,
// porcupine's visualization of the failing key, the violations, and the node logs.
func TestFailureFolder(t *testing.T) {
	root := t.TempDir()
	logPath := filepath.Join(root, "n1.log")
	os.WriteFile(logPath, []byte("started\n"), 0o644)
	os.MkdirAll(filepath.Join(root, "n1", "data"), 0o755)
	h := History{Seed: 7, Ops: []Op{grant(0, 5, 1000, 0, 1), grant(1, 7, 1000, 500, 600),
		{Client: 2, Key: "k", Kind: Acquire, Owner: "oc", TTL: 1000, Invoke: 0, Complete: never, Outcome: Unknown}}}
	res, bad, clk := evaluate(h, observed{logs: []string{logPath}}, 10*time.Second)
	if len(res.Violations) != 1 || len(bad) != 1 {
		t.Fatalf("violations %v, failing keys %d: want the two holders of k found", res.Violations, len(bad))
	}
	if err := writeFailure(root, h, bad, clk, res.Violations); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"history.json", "violations.txt", "lin-k.html", "n1.log"} {
		if fi, err := os.Stat(filepath.Join(root, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s missing or empty: %v", f, err)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(root, "violations.txt")); !strings.Contains(string(b), "key k") {
		t.Errorf("violations.txt = %q", b)
	}
	if _, err := os.Stat(filepath.Join(root, "n1")); !os.IsNotExist(err) {
		t.Errorf("the node's data directory was kept: %v", err)
	}
	if !strings.Contains(res.Summary(), "violations=1") {
		t.Errorf("summary %q", res.Summary())
	}
}

func TestProcSource(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skip("no 127.0.0.2 on this machine")
	}
	defer ln.Close()
	out, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	in, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	// this process owns the dialing socket: it is found under our own PID
	if i, ok := procSource(in, map[int]int{3: os.Getpid()}); !ok || i != 3 {
		t.Errorf("procSource = %d, %v; want 3, true", i, ok)
	}
	if _, ok := procSource(in, map[int]int{3: 1}); ok {
		t.Error("procSource found the socket in another process")
	}
}

// TestCutsNest: two faults cutting the same link (mixed mode) each heal only their own cut.
func TestCutsNest(t *testing.T) {
	nw := newNetwork()
	healA := nw.cut(between([]int{0}, []int{1, 2}))
	healB := nw.cut(between([]int{0, 1}, []int{2}))
	blocked := func(src, dst int) bool {
		nw.mu.Lock()
		defer nw.mu.Unlock()
		return nw.blocked[[2]int{src, dst}] > 0
	}
	healA()
	healA() // idempotent
	if !blocked(0, 2) || !blocked(2, 1) || blocked(0, 1) {
		t.Errorf("after healing the first cut: 0->2 %v, 2->1 %v, 0->1 %v; want true, true, false", blocked(0, 2), blocked(2, 1), blocked(0, 1))
	}
	healB()
	if blocked(0, 2) || blocked(2, 1) {
		t.Error("links still cut after both faults healed")
	}
}

func TestAtomicityChecker(t *testing.T) {
	set := func(c int, group, value string, found int64) MultiOp {
		return MultiOp{Client: c, Node: "n1", Kind: MultiSet, Group: group, Value: value, Invoke: ms, Complete: 2 * ms, Outcome: OK, Found: found}
	}
	del := func(c int, group string, found int64) MultiOp {
		return MultiOp{Client: c, Node: "n1", Kind: MultiDel, Group: group, Invoke: 3 * ms, Complete: 4 * ms, Outcome: OK, Found: found}
	}
	mget := func(c int, group string, values ...string) MultiOp {
		return MultiOp{Client: c, Node: "n2", Kind: MultiRead, Group: group, Invoke: 5 * ms, Complete: 6 * ms, Outcome: OK, Values: values}
	}
	unknown := func(op MultiOp) MultiOp { op.Outcome, op.Err = Unknown, "i/o timeout"; return op }
	g0, g1 := groupName(0), groupName(1)
	all := func(v string) []string { return []string{v, v, v} }
	final := func(n2g0 []string) map[string]map[string][]string {
		return map[string]map[string][]string{
			"n1": {g0: all("w1-1"), g1: all("")},
			"n2": {g0: n2g0, g1: all("")},
		}
	}
	cases := []struct {
		name    string
		ops     []MultiOp
		final   map[string]map[string][]string
		partial int
		bad     int
	}{
		{"whole requests", []MultiOp{set(0, g0, "w0-1", 0), set(1, g0, "w1-1", 3), set(0, g1, "w0-2", 0), del(1, g1, 3),
			mget(0, g0, all("w1-1")...), mget(0, g1, all("")...)}, final(all("w1-1")), 0, 0},
		// an unknown outcome may have applied whole, or not at all
		{"unknown set, applied whole", []MultiOp{set(0, g0, "w0-1", 0), unknown(set(1, g0, "w1-1", 0))}, final(all("w1-1")), 0, 0},
		{"unknown set, applied partly", []MultiOp{set(0, g0, "w0-1", 0), unknown(set(1, g0, "w1-1", 0))},
			final([]string{"w1-1", "w1-1", "w0-1"}), 1, 1},
		{"a DEL applied partly, seen by a read", []MultiOp{set(1, g0, "w1-1", 0), unknown(del(0, g0, 0)), mget(2, g0, "", "w1-1", "")},
			final(all("w1-1")), 1, 1},
		{"a script saw a split group", []MultiOp{set(0, g0, "w0-1", 0), set(1, g0, "w1-1", 2)}, final(all("w1-1")), 1, 1},
		{"a DEL removed some of the keys", []MultiOp{set(1, g0, "w1-1", 0), del(0, g0, 1)}, final(all("")), 1, 1},
		{"a value nobody wrote", []MultiOp{set(1, g0, "w1-1", 0)}, final(all("zz")), 0, 1},
	}
	for _, c := range cases {
		got := checkAtomicity(c.ops, c.final, nil)
		if got.Partial != c.partial || len(got.Violations) != c.bad {
			t.Errorf("%s: got %d partial, violations %v; want %d partial, %d violations", c.name, got.Partial, got.Violations, c.partial, c.bad)
		}
	}
	got := checkAtomicity([]MultiOp{set(0, g0, "w0-1", 0), unknown(set(1, g0, "w1-1", 0))}, final([]string{"w1-1", "w1-1", "w0-1"}), nil)
	if want := "m{0}.c=w0-1"; len(got.Violations) != 1 || !strings.Contains(got.Violations[0], want) || !strings.Contains(got.Violations[0], "w1-1 on n1 at 0.001s -> unknown (i/o timeout) on 2 of 3 keys") {
		t.Errorf("the violation does not show the split group and the request: %v", got.Violations)
	}
	// a broken build finds many: the first are described, all are counted
	var ops []MultiOp
	for i := range 30 {
		ops = append(ops, set(0, g0, "w0-1", 0), mget(i, g0, "w0-1", "", ""))
	}
	if got := checkAtomicity(ops, nil, nil); got.Partial != 30 || len(got.Violations) != maxReported || got.Unreported != 30-maxReported {
		t.Errorf("30 split reads: %d partial, %d described, %d unreported", got.Partial, len(got.Violations), got.Unreported)
	}
}

// TestCollectionAtomicityChecker: a collection group (a hash, a sorted set and a list) holds the
// same values in its three keys; a request or DEL applied to some of them is found, by a read,
// by a request's own view, or in a node's table after healing.
func TestCollectionAtomicityChecker(t *testing.T) {
	add := func(kind string, c int, group, value string, sizes ...int64) MultiOp {
		return MultiOp{Client: c, Node: "n1", Kind: kind, Group: group, Value: value, Invoke: ms, Complete: 2 * ms, Outcome: OK, Sizes: sizes}
	}
	del := func(c int, group string, found int64) MultiOp {
		return MultiOp{Client: c, Node: "n1", Kind: MultiCollDel, Group: group, Invoke: 3 * ms, Complete: 4 * ms, Outcome: OK, Found: found}
	}
	read := func(c int, group string, sets ...[]string) MultiOp {
		return MultiOp{Client: c, Node: "n2", Kind: MultiCollRead, Group: group, Invoke: 5 * ms, Complete: 6 * ms, Outcome: OK, Sets: sets}
	}
	unknown := func(op MultiOp) MultiOp {
		op.Outcome, op.Err, op.Sizes, op.Found = Unknown, "i/o timeout", nil, 0
		return op
	}
	c0, c1 := collGroupName(0), collGroupName(1)
	v := func(vs ...string) []string { return vs }
	all := func(vs ...string) [][]string { return [][]string{vs, vs, vs} }
	two := []MultiOp{add(MultiCollSet, 0, c0, "w0-1", 0, 0, 0), add(MultiCollTx, 1, c0, "w1-1", 1, 1, 1)}
	final := func(n2c0 [][]string) map[string]map[string][][]string {
		return map[string]map[string][][]string{
			"n1": {c0: all("w0-1", "w1-1"), c1: all()},
			"n2": {c0: n2c0, c1: all()},
		}
	}
	cases := []struct {
		name    string
		ops     []MultiOp
		final   map[string]map[string][][]string
		partial int
		bad     int
	}{
		{"whole requests", append(two, read(2, c0, v("w0-1", "w1-1"), v("w0-1", "w1-1"), v("w1-1", "w0-1")), del(2, c1, 0)),
			final([][]string{v("w1-1", "w0-1"), v("w0-1", "w1-1"), v("w1-1", "w0-1")}), 0, 0},
		{"an unknown request, applied whole", []MultiOp{two[0], unknown(two[1])}, final(all("w0-1", "w1-1")), 0, 0},
		{"an unknown request, not applied", []MultiOp{two[0], unknown(two[1])},
			map[string]map[string][][]string{"n1": {c0: all("w0-1")}}, 0, 0},
		// the half-applied multi-type group: the hash and the sorted set have it, the list not
		{"an unknown request, applied to two of the three", []MultiOp{two[0], unknown(two[1])},
			final([][]string{v("w0-1", "w1-1"), v("w0-1", "w1-1"), v("w0-1")}), 1, 1},
		{"a read saw a request half applied", append(two, read(2, c0, v("w0-1", "w1-1"), v("w0-1"), v("w0-1"))), nil, 1, 1},
		{"a request saw the keys at different sizes", []MultiOp{two[0], add(MultiCollSet, 1, c0, "w1-1", 1, 1, 0)}, nil, 1, 1},
		{"a DEL removed some of the keys", append(two, del(2, c0, 2)), nil, 1, 1},
		{"a DEL applied in part, seen after healing", append(two, unknown(del(2, c0, 0))),
			final([][]string{v(), v(), v("w1-1", "w0-1")}), 1, 1},
		{"a value nobody wrote", two, final(all("w0-1", "w1-1", "zz")), 0, 1},
		{"a list holding a value twice", two, final([][]string{v("w0-1", "w1-1"), v("w0-1", "w1-1"), v("w1-1", "w1-1", "w0-1")}), 0, 1},
	}
	for _, c := range cases {
		got := checkAtomicity(c.ops, nil, c.final)
		if got.Partial != c.partial || got.CollPartial != c.partial || len(got.Violations) != c.bad {
			t.Errorf("%s: got %d partial (%d on collections), violations %v; want %d partial, %d violations",
				c.name, got.Partial, got.CollPartial, got.Violations, c.partial, c.bad)
		}
	}
	got := checkAtomicity([]MultiOp{two[0], unknown(two[1]), read(2, c1, all()...)}, nil, final([][]string{v("w0-1", "w1-1"), v("w0-1", "w1-1"), v("w0-1")}))
	if want := "after healing, n2's mc{0} is split (a request or a DEL applied in part): c1 exec-coll mc{0} += w1-1 on n1 at 0.001s -> unknown (i/o timeout) in mc{0}.h mc{0}.z, not in mc{0}.l"; len(got.Violations) != 1 || got.Violations[0] != "atomicity: "+want {
		t.Errorf("the violation does not show the split group and the request:\n got %v\nwant %s", got.Violations, want)
	}
	if got.Requests != 2 || got.CollRequests != 2 || got.Reads != 1 || got.CollReads != 1 {
		t.Errorf("counts: %d requests (%d on collections), %d reads (%d on collections); want 2 (2), 1 (1)", got.Requests, got.CollRequests, got.Reads, got.CollReads)
	}
	if s := (Result{Multi: got}).Summary(); !strings.Contains(s, "multikey=2 (collections 2) multikey_reads=1 (collections 1) aborted=0 partial=1 (collections 1)") {
		t.Errorf("summary %q", s)
	}
}

func TestPubSubChecker(t *testing.T) {
	pub := func(publisher, seq int, inv, comp int64) Publish {
		return Publish{Publisher: publisher, Seq: seq, Node: "n1", Key: fmt.Sprintf("p%d.%d", publisher, seq), Value: fmt.Sprintf("v%d", seq),
			Invoke: inv * ms, Complete: comp * ms, Outcome: OK}
	}
	got := func(p Publish, read string) Delivery {
		return Delivery{Body: p.Body(), At: p.Complete, Read: read, ReadOK: true}
	}
	p1, p2, p3, q1 := pub(0, 1, 10, 11), pub(0, 2, 20, 21), pub(0, 3, 30, 31), pub(1, 1, 15, 16)
	early := pub(0, 0, 1, 2) // published before the subscription was established: not expected
	refused := pub(1, 2, 40, 41)
	refused.Outcome, refused.Err = Fail, "TRYAGAIN ..."
	pubs := []Publish{early, p1, p2, p3, q1, refused}
	sub := func(got ...Delivery) Subscription {
		return Subscription{Sub: 0, Node: "n2", Proto: 3, Established: 5 * ms, End: 100 * ms, Got: got}
	}
	good := sub(got(p1, "v1"), got(q1, "v1"), got(p2, "v2"), got(p3, "v3"))
	cases := []struct {
		name     string
		subs     []Subscription
		restores map[string][]int64
		check    func(r PubSubResult) bool
		bad      int
	}{
		{"every message once, in order, after its change", []Subscription{good},
			nil, func(r PubSubResult) bool { return r.Delivered == 4 && r.Expected == 4 && r.Published == 5 }, 0},
		{"delivered before the change applied", []Subscription{sub(got(p1, "v1"), got(q1, ""), got(p2, "v2"), got(p3, "v3"))},
			nil, func(r PubSubResult) bool { return r.Stale == 1 }, 1},
		{"delivered twice", []Subscription{sub(got(p1, "v1"), got(q1, "v1"), got(p2, "v2"), got(p2, "v2"), got(p3, "v3"))},
			nil, func(r PubSubResult) bool { return r.Duplicates == 1 }, 1},
		{"lost while connected", []Subscription{sub(got(p1, "v1"), got(q1, "v1"), got(p3, "v3"))},
			nil, func(r PubSubResult) bool { return r.Lost == 1 && r.Expected == 4 }, 1},
		{"out of publish order", []Subscription{sub(got(p1, "v1"), got(q1, "v1"), got(p3, "v3"), got(p2, "v2"))},
			nil, func(r PubSubResult) bool { return r.OrderViolation == 1 }, 1},
		{"a refused publish delivered", []Subscription{sub(got(p1, "v1"), got(q1, "v1"), got(p2, "v2"), got(p3, "v3"), got(refused, "v2"))},
			nil, func(r PubSubResult) bool { return true }, 1},
		{"a message nobody published", []Subscription{sub(got(p1, "v1"), got(q1, "v1"), got(p2, "v2"), got(p3, "v3"), Delivery{Body: "x=y"})},
			nil, func(r PubSubResult) bool { return true }, 1},
		// a dropped connection may lose what was in flight; a snapshot install drops the
		// subscribers' connections, so a loss across one on a live subscription is one too
		{"lost on a connection that dropped", []Subscription{func() Subscription { s := sub(got(p1, "v1")); s.Dropped = "EOF"; return s }()},
			nil, func(r PubSubResult) bool { return r.Lost == 0 && r.Expected == 0 }, 0},
		{"lost across a snapshot install on the node", []Subscription{sub(got(p1, "v1"), got(q1, "v1"), got(p3, "v3"))},
			map[string][]int64{"n2": {25 * ms}}, func(r PubSubResult) bool { return r.Lost == 1 && r.LostInSnapshot == 1 }, 1},
		{"nor one installed after a later message arrived", []Subscription{sub(got(p1, "v1"), got(q1, "v1"), got(p3, "v3"))},
			map[string][]int64{"n2": {35 * ms}}, func(r PubSubResult) bool { return r.Lost == 1 }, 1},
		{"a snapshot installed before the message does not excuse it", []Subscription{sub(got(p1, "v1"), got(q1, "v1"), got(p3, "v3"))},
			map[string][]int64{"n2": {8 * ms}, "n1": {25 * ms}}, func(r PubSubResult) bool { return r.Lost == 1 }, 1},
		{"a read that failed is not stale", []Subscription{sub(got(p1, "v1"), got(q1, "v1"), got(p2, "v2"), Delivery{Body: p3.Body(), ReadErr: "CLUSTERDOWN"})},
			nil, func(r PubSubResult) bool { return r.Stale == 0 }, 0},
	}
	for _, c := range cases {
		r := checkPubSub(pubs, c.subs, c.restores, nil)
		if len(r.Violations) != c.bad || !c.check(r) {
			t.Errorf("%s: got %+v; want %d violations", c.name, r, c.bad)
		}
	}
}

func TestSnapshotRestores(t *testing.T) {
	start := time.Date(2026, 12, 1, 9, 52, 40, 0, time.UTC)
	p := filepath.Join(t.TempDir(), "n2.log")
	os.WriteFile(p, []byte(`time=2026-12-01T09:52:45.480Z level=INFO msg="leader ready"
time=2026-12-01T09:52:47.250Z level=INFO msg="Installed remote snapshot" component=raft
garbled Installed remote snapshot
`), 0o644)
	got := snapshotRestores(map[string]string{"n2": p}, start)
	if want := []int64{7250 * ms, never}; len(got["n2"]) != 2 || got["n2"][0] != want[0] || got["n2"][1] != want[1] {
		t.Errorf("got %v, want %v", got, want)
	}
}

// fakeSubServer answers HELLO and READONLY, confirms SUBSCRIBE, then pushes frames and
// answers each GET with the next of gets, closing the connection after the last.
func fakeSubServer(t *testing.T, frames []string, gets []string) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		r := resp.NewReader(c, resp.Limits{})
		for {
			cmd, err := r.ReadCommand()
			if err != nil {
				return
			}
			switch strings.ToUpper(string(cmd[0])) {
			case "HELLO":
				c.Write([]byte("%1\r\n$5\r\nproto\r\n:3\r\n"))
			case "READONLY":
				c.Write([]byte("+OK\r\n"))
			case "SUBSCRIBE":
				c.Write([]byte(">3\r\n$9\r\nsubscribe\r\n$8\r\nchaos.ch\r\n:1\r\n" + strings.Join(frames, "")))
			case "GET":
				c.Write([]byte(gets[0]))
				if gets = gets[1:]; len(gets) == 0 {
					return // the connection drops
				}
			}
		}
	}()
	return ln.Addr().String()
}

// TestSubscriberSession: a RESP3 subscription records each message and what its read saw,
// matching replies to reads across pushes, and records the drop.
func TestSubscriberSession(t *testing.T) {
	msg := func(body string) string {
		return fmt.Sprintf(">3\r\n$7\r\nmessage\r\n$8\r\nchaos.ch\r\n$%d\r\n%s\r\n", len(body), body)
	}
	addr := fakeSubServer(t, []string{msg("p1.1=v1"), msg("p1.2=v2")}, []string{"$2\r\nv1\r\n", "_\r\n"})
	rec := newRecorder(1)
	var delivered atomic.Int64
	s := &subscriber{id: 4, node: &node{id: "n1", clientAddr: addr}, proto: 3, rec: rec, delivered: &delivered}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.session(ctx) // the fake server closes after the last GET: a drop
	h := rec.snapshot()
	if len(h.Subs) != 1 {
		t.Fatalf("subscriptions %+v", h.Subs)
	}
	sub := h.Subs[0]
	want := []Delivery{{Body: "p1.1=v1", Read: "v1", ReadOK: true}, {Body: "p1.2=v2", ReadOK: true}}
	for i := range sub.Got {
		sub.Got[i].At = 0
	}
	if diff := cmp.Diff(want, sub.Got); diff != "" || sub.Dropped == "" || delivered.Load() != 2 {
		t.Errorf("deliveries (-want +got):\n%s dropped %q, counted %d", diff, sub.Dropped, delivered.Load())
	}
}

// typedOp is one data-type op of model m on its key m0.0, answered OK with reply n.
func typedOp(c int, m, kind string, inv, comp, n int64) TypedOp {
	key := map[string]string{Counter: "ctr0.0", ZSet: "zs0.0", List: "ls0.0"}[m]
	return TypedOp{Client: c, Node: "n1", Model: m, Key: key, Kind: kind, Invoke: inv * ms, Complete: comp * ms, Outcome: OK, Reply: n}
}

func TestDataTypeModels(t *testing.T) {
	unknown := func(op TypedOp) TypedOp {
		op.Outcome, op.Complete, op.Reply, op.Err = Unknown, never, 0, "i/o timeout"
		return op
	}
	isNil := func(op TypedOp) TypedOp { op.Nil = true; return op }
	// counter
	incr := func(c int, delta, inv, comp, n int64) TypedOp {
		op := typedOp(c, Counter, IncrBy, inv, comp, n)
		op.Delta = delta
		if delta < 0 {
			op.Kind = DecrBy
		}
		return op
	}
	get := func(c int, inv, comp, n int64) TypedOp { return typedOp(c, Counter, Get, inv, comp, n) }
	take := func(c int, permits, inv, comp, n int64) TypedOp {
		op := typedOp(c, Counter, SemTake, inv, comp, n)
		op.Delta = permits
		return op
	}
	// sorted set
	zadd := func(c, m int, score, inv, comp, n int64) TypedOp {
		op := typedOp(c, ZSet, ZAdd, inv, comp, n)
		op.Member, op.Score = m, score
		return op
	}
	zop := func(c int, kind string, m int, inv, comp, n int64) TypedOp {
		op := typedOp(c, ZSet, kind, inv, comp, n)
		op.Member = m
		return op
	}
	zbelow := func(c int, cutoff, inv, comp, n int64) TypedOp {
		op := typedOp(c, ZSet, ZRemBelow, inv, comp, n)
		op.Cutoff = cutoff
		return op
	}
	acquire := func(c, m int, score, cutoff, inv, comp, n int64) TypedOp {
		op := typedOp(c, ZSet, ZSemAcquire, inv, comp, n)
		op.Member, op.Score, op.Cutoff = m, score, cutoff
		return op
	}
	// list
	push := func(c int, v string, inv, comp, n int64) TypedOp {
		op := typedOp(c, List, LPush, inv, comp, n)
		op.Value = v
		return op
	}
	pop := func(c int, inv, comp int64, v string) TypedOp {
		op := typedOp(c, List, RPop, inv, comp, 0)
		op.Elem, op.Nil = v, v == ""
		return op
	}
	llen := func(c int, inv, comp, n int64) TypedOp { return typedOp(c, List, LLen, inv, comp, n) }

	cases := []struct {
		name string
		ops  []TypedOp
		want porcupine.CheckResult
	}{
		{"counter: increments and a read", []TypedOp{incr(0, 1, 0, 1, 1), incr(1, 5, 2, 3, 6), incr(0, -3, 4, 5, 3), get(1, 6, 7, 3)}, porcupine.Ok},
		{"counter: a lost increment", []TypedOp{incr(0, 1, 0, 1, 1), incr(1, 1, 2, 3, 1)}, porcupine.Illegal},
		{"counter: concurrent increments in either order", []TypedOp{incr(0, 1, 0, 10, 2), incr(1, 1, 1, 9, 1)}, porcupine.Ok},
		{"counter: a stale read", []TypedOp{incr(0, 1, 0, 1, 1), incr(1, 1, 2, 3, 2), get(2, 4, 5, 1)}, porcupine.Illegal},
		{"counter: nil after an increment", []TypedOp{incr(0, 1, 0, 1, 1), isNil(get(1, 2, 3, 0))}, porcupine.Illegal},
		{"counter: an unknown increment, seen late", []TypedOp{unknown(incr(0, 1, 0, 1, 0)), isNil(get(1, 2, 3, 0)), get(1, 4, 5, 1), get(1, 6, 7, 1)}, porcupine.Ok},
		{"counter: an unknown increment applied twice", []TypedOp{unknown(incr(0, 1, 0, 1, 0)), get(1, 4, 5, 1), get(1, 6, 7, 2)}, porcupine.Illegal},
		{"counter: a value no increment explains", []TypedOp{incr(0, 2, 0, 1, 2), incr(1, 2, 2, 3, 5)}, porcupine.Illegal},
		{"semaphore: permits taken while there are some", []TypedOp{incr(0, 3, 0, 1, 3), take(1, 2, 2, 3, 1), take(2, 2, 4, 5, 0), get(0, 6, 7, 1)}, porcupine.Ok},
		{"semaphore: permits oversold", []TypedOp{incr(0, 3, 0, 1, 3), take(1, 2, 2, 3, 1), take(2, 2, 4, 5, 1)}, porcupine.Illegal},
		{"semaphore: refused with permits left", []TypedOp{incr(0, 3, 0, 1, 3), take(1, 2, 2, 3, 0)}, porcupine.Illegal},

		{"zset: add, re-score, read", []TypedOp{zadd(0, 0, 100, 0, 1, 1), zadd(1, 0, 200, 2, 3, 0), zop(2, ZScore, 0, 4, 5, 200), zop(0, ZCard, 0, 6, 7, 1)}, porcupine.Ok},
		{"zset: a stale score", []TypedOp{zadd(0, 0, 100, 0, 1, 1), zadd(1, 0, 200, 2, 3, 0), zop(2, ZScore, 0, 4, 5, 100)}, porcupine.Illegal},
		{"zset: a member still counted after ZREM", []TypedOp{zadd(0, 0, 100, 0, 1, 1), zop(1, ZRem, 0, 2, 3, 1), zop(2, ZCard, 0, 4, 5, 1)}, porcupine.Illegal},
		{"zset: ZREMRANGEBYSCORE removed what it should not", []TypedOp{zadd(0, 0, 100, 0, 1, 1), zadd(0, 1, 200, 2, 3, 1), zbelow(1, 150, 4, 5, 2)}, porcupine.Illegal},
		{"zset: an unknown ZREM, seen late", []TypedOp{zadd(0, 0, 100, 0, 1, 1), unknown(zop(1, ZRem, 0, 2, 3, 0)), zop(2, ZCard, 0, 4, 5, 1), zop(2, ZCard, 0, 6, 7, 0)}, porcupine.Ok},
		{"zset: removed, then back without an add", []TypedOp{zadd(0, 0, 100, 0, 1, 1), unknown(zop(1, ZRem, 0, 2, 3, 0)), zop(2, ZCard, 0, 4, 5, 0), zop(2, ZCard, 0, 6, 7, 1)}, porcupine.Illegal},
		{"semaphore zset: holders past the limit", []TypedOp{acquire(0, 0, 100, 0, 0, 1, 1), acquire(1, 1, 110, 0, 2, 3, 1), acquire(2, 2, 120, 0, 4, 5, 1)}, porcupine.Illegal},
		{"semaphore zset: a timed-out holder dropped", []TypedOp{acquire(0, 0, 100, 0, 0, 1, 1), acquire(1, 1, 200, 0, 2, 3, 1), acquire(2, 2, 1500, 150, 4, 5, 1),
			isNil(zop(0, ZScore, 0, 6, 7, 0)), zop(0, ZCard, 0, 8, 9, 2)}, porcupine.Ok},
		{"semaphore zset: refused below the limit", []TypedOp{acquire(0, 0, 100, 0, 0, 1, 1), acquire(1, 1, 200, 0, 2, 3, 0)}, porcupine.Illegal},

		{"list: first in, first out", []TypedOp{push(0, "a", 0, 1, 1), push(1, "b", 2, 3, 2), pop(2, 4, 5, "a"), llen(0, 6, 7, 1), pop(1, 8, 9, "b"), pop(2, 10, 11, "")}, porcupine.Ok},
		{"list: popped out of order", []TypedOp{push(0, "a", 0, 1, 1), push(1, "b", 2, 3, 2), pop(2, 4, 5, "b")}, porcupine.Illegal},
		{"list: an element popped twice", []TypedOp{push(0, "a", 0, 1, 1), pop(1, 2, 3, "a"), pop(2, 2, 4, "a")}, porcupine.Illegal},
		{"list: a stale length", []TypedOp{push(0, "a", 0, 1, 1), llen(1, 2, 3, 0)}, porcupine.Illegal},
		{"list: a lost push", []TypedOp{push(0, "a", 0, 1, 1), push(1, "b", 2, 3, 1)}, porcupine.Illegal},
		{"list: an unknown push popped", []TypedOp{unknown(push(0, "a", 0, 1, 0)), pop(1, 2, 3, ""), pop(1, 4, 5, "a")}, porcupine.Ok},
		{"list: an unknown push popped twice", []TypedOp{unknown(push(0, "a", 0, 1, 0)), pop(1, 4, 5, "a"), pop(1, 6, 7, "a")}, porcupine.Illegal},
	}
	for _, c := range cases {
		res := checkDataTypes(c.ops, 10*time.Second)
		if len(res) != 1 || res[0].Result != c.want {
			t.Errorf("%s: got %v, want %v", c.name, res, c.want)
		}
	}

	// each key is checked on its own, with its own type's model
	other := incr(0, 1, 0, 1, 1)
	other.Key = "ctr0.1"
	res := checkDataTypes([]TypedOp{incr(0, 1, 0, 1, 1), other, push(0, "a", 0, 1, 1)}, 10*time.Second)
	if len(res) != 3 || res[0].Result != porcupine.Ok || res[1].Result != porcupine.Ok || res[2].Result != porcupine.Ok {
		t.Errorf("independent keys: got %v, want three linearizable keys", res)
	}

	// a failing data-type key fails the run, and its visualization uses its own model
	root := t.TempDir()
	h := History{Seed: 7, Typed: []TypedOp{incr(0, 1, 0, 1, 1), incr(1, 1, 2, 3, 1), pop(2, 0, 1, "")}}
	r, bad, clk := evaluate(h, observed{}, 10*time.Second)
	if want := []string{"linearizability: counter key ctr0.0 has no linearization"}; !cmp.Equal(r.Violations, want) || len(bad) != 1 {
		t.Fatalf("violations %v, want %v", r.Violations, want)
	}
	if err := writeFailure(root, h, bad, clk, r.Violations); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "lin-ctr0.0.html")); err != nil || !strings.Contains(string(b), "c1 incrby ctr0.0 1 -\\u003e 1") {
		t.Errorf("lin-ctr0.0.html: %v, or it does not describe the ops", err)
	}
	if s := r.Summary(); !strings.Contains(s, "counter_ops=2 zset_ops=0 list_ops=1 typed_unknown=0") {
		t.Errorf("summary %q", s)
	}
}

// TestTypedReplies: the data-type workload reads each reply kind, and an error reply's
// outcome, as the model expects them.
func TestTypedReplies(t *testing.T) {
	cases := []struct {
		reply   string
		parse   func(*TypedOp, any) bool
		outcome string
		want    reply
	}{
		{":5\r\n", intReply, OK, reply{N: 5}},
		{"$2\r\n12\r\n", intOrNil, OK, reply{N: 12}},
		{"$-1\r\n", intOrNil, OK, reply{Nil: true}},
		{"$-1\r\n", elemOrNil, OK, reply{Nil: true}},
		{"$3\r\nc.1\r\n", elemOrNil, OK, reply{Elem: "c.1"}},
		{"+OK\r\n", intReply, Unknown, reply{}},
		{"$3\r\n1.5\r\n", intOrNil, Unknown, reply{N: 0}},
		{"-UNCERTAIN the outcome is unknown\r\n", intReply, Unknown, reply{}},
		{"-CLUSTERDOWN no leader elected yet; retry shortly\r\n", intReply, Fail, reply{}},
	}
	for _, c := range cases {
		var stop atomic.Bool
		w := &worker{rng: rand.New(rand.NewPCG(1, 2)), rec: newRecorder(1), addrs: []string{fakeServer(t, c.reply)}, stop: &stop}
		op := TypedOp{Kind: Get}
		w.typedCall(&op, c.parse, "GET", "k")
		w.c.close()
		if op.Outcome != c.outcome || op.Outcome == OK && op.reply() != c.want {
			t.Errorf("%q: got %s %+v (%s), want %s %+v", c.reply, op.Outcome, op.reply(), op.Err, c.outcome, c.want)
		}
	}
}

// The lock kinds' checkers (kindsmodel.go). kgrant is an acknowledged acquire on key "rw0.0"
// (owner names the attempt, tok 0 is a nil reply), from inv to comp ms.
func kgrant(via, owner string, tok uint64, ttl, inv, comp int64) Op {
	op := Op{Client: int(owner[0]), Key: "rw0.0", Kind: Acquire, Via: via, Owner: owner, TTL: ttl, Token: tok,
		Invoke: inv * ms, Complete: comp * ms, Outcome: OK, Granted: tok > 0}
	if via == ViaSem {
		op.Key, op.Permits = "sem0", semPermits
	}
	return op
}

// kcall is an acknowledged RENEW, UNLOCK or VALIDATE of token on key, answered ok.
func kcall(kind, key string, tok uint64, ttl, inv, comp int64, ok bool) Op {
	return Op{Client: 9, Key: key, Kind: kind, Token: tok, TTL: ttl, Invoke: inv * ms, Complete: comp * ms, Outcome: OK, Success: ok}
}

// kread is an acknowledged LOCKINFO of key: free (kind ""), a plain lock (the first holder), a
// lock-delay (its token), shares or permits (semPermits of them).
func kread(key, kind string, inv, comp int64, holders ...Holder) Op {
	op := Op{Client: 8, Key: key, Kind: Read, Invoke: inv * ms, Complete: comp * ms, Outcome: OK, RdKind: kind, Free: kind == ""}
	switch kind {
	case KindLock:
		op.RdOwner, op.RdToken = holders[0].Owner, holders[0].Token
	case KindDelay:
		op.RdToken = holders[0].Token
	case KindSemaphore:
		op.RdPermits = semPermits
		fallthrough
	case KindShared:
		op.RdHolders = holders
	}
	return op
}

func kunknown(op Op) Op {
	op.Outcome, op.Complete, op.Granted, op.Token, op.Err = Unknown, never, false, 0, "i/o timeout"
	return op
}

func kdelay(op Op, d int64) Op { op.DelayMs = d; return op }

// kindsResults checks ops with the lock kinds' model, key by key.
func kindsResults(ops []Op, clk *clockTimeline) map[string]porcupine.CheckResult {
	out := map[string]porcupine.CheckResult{}
	for _, l := range checkKinds(ops, clk, 10*time.Second) {
		out[l.Key] = l.Result
	}
	return out
}

type kindsCase struct {
	name string
	ops  []Op
	clk  *clockTimeline
	want porcupine.CheckResult
}

// runKindsCases checks each case's ops, on whatever keys they use: Illegal means some key has
// no linearization, Ok that every key has one.
func runKindsCases(t *testing.T, cases []kindsCase) {
	t.Helper()
	for _, c := range cases {
		got := porcupine.Ok
		for _, r := range kindsResults(c.ops, c.clk) {
			if r != porcupine.Ok {
				got = r
			}
		}
		if got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestKindsSharedExclusion(t *testing.T) {
	const k = "rw0.0"
	a, b := Holder{Owner: "a1", Token: 5}, Holder{Owner: "b1", Token: 7}
	shareA, shareB := kgrant(ViaShared, "a1", 5, 1000, 0, 1), kgrant(ViaShared, "b1", 7, 1000, 2, 3)
	runKindsCases(t, []kindsCase{
		{"two shares together, then a plain lock", []Op{shareA, shareB, kread(k, KindShared, 4, 5, a, b),
			kgrant("lock", "c1", 0, 1000, 6, 7), kcall(Release, k, 5, 0, 8, 9, true), kcall(Release, k, 7, 0, 10, 11, true),
			kgrant("lock", "c2", 12, 1000, 12, 13), kread(k, KindLock, 14, 15, Holder{Owner: "c2", Token: 12})}, nil, porcupine.Ok},
		{"a share refused while a plain lock holds", []Op{kgrant("lock", "c1", 5, 1000, 0, 1), kgrant(ViaShared, "a1", 0, 1000, 2, 3)}, nil, porcupine.Ok},
		{"a plain lock once the shares' leases ran out", []Op{shareA, shareB, kgrant("lock", "c1", 9, 1000, 1100, 1101)}, nil, porcupine.Ok},
		{"a plain lock granted while a share holds", []Op{shareA, kgrant("lock", "c1", 9, 1000, 500, 501)}, nil, porcupine.Illegal},
		{"an MLOCK granted a key a share holds", []Op{shareA, func() Op {
			op := kgrant(ViaMLock, "m1", 9, 1000, 500, 501)
			op.Keys = []string{k}
			return op
		}()}, nil, porcupine.Illegal},
		{"a share granted while a plain lock holds", []Op{kgrant("lock", "c1", 5, 1000, 0, 1), kgrant(ViaShared, "a1", 7, 1000, 2, 3)}, nil, porcupine.Illegal},
		{"a plain lock refused once the shares were released", []Op{shareA, kcall(Release, k, 5, 0, 2, 3, true), kgrant("lock", "c1", 0, 1000, 4, 5)}, nil, porcupine.Illegal},
		{"LOCKINFO missing a share", []Op{shareA, shareB, kread(k, KindShared, 4, 5, b)}, nil, porcupine.Illegal},
		{"LOCKINFO calls shares a plain lock", []Op{shareA, kread(k, KindLock, 4, 5, a)}, nil, porcupine.Illegal},
		{"VALIDATE of a released share", []Op{shareA, kcall(Release, k, 5, 0, 2, 3, true), kcall(Validate, k, 5, 0, 4, 5, true)}, nil, porcupine.Illegal},
		{"RENEW of a share moves its lease", []Op{shareA, kcall(Renew, k, 5, 1000, 800, 801, true), kgrant("lock", "c1", 0, 1000, 1500, 1501),
			kgrant("lock", "c2", 9, 1000, 1900, 1901)}, nil, porcupine.Ok},
		{"a renewed share ended early", []Op{shareA, kcall(Renew, k, 5, 1000, 800, 801, true), kgrant("lock", "c2", 9, 1000, 1500, 1501)}, nil, porcupine.Illegal},
		// a share whose reply was lost may have been taken, and then released by the leader
		{"an unknown share, seen, then gone", []Op{kunknown(kgrant(ViaShared, "a1", 5, 10000, 0, 1)), kread(k, KindShared, 10, 11, a),
			kgrant("lock", "c1", 9, 1000, 20, 21)}, nil, porcupine.Ok},
		{"an unknown share seen with a token below an earlier grant's", []Op{kgrant("lock", "c1", 8, 100, 0, 1), kunknown(kgrant(ViaShared, "a1", 5, 10000, 200, 201)),
			kread(k, KindShared, 300, 301, a)}, nil, porcupine.Illegal},
	})

	// a lock kinds' key with no linearization fails the run, and its visualization uses the
	// lock kinds' model
	root := t.TempDir()
	h := History{Seed: 7, Kinds: []Op{shareA, kgrant("lock", "c1", 9, 1000, 500, 501)}}
	r, bad, clk := evaluate(h, observed{}, 10*time.Second)
	if want := []string{"linearizability: lock-kinds key rw0.0 has no linearization"}; !cmp.Equal(r.Violations, want) || len(bad) != 1 {
		t.Fatalf("violations %v, want %v", r.Violations, want)
	}
	if err := writeFailure(root, h, bad, clk, r.Violations); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "lin-rw0.0.html")); err != nil || !strings.Contains(string(b), "lock-shared rw0.0 1000ms a1") {
		t.Errorf("lin-rw0.0.html: %v, or it does not describe the ops", err)
	}
	if s := r.Summary(); !strings.Contains(s, "kinds_ops=2 shares=1 permits=0 kinds_locks=1 mlocks=0 (refused 0) delays_seen=0 kinds_unknown=0") {
		t.Errorf("summary %q", s)
	}
}

func TestKindsSemaphorePermits(t *testing.T) {
	const k = "sem0"
	a, b, c := Holder{Owner: "a1", Token: 5}, Holder{Owner: "b1", Token: 7}, Holder{Owner: "c1", Token: 9}
	permA, permB := kgrant(ViaSem, "a1", 5, 1000, 0, 1), kgrant(ViaSem, "b1", 7, 1000, 2, 3)
	runKindsCases(t, []kindsCase{
		{"two permits, a third refused, then granted after a release", []Op{permA, permB, kgrant(ViaSem, "c1", 0, 1000, 4, 5),
			kread(k, KindSemaphore, 6, 7, a, b), kcall(Release, k, 5, 0, 8, 9, true), kgrant(ViaSem, "c2", 9, 1000, 10, 11)}, nil, porcupine.Ok},
		{"a permit once another's lease ran out", []Op{permA, permB, kgrant(ViaSem, "c1", 9, 1000, 1100, 1101)}, nil, porcupine.Ok},
		{"three permits of two", []Op{permA, permB, kgrant(ViaSem, "c1", 9, 1000, 4, 5)}, nil, porcupine.Illegal},
		{"three holders listed", []Op{permA, permB, kread(k, KindSemaphore, 4, 5, a, b, c)}, nil, porcupine.Illegal},
		{"refused with a permit free", []Op{permA, kgrant(ViaSem, "c1", 0, 1000, 4, 5)}, nil, porcupine.Illegal},
		{"SEMRELEASE of a permit nobody holds", []Op{permA, kcall(Release, k, 7, 0, 2, 3, true)}, nil, porcupine.Illegal},
		{"a permit still held after its SEMRELEASE", []Op{permA, kcall(Release, k, 5, 0, 2, 3, true), kread(k, KindSemaphore, 4, 5, a)}, nil, porcupine.Illegal},
		// a permit whose reply was lost may hold one, or not
		{"an unknown permit taken", []Op{kunknown(kgrant(ViaSem, "a1", 5, 1000, 0, 1)), permB, kgrant(ViaSem, "c1", 0, 1000, 4, 5)}, nil, porcupine.Ok},
		{"an unknown permit not taken", []Op{kunknown(kgrant(ViaSem, "a1", 5, 1000, 0, 1)), permB, kgrant(ViaSem, "c1", 9, 1000, 4, 5)}, nil, porcupine.Ok},
		{"an unknown permit seen, and two more granted", []Op{kunknown(kgrant(ViaSem, "a1", 5, 10000, 0, 1)), kread(k, KindSemaphore, 2, 3, Holder{Owner: "a1", Token: 4}),
			permB, kgrant(ViaSem, "c1", 9, 1000, 4, 5), kread(k, KindSemaphore, 6, 7, Holder{Owner: "a1", Token: 4}, b, c)}, nil, porcupine.Illegal},
	})
}

func TestKindsFencing(t *testing.T) {
	runKindsCases(t, []kindsCase{
		{"shares with tokens increasing", []Op{kgrant(ViaShared, "a1", 5, 1000, 0, 1), kgrant(ViaShared, "b1", 7, 1000, 2, 3)}, nil, porcupine.Ok},
		{"a later share with a lower token", []Op{kgrant(ViaShared, "a1", 7, 1000, 0, 1), kgrant(ViaShared, "b1", 5, 1000, 2, 3)}, nil, porcupine.Illegal},
		{"concurrent shares in either order", []Op{kgrant(ViaShared, "a1", 7, 1000, 0, 5), kgrant(ViaShared, "b1", 5, 1000, 2, 3)}, nil, porcupine.Ok},
		{"a plain lock below a share released before it", []Op{kgrant(ViaShared, "a1", 7, 1000, 0, 1), kcall(Release, "rw0.0", 7, 0, 2, 3, true),
			kgrant("lock", "c1", 6, 1000, 4, 5)}, nil, porcupine.Illegal},
		{"a permit below an earlier permit's", []Op{kgrant(ViaSem, "a1", 7, 100, 0, 1), kgrant(ViaSem, "b1", 5, 100, 500, 501)}, nil, porcupine.Illegal},
	})
	// one counter for every kind and key: a permit granted after a plain lock (another key,
	// another list) has a higher token
	lock := grant(0, 9, 1000, 0, 1)
	h := History{Ops: []Op{lock}, Kinds: []Op{kgrant(ViaSem, "a1", 7, 1000, 2, 3)}}
	if r, _, _ := evaluate(h, observed{}, 10*time.Second); len(r.Violations) != 1 || !strings.HasPrefix(r.Violations[0], "fencing: ") {
		t.Errorf("a permit's token below an earlier lock's: violations %v", r.Violations)
	}
	h.Kinds[0].Token = 11
	if r, _, _ := evaluate(h, observed{}, 10*time.Second); len(r.Violations) != 0 {
		t.Errorf("tokens increasing across kinds flagged: %v", r.Violations)
	}
	h.Kinds = append(h.Kinds, kgrant(ViaShared, "b1", 11, 1000, 4, 5))
	if r, _, _ := evaluate(h, observed{}, 10*time.Second); len(r.Violations) != 2 { // granted twice, and not increasing
		t.Errorf("a share's token equal to a permit's: violations %v", r.Violations)
	}
}

func TestKindsMLock(t *testing.T) {
	mlock := func(owner string, toks []uint64, ttl, inv, comp int64, keys ...string) []Op {
		ops := make([]Op, len(keys))
		for i, k := range keys {
			var tok uint64
			if toks != nil {
				tok = toks[i]
			}
			ops[i] = kgrant(ViaMLock, owner, tok, ttl, inv, comp)
			ops[i].Key, ops[i].Keys = k, keys
		}
		return ops
	}
	unknown := func(ops []Op) []Op {
		for i := range ops {
			ops[i] = kunknown(ops[i])
		}
		return ops
	}
	at := func(op Op, key string) Op { op.Key = key; return op }
	const a, b = "rw0.0", "rw0.1"
	m := Holder{Owner: "m1", Token: 9}
	cases := []kindsCase{
		{"granted, its keys held for its lease", append(mlock("m1", []uint64{9, 10}, 1000, 0, 1, a, b),
			at(kgrant("lock", "c1", 0, 1000, 2, 3), b), at(kgrant(ViaShared, "s1", 0, 1000, 4, 5), a),
			at(kgrant("lock", "c2", 12, 1000, 1100, 1101), b)), nil, porcupine.Ok},
		{"granted, one of its keys granted to another inside its lease", append(mlock("m1", []uint64{9, 10}, 1000, 0, 1, a, b),
			at(kgrant("lock", "c1", 12, 1000, 500, 501), b)), nil, porcupine.Illegal},
		{"granted over a share", append([]Op{at(kgrant(ViaShared, "s1", 5, 1000, 0, 1), b)}, mlock("m1", []uint64{9, 10}, 1000, 2, 3, a, b)...), nil, porcupine.Illegal},
		{"refused over a share, the free key untouched", append(append([]Op{at(kgrant(ViaShared, "s1", 5, 1000, 0, 1), b)}, mlock("m1", nil, 1000, 2, 3, a, b)...),
			kread(a, "", 4, 5), at(kgrant("lock", "c1", 9, 1000, 6, 7), a)), nil, porcupine.Ok},
		{"refused, yet it holds a key", append(mlock("m1", nil, 1000, 0, 1, a, b), kread(a, KindLock, 2, 3, m)), nil, porcupine.Illegal},
		// an MLOCK whose reply was lost, seen holding one key, took the other one too, when the
		// read completed at the latest: not while someone else held it
		{"unknown, seen on one key, the other free then", append(unknown(mlock("m1", []uint64{9, 10}, 10000, 100, 101, a, b)),
			kread(a, KindLock, 200, 201, m), kread(b, KindLock, 300, 301, Holder{Owner: "m1", Token: 10})), nil, porcupine.Ok},
		{"unknown, seen on one key while the other was held", append(append([]Op{at(kgrant("lock", "c1", 5, 10000, 0, 1), b)},
			unknown(mlock("m1", []uint64{9, 10}, 10000, 100, 101, a, b))...), kread(a, KindLock, 200, 201, m)), nil, porcupine.Illegal},
		{"unknown, not applied, the other key taken", append(append([]Op{at(kgrant("lock", "c1", 5, 10000, 0, 1), b)},
			unknown(mlock("m1", []uint64{9, 10}, 10000, 100, 101, a, b))...), kread(a, "", 200, 201)), nil, porcupine.Ok},
	}
	runKindsCases(t, cases)
	// the direct check says which refused MLOCK took what
	if got := checkMLock(cases[4].ops); len(got) != 1 || !strings.Contains(got[0], "mlock[rw0.0 rw0.1]") || !strings.Contains(got[0], "m1 -> nil") {
		t.Errorf("a refused MLOCK holding a key: got %v", got)
	}
	if got := checkMLock(cases[3].ops); len(got) != 0 {
		t.Errorf("a refused MLOCK that took nothing flagged: %v", got)
	}
	if c := countKinds(cases[0].ops); c.MLocks != 1 || c.MLocksRefused != 0 || c.Locks != 1 || c.Shares != 0 {
		t.Errorf("counts %+v: want one MLOCK, one plain lock", c)
	}
}

func TestKindsDelay(t *testing.T) {
	const k = "rw0.0"
	// a lease of 100 ms with a lock-delay of 300 ms: it expires at 100 ms at the earliest, and
	// nothing is granted the key before 400 ms
	held := kdelay(kgrant("lock", "a1", 5, 100, 0, 1), 300)
	// node 0's lease clock jumped 150 ms forward around t=250ms
	jump := newClockTimeline([]ClockEvent{{Node: 0, Invoke: 250 * ms, Complete: 251 * ms, Offset: 150 * ms}})
	runKindsCases(t, []kindsCase{
		{"a grant after the delay", []Op{held, kgrant("lock", "b1", 9, 1000, 450, 451)}, nil, porcupine.Ok},
		{"a grant inside the delay", []Op{held, kgrant("lock", "b1", 9, 1000, 200, 201)}, nil, porcupine.Illegal},
		{"a share inside the delay", []Op{held, kgrant(ViaShared, "b1", 9, 1000, 300, 301)}, nil, porcupine.Illegal},
		{"refused and read as a delay inside it", []Op{held, kgrant("lock", "b1", 0, 1000, 200, 201), kread(k, KindDelay, 250, 251, Holder{Token: 5})}, nil, porcupine.Ok},
		{"a delay read before the lease could end", []Op{held, kread(k, KindDelay, 50, 51, Holder{Token: 5})}, nil, porcupine.Illegal},
		{"no delay after an UNLOCK", []Op{held, kcall(Release, k, 5, 0, 10, 11, true), kgrant("lock", "b1", 9, 1000, 20, 21)}, nil, porcupine.Ok},
		{"a delay read after an UNLOCK", []Op{held, kcall(Release, k, 5, 0, 10, 11, true), kread(k, KindDelay, 200, 201, Holder{Token: 5})}, nil, porcupine.Illegal},
		{"a delay may end late", []Op{held, kgrant("lock", "b1", 0, 1000, 600, 601), kread(k, KindDelay, 700, 701, Holder{Token: 5}),
			kgrant("lock", "b2", 9, 1000, 800, 801)}, nil, porcupine.Ok},
		{"a grant early by the forward clock jump", []Op{held, kgrant("lock", "b1", 9, 1000, 300, 301)}, jump, porcupine.Ok},
		{"the same grant without the jump", []Op{held, kgrant("lock", "b1", 9, 1000, 300, 301)}, nil, porcupine.Illegal},
		{"a jump after the grant does not excuse it", []Op{held, kgrant("lock", "b1", 9, 1000, 200, 201)}, jump, porcupine.Illegal},
		// a share's expiry delays the key while another share still holds it; a share that may
		// still hold does not keep another out, so the expiry must be seen (LOCKINFO, VALIDATE)
		{"a share inside another share's delay", []Op{kdelay(kgrant(ViaShared, "a1", 5, 100, 0, 1), 300), kgrant(ViaShared, "a2", 7, 5000, 2, 3),
			kread(k, KindShared, 150, 151, Holder{Owner: "a2", Token: 7}), kgrant(ViaShared, "b1", 9, 1000, 200, 201)}, nil, porcupine.Illegal},
		{"a share inside the delay of one VALIDATE saw gone", []Op{kdelay(kgrant(ViaShared, "a1", 5, 100, 0, 1), 300),
			kcall(Validate, k, 5, 0, 150, 151, false), kgrant(ViaShared, "b1", 9, 1000, 200, 201)}, nil, porcupine.Illegal},
		{"a share next to one that may still hold", []Op{kdelay(kgrant(ViaShared, "a1", 5, 100, 0, 1), 300), kgrant(ViaShared, "b1", 9, 1000, 200, 201)}, nil, porcupine.Ok},
		{"a share after it", []Op{kdelay(kgrant(ViaShared, "a1", 5, 100, 0, 1), 300), kgrant(ViaShared, "a2", 7, 5000, 2, 3),
			kread(k, KindShared, 150, 151, Holder{Owner: "a2", Token: 7}), kgrant(ViaShared, "b1", 9, 1000, 450, 451)}, nil, porcupine.Ok},
		{"a permit inside a permit's delay", []Op{kdelay(kgrant(ViaSem, "a1", 5, 100, 0, 1), 300), kread("sem0", KindDelay, 150, 151, Holder{Token: 5}),
			kgrant(ViaSem, "b1", 9, 1000, 200, 201)}, nil, porcupine.Illegal},
		// a grant whose reply was lost may have expired (and delayed the key) or been released
		// by the leader (no delay)
		{"after an unknown grant, released as a ghost", []Op{kunknown(kdelay(kgrant("lock", "a1", 5, 100, 0, 1), 300)),
			kread(k, KindLock, 10, 11, Holder{Owner: "a1", Token: 5}), kgrant("lock", "b1", 9, 1000, 200, 201)}, nil, porcupine.Ok},
	})
}

// TestKindsReplies: the kinds clients read each LOCKINFO and MLOCK reply as the model expects.
func TestKindsReplies(t *testing.T) {
	holder := func(o string, t, p int) string {
		return fmt.Sprintf("*6\r\n$5\r\nowner\r\n$%d\r\n%s\r\n$5\r\ntoken\r\n:%d\r\n$4\r\npttl\r\n:%d\r\n", len(o), o, t, p)
	}
	cases := []struct {
		reply string
		want  Op
	}{
		{"$-1\r\n", Op{Outcome: OK, Free: true}},
		{holder("c1-1", 12, 900), Op{Outcome: OK, RdKind: KindLock, RdOwner: "c1-1", RdToken: 12, RdPTTL: 900}},
		{"*4\r\n$4\r\nkind\r\n$6\r\nshared\r\n$7\r\nholders\r\n*2\r\n" + holder("a", 5, 10) + holder("b", 7, 20),
			Op{Outcome: OK, RdKind: KindShared, RdHolders: []Holder{{"a", 5, 10}, {"b", 7, 20}}}},
		{"*6\r\n$4\r\nkind\r\n$9\r\nsemaphore\r\n$7\r\npermits\r\n:2\r\n$7\r\nholders\r\n*1\r\n" + holder("a", 5, 10),
			Op{Outcome: OK, RdKind: KindSemaphore, RdPermits: 2, RdHolders: []Holder{{"a", 5, 10}}}},
		{"*6\r\n$4\r\nkind\r\n$5\r\ndelay\r\n$5\r\ntoken\r\n:21\r\n$4\r\npttl\r\n:250\r\n", Op{Outcome: OK, RdKind: KindDelay, RdToken: 21, RdPTTL: 250}},
		{"*2\r\n$4\r\nkind\r\n$4\r\nnew!\r\n", Op{Outcome: Unknown}},
		{"-CLUSTERDOWN no leader elected yet; retry shortly\r\n", Op{Outcome: Fail}},
	}
	for _, c := range cases {
		var stop atomic.Bool
		w := &worker{rng: rand.New(rand.NewPCG(1, 2)), rec: newRecorder(1), addrs: []string{fakeServer(t, c.reply)}, stop: &stop}
		got := w.kindsRead("rw0.0")
		w.c.close()
		got.Client, got.Node, got.Key, got.Kind, got.Invoke, got.Complete, got.Err = 0, "", "", "", 0, 0, ""
		if diff := cmp.Diff(c.want, got); diff != "" {
			t.Errorf("%q (-want +got):\n%s", c.reply, diff)
		}
	}
	for _, c := range []struct {
		reply string
		want  []uint64 // tokens; nil: refused
		out   string
	}{
		{"*2\r\n:17\r\n:18\r\n", []uint64{17, 18}, OK},
		{"*-1\r\n", nil, OK},
		{"*1\r\n:17\r\n", nil, Unknown},
	} {
		var stop atomic.Bool
		w := &worker{rng: rand.New(rand.NewPCG(1, 2)), rec: newRecorder(1), addrs: []string{fakeServer(t, c.reply)}, stop: &stop}
		ops := w.mlock(Op{Kind: Acquire, Owner: "m1", TTL: 1000}, 0, "1000", []string{"OWNER", "m1"})
		w.c.close()
		if len(ops) < 2 || len(ops) > 3 {
			t.Fatalf("%q: %d ops", c.reply, len(ops))
		}
		for i, op := range ops {
			if op.Outcome != c.out || op.Granted != (c.want != nil) || c.want != nil && op.Token != c.want[i] || op.Key != op.Keys[i] {
				t.Errorf("%q: key %d: %s", c.reply, i, op)
			}
		}
	}
}

// wgrant is a LOCK ... WAIT on key "wq" by owner: granted tok (0: nil, the WAIT passed).
func wgrant(owner string, tok uint64, inv, comp int64) Op {
	return Op{Key: "wq", Kind: Acquire, Via: "lock", Owner: owner, TTL: 500, Token: tok, Granted: tok > 0,
		Invoke: inv * ms, Complete: comp * ms, Outcome: OK}
}

// waiters is a LOCKWAITERS reply on "wq" listing owner/place pairs in order.
func waiters(at int64, owners ...any) QueueRead {
	q := QueueRead{Key: "wq", Node: "n1", Invoke: at * ms, Complete: at * ms}
	for i := 0; i < len(owners); i += 2 {
		q.Waiters = append(q.Waiters, QueuedWaiter{Owner: owners[i].(string), Kind: KindLock, Place: owners[i+1].(uint64)})
	}
	return q
}

func TestWaitOrderChecker(t *testing.T) {
	// a holds; b, c, d and e queue behind it at places 11 to 14; d gives up (nil), e's outcome
	// is unknown, f was never seen waiting, g's request failed
	queues := []QueueRead{waiters(10, "b", uint64(11), "c", uint64(12)), waiters(20, "c", uint64(12), "d", uint64(13), "e", uint64(14))}
	unknown := wgrant("e", 0, 5, 0)
	unknown.Outcome, unknown.Complete = Unknown, never
	failed := wgrant("g", 0, 7, 8)
	failed.Outcome = Fail
	good := []Op{wgrant("a", 10, 0, 1), wgrant("b", 15, 2, 30), wgrant("c", 17, 3, 40), wgrant("d", 0, 4, 50), unknown,
		wgrant("f", 16, 6, 35), failed}
	n, bad := checkWaitOrder(good, queues)
	if len(bad) != 0 {
		t.Errorf("good history flagged: %v", bad)
	}
	all := WaitKindCounts{Waits: 7, Granted: 4, TimedOut: 1, Failed: 1, Unknown: 1, Observed: 4}
	want := WaitCounts{WaitKindCounts: all, Lock: all, Pairs: 1}
	if diff := cmp.Diff(want, n); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}

	// b and c granted in the opposite order of their places
	swapped := append([]Op(nil), good...)
	swapped[1].Token, swapped[2].Token = 17, 15
	if _, bad := checkWaitOrder(swapped, queues); len(bad) != 1 || !strings.HasPrefix(bad[0], "fifo:") {
		t.Errorf("grants swapped against their places: got %v", bad)
	}

	cases := []struct {
		name   string
		queues []QueueRead
		ops    []Op
		prefix string
	}{
		{"listed out of order", []QueueRead{waiters(10, "c", uint64(12), "b", uint64(11))}, nil, "queue: LOCKWAITERS"},
		{"waiter moved", []QueueRead{waiters(10, "b", uint64(11)), waiters(20, "b", uint64(14))}, nil, "queue: waiter b"},
		{"token not above place", queues, []Op{wgrant("b", 11, 2, 30)}, "queue: c0 lock wq"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, bad := checkWaitOrder(tc.ops, tc.queues); len(bad) != 1 || !strings.HasPrefix(bad[0], tc.prefix) {
				t.Errorf("got %v, want one violation starting %q", bad, tc.prefix)
			}
		})
	}
}

// wreq is a request with WAIT of kind via on key by owner: granted tok (0: nil, the WAIT passed).
func wreq(via, key, owner string, tok uint64, inv, comp int64) Op {
	op := wgrant(owner, tok, inv, comp)
	op.Via, op.Key = via, key
	if via == ViaSem {
		op.Permits = waitPermits
	}
	return op
}

// wmlock is an MLOCK with WAIT of keys by owner, one op per key: granted toks, one per key.
func wmlock(owner string, keys []string, toks []uint64, inv, comp int64) []Op {
	ops := perKey(Op{Kind: Acquire, Via: ViaMLock, Keys: keys, Owner: owner, TTL: 500, Invoke: inv * ms, Complete: comp * ms, Outcome: OK})
	for i := range ops {
		ops[i].Token, ops[i].Granted = toks[i], toks[i] > 0
	}
	return ops
}

// wlist is a LOCKWAITERS reply on key at at listing owner/kind/place triples in order.
func wlist(key string, at int64, ws ...QueuedWaiter) QueueRead {
	return QueueRead{Key: key, Node: "n1", Invoke: at * ms, Complete: at * ms, Waiters: ws}
}

// TestWaitOrderKinds: the FIFO check across shares, plain locks, MLOCKs and semaphore permits.
func TestWaitOrderKinds(t *testing.T) {
	// On wq, x holds (token 10, never seen waiting); shares s1 and s2, writer w and share s3
	// queue behind it (places 11-14). x unlocks: s1 and s2 are granted in one entry (20, 21);
	// w once they are gone (25), s3 after w (30). MLOCK m of wq and wr queues at 23, after the
	// shares' grant, and is granted once s3 is gone (31, 32; h held wr meanwhile). On the
	// semaphore ws, p1 and p2 hold both permits; p3 and p4 queue and are granted in order.
	s1, s2 := QueuedWaiter{"s1", KindShared, 11}, QueuedWaiter{"s2", KindShared, 12}
	w, s3 := QueuedWaiter{"w", KindLock, 13}, QueuedWaiter{"s3", KindShared, 14}
	m := QueuedWaiter{"m", ViaMLock, 23}
	p3, p4 := QueuedWaiter{"p3", KindSemaphore, 42}, QueuedWaiter{"p4", KindSemaphore, 43}
	queues := []QueueRead{
		wlist("wq", 5, s1, s2, w, s3),
		wlist("wq", 22, w, s3),
		wlist("wq", 24, w, s3, m), // m's place is above 20 and 21: after the shares' grant
		wlist("wr", 24, m),
		wlist("ws", 30, p3, p4),
	}
	good := slices.Concat([]Op{
		wreq("lock", "wq", "x", 10, 0, 1),
		wreq(ViaShared, "wq", "s1", 20, 2, 21), wreq(ViaShared, "wq", "s2", 21, 3, 21),
		wreq("lock", "wq", "w", 25, 4, 26), wreq(ViaShared, "wq", "s3", 30, 5, 31),
		wreq("lock", "wr", "h", 22, 6, 7),
	}, wmlock("m", []string{"wq", "wr"}, []uint64{31, 32}, 23, 33), []Op{
		wreq(ViaSem, "ws", "p1", 40, 28, 29), wreq(ViaSem, "ws", "p2", 41, 28, 29),
		wreq(ViaSem, "ws", "p3", 45, 29, 50), wreq(ViaSem, "ws", "p4", 47, 29, 52),
	})
	n, bad := checkWaitOrder(good, queues)
	if len(bad) != 0 {
		t.Errorf("good history flagged: %v", bad)
	}
	want := WaitCounts{
		WaitKindCounts: WaitKindCounts{Waits: 11, Granted: 11, Observed: 7},
		Lock:           WaitKindCounts{Waits: 3, Granted: 3, Observed: 1},
		Shared:         WaitKindCounts{Waits: 3, Granted: 3, Observed: 3},
		Sem:            WaitKindCounts{Waits: 4, Granted: 4, Observed: 2},
		MLock:          WaitKindCounts{Waits: 1, Granted: 1, Observed: 1},
		// wq: s1, s2, w, s3 and m, of which the three shares' three pairs are of one kind; ws: p3, p4
		Pairs: 11, MixedPairs: 7,
		// s1 and s2 (s2 and s3 had w between them)
		Batches: 1,
		// the reply at 24 on wq follows s1's and s2's grants
		AfterGrant: 2,
	}
	if diff := cmp.Diff(want, n); diff != "" {
		t.Errorf("counts (-want +got):\n%s", diff)
	}

	// edit returns good with the ops of owner changed by f
	edit := func(ops []Op, owner string, f func(op *Op)) []Op {
		out := slices.Clone(ops)
		for i := range out {
			if out[i].Owner == owner && out[i].Kind == Acquire {
				f(&out[i])
			}
		}
		return out
	}
	token := func(tok uint64) func(op *Op) { return func(op *Op) { op.Token = tok } }
	// w gave up, and s3, behind it, was granted right after the shares
	gaveUp := edit(edit(good, "w", func(op *Op) { op.Token, op.Granted = 0, false }), "s3", token(22))
	afterGiveUp := append(slices.Clone(queues[:2]), wlist("wq", 24, w, m), queues[3], queues[4])
	// u, never seen waiting and its outcome unknown, may have waited between s1 and s2
	unknown := wreq("lock", "wq", "u", 0, 3, 0)
	unknown.Outcome, unknown.Complete = Unknown, never
	// f failed (TRYAGAIN: its node shut down while it waited, so it may have stayed queued)
	failed := wreq("lock", "wq", "f", 0, 3, 4)
	failed.Outcome = Fail

	cases := []struct {
		name   string
		ops    []Op
		queues []QueueRead
		prefix string // "": accepted
	}{
		{"a reader overtakes a waiting writer", edit(good, "s3", token(24)), queues, "fifo: c0 lock wq 500ms w"},
		{"a permit overtakes an earlier one", edit(good, "p4", token(44)), queues, "fifo: c0 semacquire(2) ws 500ms p3"},
		{"an MLOCK overtakes on one of its keys", edit(good, "m", func(op *Op) {
			if op.Key == "wq" {
				op.Token = 24
			}
		}), queues, "fifo: c0 lock-shared wq 500ms s3"},
		{"shares at the head not granted in one entry", edit(good, "s2", token(22)), queues, "batch: c0 lock-shared wq 500ms s1"},
		{"the gap excused by a request that may have waited between them", append(edit(good, "s2", token(22)), unknown), queues, ""},
		{"the gap excused by a failed request that may have waited between them", append(edit(good, "s2", token(22)), failed), queues, ""},
		{"the gap of a share that queued after the first's grant", edit(edit(good, "s2", token(22)), "s1", token(11)), nil, ""},
		{"an MLOCK at two places", good, append(slices.Clone(queues), wlist("wr", 26, QueuedWaiter{"m", ViaMLock, 24})), "queue: waiter m seen at place 23 of wq and at place 24 of wr"},
		{"a waiter listed as another kind", good, append(slices.Clone(queues), wlist("wq", 6, QueuedWaiter{"s1", KindLock, 11})), "queue: LOCKWAITERS wq on n1 at 0.006s listed s1 as lock, but it asked for shared"},
		{"a waiter listed on a key it did not ask for", good, append(slices.Clone(queues), wlist("wr", 6, w)), "queue: LOCKWAITERS wr on n1 at 0.006s listed w, which asked for wq"},
		{"a share overtakes a writer that then gave up", gaveUp, afterGiveUp, "overtaken: LOCKWAITERS wq on n1 at 0.024s listed w at place 13"},
		{"the same writer listed by a stale reply, later in time", gaveUp, append(slices.Clone(queues[:2]), wlist("wq", 40, w, s3), queues[3], queues[4]), ""},
		{"a grantee listed after its own grant", good, append(slices.Clone(queues), wlist("wq", 26, s1, m)), "overtaken: LOCKWAITERS wq on n1 at 0.026s listed s1 at place 11"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, bad := checkWaitOrder(tc.ops, tc.queues)
			switch {
			case tc.prefix == "" && len(bad) != 0:
				t.Errorf("valid history flagged: %v", bad)
			case tc.prefix != "" && (len(bad) != 1 || !strings.HasPrefix(bad[0], tc.prefix)):
				t.Errorf("got %v, want one violation starting %q", bad, tc.prefix)
			}
		})
	}
}

func TestParseWaiters(t *testing.T) {
	v := []any{
		[]any{"owner", "w1-0-1", "kind", "lock", "place", int64(41), "waiting-ms", int64(120), "wait-left-ms", int64(1880)},
		[]any{"owner", "w1-0-2", "kind", "lock", "place", int64(43), "waiting-ms", int64(90), "wait-left-ms", int64(2410)},
	}
	got, err := parseWaiters(v)
	if err != nil {
		t.Fatal(err)
	}
	want := []QueuedWaiter{{"w1-0-1", "lock", 41}, {"w1-0-2", "lock", 43}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("waiters (-want +got):\n%s", diff)
	}
	if _, err := parseWaiters([]any{[]any{"owner", "x", "kind", "lock"}}); err == nil {
		t.Error("a waiter without a place parsed")
	}
}

// The panics a disk fault ends a node with are told apart from any other panic, which stays a
// finding of checkLogs.
func TestDiskPanic(t *testing.T) {
	pebbleFrames := []string{"\tfatal error: sync: unlock of unlocked mutex", "", "goroutine 32 [running]:",
		"github.com/cockroachdb/pebble/v2.(*DB).rotateWAL(0xc0003bc008)"}
	for _, c := range []struct {
		lines []string
		want  bool
	}{
		{[]string{"panic: pebble: pebble: fatal commit error: write /tmp/x/n1/data/raft/000050.log: input/output error"}, true},
		{[]string{"panic: pebble: pebble: fatal commit error: write /tmp/x/n3/data/raft/000006.log: no space left on device"}, true},
		{[]string{"panic: write /tmp/x/n1/data/raft/000163.log: no space left on device"}, true},
		{[]string{"panic: failed to save current term: set \"CurrentTerm\": write /tmp/x/raft/000009.log: input/output error"}, true},
		{append([]string{"panic: (*fs.PathError) 0xc000f45e00"}, pebbleFrames...), true},
		{append([]string{"panic: (*withstack.withStack) 0xc001870e88"}, pebbleFrames...), true},
		{append([]string{"panic: (*withstack.withStack) 0xc001870e88"}, "goroutine 7 [running]:",
			"github.com/cockroachdb/pebble/v2.(*DB).Get(0xc0003bc008)"), false},
		{[]string{"panic: (*fs.PathError) 0xc000f45e00", "goroutine 1 [running]:", "github.com/raftlock/raftlock/server.(*conn).serve()"}, false},
		{[]string{"panic: runtime error: index out of range [3] with length 3"}, false},
		{[]string{"panic: write segment 1.seg: input/output error"}, false}, // raftlock's own code must not panic on it
		{[]string{"panic: pebble: pebble: invariant violated"}, false},
	} {
		if got := diskPanic(c.lines, 0); got != c.want {
			t.Errorf("diskPanic(%q) = %v, want %v", c.lines[0], got, c.want)
		}
		log := filepath.Join(t.TempDir(), "n1.log")
		if err := os.WriteFile(log, []byte(strings.Join(c.lines, "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if found := checkLogs([]string{log}); (len(found) == 0) != c.want {
			t.Errorf("checkLogs on %q found %v", c.lines[0], found)
		}
	}
}

// TestFencingPerRaftGroup: with several raft groups the token checks hold within each group's
// keys (each group counts on its own), and still catch a group's own duplicate or decrease.
func TestFencingPerRaftGroup(t *testing.T) {
	groupOf := func(key string) int { return keyGroup(key, 4) }
	var k0, k1 string
	for i := 0; k0 == "" || k1 == ""; i++ {
		k := fmt.Sprintf("k%d", i)
		switch {
		case groupOf(k) == 0 && k0 == "":
			k0 = k
		case groupOf(k) == 1 && k1 == "":
			k1 = k
		}
	}
	g := func(key string, token uint64, inv, comp int64) Op {
		return Op{Kind: Acquire, Key: key, Outcome: OK, Granted: true, Token: token, Invoke: inv, Complete: comp}
	}
	if bad := checkFencing([]Op{g(k0, 9, 0, 1), g(k1, 9, 2, 3), g(k1, 5, 4, 5)}, groupOf); len(bad) != 1 {
		t.Errorf("two groups with the same tokens, one decreasing in group 1: %v; want one violation", bad)
	}
	if bad := checkFencing([]Op{g(k0, 9, 0, 1), g(k0, 9, 2, 3)}, groupOf); len(bad) != 2 {
		t.Errorf("one group's token granted twice: %v; want two violations", bad)
	}
	if got := keyGroup("{"+k1+"}x", 4); got != 1 {
		t.Errorf("a hash tag's group: %d; want its tag's, 1", got)
	}
	if groupsOf([]string{"--group-commit", "no", "--groups", "4"}) != 4 || groupsOf(nil) != 1 {
		t.Error("groupsOf does not read --groups")
	}
}
