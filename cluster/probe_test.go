package cluster

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/ops"
)

// countingStable counts the probe's synced writes, each taking delay, and fails them with fail
// when set.
type countingStable struct {
	raft.StableStore
	writes atomic.Int64
	delay  time.Duration
	fail   atomic.Pointer[error]
}

func (s *countingStable) SetUint64(k []byte, v uint64) error {
	s.writes.Add(1)
	time.Sleep(s.delay)
	if e := s.fail.Load(); e != nil {
		return *e
	}
	return s.StableStore.SetUint64(k, v)
}

// askAll calls ask times times from each of clients goroutines at once and returns how many
// calls failed.
func askAll(clients, times int, ask func() error) int64 {
	var wg sync.WaitGroup
	var failed atomic.Int64
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range times {
				if ask() != nil {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	return failed.Load()
}

// TestProbeStoreCached: /readyz must not cost a synced write per request: 400 askers, 8 at a time and each probe slow, cause one write; a failure is
// reported to every asker until the next probe, at most once per probeEvery, finds the store
// writable again.
func TestProbeStoreCached(t *testing.T) {
	st := &countingStable{StableStore: raft.NewInmemStore(), delay: 20 * time.Millisecond}
	n := &Member{stable: st}
	failed := askAll(8, 50, n.ProbeStore)
	if got := st.writes.Load(); got != 1 {
		t.Errorf("400 probes within %v made %d synced writes; want 1", probeEvery, got)
	}
	if failed != 0 {
		t.Errorf("%d probes of a writable store failed", failed)
	}

	// A failing store: reported once the cached success is older than probeEvery, and for
	// probeEvery after that, by one write.
	fail := errors.New("read-only file system")
	st.fail.Store(&fail)
	time.Sleep(probeEvery + 50*time.Millisecond)
	before := st.writes.Load()
	for range 100 {
		if err := n.ProbeStore(); !errors.Is(err, fail) {
			t.Fatalf("ProbeStore() of a failing store = %v; want %v", err, fail)
		}
	}
	if got := st.writes.Load() - before; got != 1 {
		t.Errorf("100 probes of a failing store made %d writes; want 1", got)
	}
	st.fail.Store(nil)
	deadline := time.Now().Add(probeEvery + time.Second)
	for n.ProbeStore() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the store is writable again but ProbeStore still fails after %v", probeEvery+time.Second)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := st.writes.Load() - before; got != 2 {
		t.Errorf("the failure and the recovery took %d writes; want 2", got)
	}
}

// TestProbeStoreStalled: a probe that does not finish makes the askers behind it report the
// store unwritable after probeWait instead of piling up.
func TestProbeStoreStalled(t *testing.T) {
	st := &countingStable{StableStore: raft.NewInmemStore(), delay: probeWait + time.Second}
	n := &Member{stable: st}
	go n.ProbeStore() // the stalled probe; it ends after delay
	for deadline := time.Now().Add(time.Second); st.writes.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the first probe did not start")
		}
	}
	start := time.Now()
	err := n.ProbeStore()
	if err == nil || time.Since(start) > probeWait+500*time.Millisecond {
		t.Errorf("ProbeStore() behind a stalled probe = %v after %v; want an error after about %v", err, time.Since(start), probeWait)
	}
	if got := st.writes.Load(); got != 1 {
		t.Errorf("%d writes; want only the stalled one", got)
	}
	time.Sleep(time.Second + 100*time.Millisecond) // the stalled probe ends before the leak check
}

// leaderStats is a ready leader's figures, for /readyz.
type leaderStats struct{}

func (leaderStats) Stats() node.Stats {
	return node.Stats{State: "Leader", Ready: true, LeaderID: "n1"}
}

// TestReadyzProbesBounded: 400 GETs of /readyz from 8 clients, over a real socket on loopback,
// as main wires it (ops.Config.Probe is Member.ProbeStore), make one synced write, not 400.
func TestReadyzProbesBounded(t *testing.T) {
	st := &countingStable{StableStore: raft.NewInmemStore()}
	n := &Member{stable: st}
	web, err := ops.Start(ops.Config{Addr: "127.0.0.1:0", Probe: n.ProbeStore}, leaderStats{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer web.Close()
	url := "http://" + web.Addr().String() + "/readyz"
	start := time.Now()
	bad := askAll(8, 50, func() error {
		res, err := http.Get(url)
		if err != nil {
			return err
		}
		io.Copy(io.Discard, res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusOK {
			return errors.New(res.Status)
		}
		return nil
	})
	http.DefaultClient.CloseIdleConnections()
	// One probe per probeEvery the requests took, and the first.
	limit := int64(time.Since(start)/probeEvery) + 1
	if got := st.writes.Load(); got > limit {
		t.Errorf("400 GET /readyz in %v made %d synced writes; want at most %d", time.Since(start), got, limit)
	}
	if bad != 0 {
		t.Errorf("%d GET /readyz failed or were not 200", bad)
	}
}
