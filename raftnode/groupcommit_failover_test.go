package raftnode

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/tests/testutil"
)

// grantRecord is one LOCK a worker was told it got: when it asked, when it heard, and when it
// began to release (zero if it never did).
type grantRecord struct {
	key          string
	token        fsm.Token
	asked, heard time.Time
	releasing    time.Time
}

// Under leaders cut off and healed again and again, with group commit on, a key is never
// granted to a second holder while the first may still hold it: of two grants of one key one
// after the other by token, the first was being released, or its lease could have run out,
// before the second was heard; and a grant heard before another was asked has the lower token.
// The chaos harness (make chaos) checks this and more over processes; this cuts the leader off
// every half second or so in-process (some cuts short enough for it to win again with requests
// still queued). A grant of a held key (MatchAny in place of MatchAbsent) fails it.
func TestGroupCommitMutualExclusionUnderFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("seconds of failovers")
	}
	const (
		keys    = 3
		workers = 8
		leaseMs = 1500
		run     = 4 * time.Second
	)
	nodes := newCluster(t, 3)
	ctx, cancel := context.WithTimeout(t.Context(), run)
	defer cancel()

	var faults sync.WaitGroup
	cuts := 0
	faults.Go(func() {
		rng := rand.New(rand.NewPCG(1, 2))
		for ctx.Err() == nil {
			for _, n := range nodes {
				if n.IsLeader() {
					testutil.Isolate(n, nodes)
					cuts++
					break
				}
			}
			// Short cuts let the old leader win again with requests still queued.
			cut := time.Duration(50+rng.IntN(400)) * time.Millisecond
			select {
			case <-ctx.Done():
			case <-time.After(cut):
			}
			testutil.ConnectAll(nodes)
			select {
			case <-ctx.Done():
			case <-time.After(time.Duration(100+rng.IntN(300)) * time.Millisecond):
			}
		}
		testutil.ConnectAll(nodes)
	})

	var mu sync.Mutex
	var grants []*grantRecord
	var work sync.WaitGroup
	for w := range workers {
		work.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			for i := 0; ctx.Err() == nil; i++ {
				n := nodes[rng.IntN(len(nodes))]
				key := fmt.Sprintf("k%d", rng.IntN(keys))
				owner := fmt.Sprintf("w%d-%d", w, i)
				rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
				g := &grantRecord{key: key, asked: time.Now()}
				out, err := tryLock(rctx, n, key, owner, leaseMs)
				g.heard = time.Now()
				rcancel()
				if err != nil || !out.granted {
					time.Sleep(time.Millisecond)
					continue
				}
				g.token = out.token
				mu.Lock()
				grants = append(grants, g)
				mu.Unlock()
				time.Sleep(time.Duration(i%3) * time.Millisecond)
				mu.Lock()
				g.releasing = time.Now()
				mu.Unlock()
				// Until one answers (or the lease would have ended anyway): an uncertain release
				// may have applied.
				for try := 0; try < 6; try++ {
					rctx, rcancel := context.WithTimeout(context.Background(), time.Second)
					_, err := propose(rctx, nodes[(w+i+try)%len(nodes)], releaseCmd(key, g.token))
					rcancel()
					if err == nil {
						break
					}
				}
			}
		})
	}
	work.Wait()
	faults.Wait()

	byKey := map[string][]*grantRecord{}
	for _, g := range grants {
		byKey[g.key] = append(byKey[g.key], g)
	}
	total := 0
	for key, gs := range byKey {
		total += len(gs)
		slices.SortFunc(gs, func(a, b *grantRecord) int { return cmp.Compare(a.token, b.token) })
		for i := 1; i < len(gs); i++ {
			prev, next := gs[i-1], gs[i]
			if prev.token == next.token {
				t.Errorf("%s: token %d granted twice", key, next.token)
				continue
			}
			freed := !prev.releasing.IsZero() && prev.releasing.Before(next.heard)
			expired := next.heard.Sub(prev.asked) >= leaseMs*time.Millisecond
			if !freed && !expired {
				t.Errorf("%s: token %d (asked %v, heard %v) still held when token %d was heard (%v after it was asked)",
					key, prev.token, prev.asked.Format("15:04:05.000000"), prev.heard.Format("15:04:05.000000"), next.token, next.heard.Sub(prev.asked))
			}
		}
		for _, a := range gs {
			for _, b := range gs {
				if a.heard.Before(b.asked) && a.token > b.token {
					t.Errorf("%s: token %d heard before token %d was asked", key, a.token, b.token)
				}
			}
		}
	}
	t.Logf("%d grants over %d keys, %d leaders cut off", total, len(byKey), cuts)
	if total < 20 {
		t.Errorf("only %d grants in %v: the workload did not run", total, run)
	}
}
