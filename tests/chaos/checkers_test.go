package chaos

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

const ms = int64(time.Millisecond)

func grant(c int, tok uint64, ttl, inv, comp int64) Op {
	return Op{Client: c, Key: "k", Kind: Acquire, Owner: "o" + string(rune('a'+c)), TTL: ttl, Token: tok,
		Invoke: inv * ms, Complete: comp * ms, Outcome: OK, Granted: true}
}

func linResult(ops []Op) porcupine.CheckResult {
	return checkLinearizable(ops, 10*time.Second)[0].Result
}

func TestLinearizabilityChecker(t *testing.T) {
	cases := []struct {
		name string
		ops  []Op
		want porcupine.CheckResult
	}{
		{"two holders within the lease", []Op{grant(0, 5, 1000, 0, 1), grant(1, 7, 1000, 500, 600)}, porcupine.Illegal},
		{"second grant after the lease", []Op{grant(0, 5, 1000, 0, 1), grant(1, 7, 1000, 1100, 1200)}, porcupine.Ok},
		{"expiry earlier than invoke+ttl", []Op{grant(0, 5, 1000, 100, 101), grant(1, 7, 1000, 900, 1050)}, porcupine.Illegal},
		{"token not increasing", []Op{grant(0, 5, 100, 0, 1), grant(1, 4, 100, 500, 501)}, porcupine.Illegal},
		{"read free while held", []Op{grant(0, 5, 1000, 0, 1), {Client: 1, Key: "k", Kind: Read, Invoke: 10 * ms, Complete: 11 * ms, Outcome: OK, Free: true}}, porcupine.Illegal},
		{"read wrong token", []Op{grant(0, 5, 1000, 0, 1), {Client: 1, Key: "k", Kind: Read, Invoke: 10 * ms, Complete: 11 * ms, Outcome: OK, RdOwner: "oa", RdToken: 6}}, porcupine.Illegal},
		{"renew after release", []Op{grant(0, 5, 1000, 0, 1),
			{Client: 0, Key: "k", Kind: Release, Owner: "oa", Token: 5, Invoke: 10 * ms, Complete: 11 * ms, Outcome: OK, Success: true},
			{Client: 0, Key: "k", Kind: Renew, Owner: "oa", Token: 5, TTL: 1000, Invoke: 20 * ms, Complete: 21 * ms, Outcome: OK, Success: true}}, porcupine.Illegal},
		{"renewed lease ended early", []Op{grant(0, 5, 1000, 0, 1),
			{Client: 0, Key: "k", Kind: Renew, Owner: "oa", Token: 5, TTL: 1000, Invoke: 800 * ms, Complete: 801 * ms, Outcome: OK, Success: true},
			grant(1, 7, 1000, 1200, 1300)}, porcupine.Illegal},
		{"unknown grant seen by a read, then released by the leader", []Op{
			{Client: 0, Key: "k", Kind: Acquire, Owner: "oa", TTL: 10000, Invoke: 0, Complete: 1 << 62, Outcome: Unknown},
			{Client: 1, Key: "k", Kind: Read, Invoke: 10 * ms, Complete: 11 * ms, Outcome: OK, RdOwner: "oa", RdToken: 3},
			{Client: 1, Key: "k", Kind: Read, Invoke: 20 * ms, Complete: 21 * ms, Outcome: OK, Free: true}}, porcupine.Ok},
		{"nil while free", []Op{{Client: 0, Key: "k", Kind: Acquire, Owner: "oa", TTL: 1000, Invoke: 0, Complete: ms, Outcome: OK}}, porcupine.Illegal},
	}
	for _, c := range cases {
		if got := linResult(c.ops); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
}

func TestFencingChecker(t *testing.T) {
	if bad := checkFencing([]Op{grant(0, 5, 1000, 0, 1), grant(1, 9, 1000, 2, 3)}); len(bad) != 0 {
		t.Errorf("good history flagged: %v", bad)
	}
	if bad := checkFencing([]Op{grant(0, 9, 1000, 0, 1), grant(1, 7, 1000, 2, 3)}); len(bad) != 1 {
		t.Errorf("decreasing tokens in real-time order: got %v", bad)
	}
	a, b := grant(0, 9, 1000, 0, 1), grant(1, 9, 1000, 0, 1)
	b.Key = "other"
	if bad := checkFencing([]Op{a, b}); len(bad) == 0 {
		t.Error("duplicate token across keys not flagged")
	}
}

func TestResourceChecker(t *testing.T) {
	good := []Write{{Key: "k", Token: 5, At: 1, ValidUntil: 10, Accepted: true}, {Key: "k", Token: 5, At: 11, ValidUntil: 10, Accepted: false},
		{Key: "k", Token: 7, At: 12, ValidUntil: 20, Accepted: true}}
	if bad := checkResource(good); len(bad) != 0 {
		t.Errorf("good writes flagged: %v", bad)
	}
	bad := []Write{{Key: "k", Token: 7, At: 1, ValidUntil: 10, Accepted: true}, {Key: "k", Token: 5, At: 2, ValidUntil: 10, Accepted: false}}
	if got := checkResource(bad); len(got) != 1 {
		t.Errorf("fenced-off write inside its lease: got %v", got)
	}
	order := []Write{{Key: "k", Token: 7, At: 1, Accepted: true}, {Key: "k", Token: 5, At: 2, Accepted: true}}
	if got := checkResource(order); len(got) != 1 {
		t.Errorf("accepted out of order: got %v", got)
	}
	// the in-harness resource itself fences off the older token
	r := newRecorder(1)
	if !r.write(0, "k", 7, 1<<62) || r.write(1, "k", 5, 1<<62) {
		t.Error("resource accepted a lower token")
	}
	if got := checkResource(r.h.Writes); len(got) != 1 {
		t.Errorf("recorded fenced-off write inside lease: got %v", got)
	}
}

func TestLogChecker(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "n1.log")
	os.WriteFile(p, []byte("ok\npanic: boom\nWARNING: DATA RACE\n"), 0o644)
	if got := checkLogs([]string{p}); len(got) != 2 {
		t.Errorf("got %v", got)
	}
}

func TestVisualizeFailure(t *testing.T) {
	res := checkLinearizable([]Op{grant(0, 5, 1000, 0, 1), grant(1, 7, 1000, 500, 600),
		{Client: 2, Key: "k", Kind: Acquire, Owner: "oc", TTL: 1000, Invoke: 0, Complete: 1 << 62, Outcome: Unknown}}, 10*time.Second)[0]
	p := filepath.Join(t.TempDir(), "lin.html")
	if err := porcupine.VisualizePath(lockModel.ToModel(), res.Info, p); err != nil {
		t.Fatal(err)
	}
}
