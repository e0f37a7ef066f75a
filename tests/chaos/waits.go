package chaos

// Waiting for a lock (LOCK, SEMACQUIRE and MLOCK with WAIT) under the same faults. A waiting
// client sends rounds of two to four requests with WAIT, one connection each, through nodes
// picked at random, on keys of their own (rotating every keyEpoch): plain locks and shares on
// wq… keys, an MLOCK of both of them among those, or permits on a ws… semaphore key. The first
// requests are granted, the others queue behind them in the keys' replicated queues
// (fsm/queues.go), one FIFO per key whatever the kinds. A grantee gives its tokens back soon, or
// lets its short lease expire, and the queues' next are served. While a round lasts, the client
// itself observes: it polls LOCKWAITERS on the round's keys through any node and records each
// waiter's place. checkWaitOrder then holds the server to FIFO across the kinds, and across
// leader changes too (docs/locks.md, "Waiting").
//
// These keys see no request without WAIT (it would be refused while anyone waits, which the
// per-key lock model does not know of), so their ops are kept apart from Ops (History.Waits).

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Workload shape: each round queues two to four requests on waitKeysPerEpoch keys of plain
// locks, shares and MLOCKs, or on the epoch's semaphore key, with leases of 300-800 ms and WAITs
// of 1.5-3 s, so most are granted in their WAIT and some, behind expiring leases or a fault, are
// not. A semaphore key only ever sees SEMACQUIRE of waitPermits, so a count never clashes (a
// waiter asking for another count is taken out of the queue, which the checker does not model).
const (
	waitKeysPerEpoch = 2
	waitPermits      = 2
)

// waitKey is the i-th wait key of the epoch the run is in at now: plain locks, shares, MLOCKs.
// Its keys share a hash tag, as rwKey's do, for an MLOCK over them.
func waitKey(now int64, i int) string { return fmt.Sprintf("wq{%d}.%d", now/int64(keyEpoch), i) }

// waitSemKey is the epoch's semaphore wait key.
func waitSemKey(now int64) string { return fmt.Sprintf("ws%d", now/int64(keyEpoch)) }

// QueueRead is one LOCKWAITERS reply: the key's waiters in the order it listed them.
type QueueRead struct {
	Client   int            `json:"client"`
	Node     string         `json:"node"`
	Key      string         `json:"key"`
	Invoke   int64          `json:"invoke_ns"`
	Complete int64          `json:"complete_ns"`
	Waiters  []QueuedWaiter `json:"waiters"`
}

// QueuedWaiter is one waiter a LOCKWAITERS listed.
type QueuedWaiter struct {
	Owner string `json:"owner"`
	Kind  string `json:"kind"`
	Place uint64 `json:"place"`
}

// waitReq is one request of a round: its kind (an Op.Via) and its keys (two for an MLOCK).
type waitReq struct {
	via  string
	keys []string
}

// waits is the waiting client's loop: a round of waiters, observed while it lasts, then a short
// pause.
func (w *worker) waits() {
	defer func() {
		if w.c != nil {
			w.c.close()
		}
	}()
	for round := 0; !w.stop.Load(); round++ {
		reqs, observed := w.waitRound(w.rec.now())
		var wg sync.WaitGroup
		for j, q := range reqs {
			// each waiter its own connection and rng: they run at once
			s := &worker{id: w.id, rng: rand.New(rand.NewPCG(w.rng.Uint64(), uint64(j))), rec: w.rec, addrs: w.addrs,
				node: w.rng.IntN(len(w.addrs)), stop: w.stop}
			owner := fmt.Sprintf("w%d-%d-%d", w.id, round, j)
			// a rough order of arrival; the last one, at times, after the first grants, so some
			// LOCKWAITERS replies list a waiter that queued after a grant and show that grant's
			// entry applied (what checkWaitOrder's overtaking check needs)
			arrive := time.Duration(j) * 30 * time.Millisecond
			if j == len(reqs)-1 && j > 1 && w.rng.IntN(3) == 0 {
				arrive += 300 * time.Millisecond
			}
			wg.Go(func() {
				defer func() {
					if s.c != nil {
						s.c.close()
					}
				}()
				s.sleep(arrive, arrive+30*time.Millisecond)
				s.waitOnce(q, owner)
			})
		}
		done := make(chan struct{})
		go func() {
			wg.Wait()
			close(done)
		}()
		w.observe(observed, done)
		w.sleep(50*time.Millisecond, 200*time.Millisecond)
	}
}

// waitRound draws a round: half of them two or three plain locks and shares on one wait key,
// a fifth an MLOCK of both wait keys among plain locks and shares on them, the rest three or
// four permits of the semaphore (two of them are granted at once, the others queue). It returns
// the requests and the keys to observe.
func (w *worker) waitRound(now int64) ([]waitReq, []string) {
	rw := func(key string) waitReq {
		if w.rng.IntN(2) == 0 {
			return waitReq{ViaShared, []string{key}}
		}
		return waitReq{"lock", []string{key}}
	}
	var reqs []waitReq
	switch p := w.rng.Float64(); {
	case p < 0.5:
		// mostly a writer first, which the others (consecutive shares among them) queue behind
		key := waitKey(now, w.rng.IntN(waitKeysPerEpoch))
		reqs = append(reqs, waitReq{"lock", []string{key}})
		if w.rng.IntN(4) == 0 {
			reqs[0] = rw(key)
		}
		for range 1 + w.rng.IntN(2) {
			reqs = append(reqs, rw(key))
		}
		return reqs, []string{key}
	case p < 0.7:
		a, b := waitKey(now, 0), waitKey(now, 1)
		if w.rng.IntN(2) == 0 {
			a, b = b, a
		}
		// the MLOCK second, mostly behind a holder of one of its keys, and one request behind it
		reqs = []waitReq{rw(b), {ViaMLock, []string{a, b}}, rw(a)}
		if w.rng.IntN(2) == 0 {
			reqs[2] = rw(b)
		}
		return reqs, []string{a, b}
	default:
		key := waitSemKey(now)
		for range 3 + w.rng.IntN(2) {
			reqs = append(reqs, waitReq{ViaSem, []string{key}})
		}
		return reqs, []string{key}
	}
}

// waitOnce sends one request with WAIT and, once granted, holds briefly and gives back each of
// its tokens, or (one time in five) lets the lease expire. An MLOCK is recorded as one op per
// key, each with that key's token, as the kinds clients record theirs.
func (w *worker) waitOnce(q waitReq, owner string) {
	ttl := int64(300 + w.rng.IntN(501))
	wait := int64(1500 + w.rng.IntN(1501))
	ttlArg, waitArg := strconv.FormatInt(ttl, 10), strconv.FormatInt(wait, 10)
	base := Op{Kind: Acquire, Via: q.via, Key: q.keys[0], TTL: ttl, Owner: owner}
	var args []string
	switch q.via {
	case "lock":
		args = []string{"LOCK", base.Key, ttlArg}
	case ViaShared:
		args = []string{"LOCK", base.Key, ttlArg, "SHARED"}
	case ViaSem:
		base.Permits = waitPermits
		args = []string{"SEMACQUIRE", base.Key, strconv.Itoa(waitPermits), ttlArg}
	case ViaMLock:
		base.Keys = q.keys
		args = append([]string{"MLOCK", ttlArg}, q.keys...)
	}
	args = append(args, "OWNER", owner, "WAIT", waitArg)
	c := w.conn()
	base.Client, base.Node = w.id, c.addr
	base.Invoke = w.rec.now()
	// the reply may take the whole WAIT, then a request's usual bound
	v, err := c.do(time.Duration(wait)*time.Millisecond+opTimeout, args...)
	base.Complete = w.rec.now()
	base.Outcome, base.Err = outcomeOf(err)
	ops := []Op{base}
	if q.via == ViaMLock {
		ops = perKey(base)
		grantEach(ops, v)
	} else if base.Outcome == OK && v != nil {
		if n, ok := asInt(v); ok && n > 0 {
			ops[0].Granted, ops[0].Token = true, uint64(n)
		} else {
			unexpected(&ops[0], v)
		}
	}
	for _, op := range ops {
		w.rec.wait(op)
	}
	if !ops[0].Granted || w.rng.IntN(5) == 0 {
		return
	}
	// long enough, mostly, for the round's later requests to queue behind it
	w.sleep(50*time.Millisecond, 250*time.Millisecond)
	for _, op := range ops {
		rl := Op{Kind: Release, Key: op.Key, Owner: owner, Token: op.Token}
		cmd := "UNLOCK"
		if q.via == ViaSem {
			rl.Via, cmd = ViaSem, "SEMRELEASE"
		}
		v = w.call(&rl, cmd, op.Key, strconv.FormatUint(op.Token, 10))
		boolReply(&rl, v)
		w.rec.wait(rl)
	}
}

// observe polls LOCKWAITERS of keys in turn, through a node picked at random each time, until
// done is closed.
func (w *worker) observe(keys []string, done <-chan struct{}) {
	for i := 0; ; i++ {
		select {
		case <-done:
			return
		default:
		}
		key := keys[i%len(keys)]
		w.node = w.rng.IntN(len(w.addrs))
		var op Op
		v := w.call(&op, "LOCKWAITERS", key)
		if op.Outcome == OK {
			if ws, err := parseWaiters(v); err == nil {
				w.rec.queue(QueueRead{Client: w.id, Node: op.Node, Key: key, Invoke: op.Invoke, Complete: op.Complete, Waiters: ws})
			}
		}
		w.sleep(20*time.Millisecond, 60*time.Millisecond)
	}
}

// parseWaiters reads LOCKWAITERS's RESP2 reply: an array of flat maps [owner o kind k place p
// waiting-ms x wait-left-ms y].
func parseWaiters(v any) ([]QueuedWaiter, error) {
	a, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("not an array")
	}
	ws := make([]QueuedWaiter, 0, len(a))
	for _, x := range a {
		f, err := fields(x)
		if err != nil {
			return nil, err
		}
		o, ok1 := f["owner"].(string)
		k, ok2 := f["kind"].(string)
		p, ok3 := asInt(f["place"])
		if !ok1 || !ok2 || !ok3 || p <= 0 {
			return nil, fmt.Errorf("waiter fields")
		}
		ws = append(ws, QueuedWaiter{Owner: o, Kind: k, Place: uint64(p)})
	}
	return ws, nil
}

// WaitKindCounts is what the requests of one kind did.
type WaitKindCounts struct {
	Waits    int // requests with WAIT (an MLOCK once, however many keys it names)
	Granted  int // of those, granted (tokens)
	TimedOut int // of those, nil: the WAIT passed
	// Failed counts those answered with an error (CLUSTERDOWN, TRYAGAIN, no connection): not
	// granted, but not certainly never queued (a waiter whose node shuts down hears TRYAGAIN and
	// stays queued until its wait expires).
	Failed   int
	Unknown  int
	Observed int // of those, waiters whose place a LOCKWAITERS showed
}

// add counts one request.
func (c *WaitKindCounts) add(op Op, observed bool) {
	c.Waits++
	switch {
	case op.Outcome == Unknown:
		c.Unknown++
	case op.Outcome == Fail:
		c.Failed++
	case op.Granted:
		c.Granted++
	default:
		c.TimedOut++
	}
	if observed {
		c.Observed++
	}
}

func (c WaitKindCounts) String() string {
	return fmt.Sprintf("%d/%d/%d", c.Waits, c.Granted, c.Observed)
}

// WaitCounts is what the waiting workload did and how much of it the FIFO check could use.
type WaitCounts struct {
	WaitKindCounts           // every kind
	Lock, Shared, Sem, MLock WaitKindCounts
	Pairs                    int // pairs of granted, observed waiters of one key whose order was checked
	MixedPairs               int // of those, pairs of two kinds
	Batches                  int // pairs of shares next to each other in a queue whose grant in one entry was checked
	AfterGrant               int // LOCKWAITERS replies shown to follow a grant of their key, checked for waiters ahead of it
}

// waiterKind is how LOCKWAITERS names the kind of a request made via via.
func waiterKind(via string) string {
	switch via {
	case ViaShared:
		return KindShared
	case ViaSem:
		return KindSemaphore
	case ViaMLock:
		return ViaMLock
	}
	return KindLock
}

// seen is where a waiter was observed first.
type seen struct {
	key   string
	place uint64
}

// waitGrant is one key's grant to a waiter whose place was observed.
type waitGrant struct {
	op    Op // the request's op of that key: its token is that key's
	place uint64
}

// checkWaitOrder holds the server to the queues' FIFO, across the kinds (docs/locks.md,
// "Waiting"). Every check rests on two facts, not on times: each LOCKWAITERS reply shows one
// node's table after some prefix of the one committed log (stale or not, never a mix), and a
// place and a grant's token are values of one counter taken in log order. It asserts:
//   - LOCKWAITERS lists a queue in order of places, names each waiter by the kind it asked for,
//     and only on a key it asked for;
//   - a waiter keeps one place, and an MLOCK has the same place in each of its keys' queues (an
//     owner is unique per request; a follower whose leader died rejoins the same waiter);
//   - a grant's token is above its waiter's place (the place was taken when it queued);
//   - of two granted waiters of one key whose places were observed, whatever their kinds, the
//     earlier place has the lower token (for an MLOCK, its token of that key): a grant serves
//     the head of the queue (the head, then each next one that fits, in one entry), so no kind
//     overtakes another, and a waiting writer no later reader;
//   - overtaking of a waiter that then gave up: a reply that lists a waiter at a place above a
//     grant's token shows the table after that grant's entry, so it may list no waiter at or
//     before the grantee's place: that one was still queued, ahead of the grantee, when the
//     grantee was served (or the grantee was still queued after its own grant);
//   - consecutive shares are granted together: two shares whose places were observed, the
//     later queued before the earlier was granted (its place below that token), and no other
//     request that may have waited between them, are served in one hand-off entry, one right
//     after the other, so their tokens are consecutive (a token is max(counter+1, log index), so
//     two grants in different entries may be consecutive too: only a gap is certain).
//
// A waiter never observed, one whose WAIT passed (nil) and one whose outcome is unknown impose
// nothing of their own; one that may have waited between two shares spares them the batching
// check: a request whose place was not observed is ruled out only by a grant before the first
// share's, or by being sent after the first share's grant was acknowledged (its place is then
// above that grant's token).
func checkWaitOrder(waits []Op, queues []QueueRead) (WaitCounts, []string) {
	var n WaitCounts
	var bad []string
	reqs := map[string][]Op{} // owner -> its acquire ops, one per key
	for _, op := range waits {
		if op.Kind == Acquire {
			reqs[op.Owner] = append(reqs[op.Owner], op)
		}
	}
	places := map[string]seen{}
	for _, q := range queues {
		for i, x := range q.Waiters {
			if i > 0 && q.Waiters[i-1].Place >= x.Place {
				bad = append(bad, fmt.Sprintf("queue: LOCKWAITERS %s on %s at %.3fs listed place %d before %d",
					q.Key, q.Node, sec(q.Invoke), q.Waiters[i-1].Place, x.Place))
			}
			if prev, ok := places[x.Owner]; !ok {
				places[x.Owner] = seen{q.Key, x.Place}
			} else if prev.place != x.Place {
				bad = append(bad, fmt.Sprintf("queue: waiter %s seen at place %d of %s and at place %d of %s",
					x.Owner, prev.place, prev.key, x.Place, q.Key))
			}
			ops, known := reqs[x.Owner]
			if !known {
				continue
			}
			if want := waiterKind(ops[0].Via); x.Kind != want {
				bad = append(bad, fmt.Sprintf("queue: LOCKWAITERS %s on %s at %.3fs listed %s as %s, but it asked for %s",
					q.Key, q.Node, sec(q.Invoke), x.Owner, x.Kind, want))
			}
			if !slices.ContainsFunc(ops, func(op Op) bool { return op.Key == q.Key }) {
				bad = append(bad, fmt.Sprintf("queue: LOCKWAITERS %s on %s at %.3fs listed %s, which asked for %s",
					q.Key, q.Node, sec(q.Invoke), x.Owner, ops[0].Key))
			}
		}
	}

	byKey := map[string][]waitGrant{}
	onKey := map[string][]Op{} // every acquire op of a key
	for _, op := range waits {
		if op.Kind != Acquire {
			continue
		}
		onKey[op.Key] = append(onKey[op.Key], op)
		s, observed := places[op.Owner]
		if op.Via != ViaMLock || op.Key == op.Keys[0] {
			n.WaitKindCounts.add(op, observed)
			switch op.Via {
			case ViaShared:
				n.Shared.add(op, observed)
			case ViaSem:
				n.Sem.add(op, observed)
			case ViaMLock:
				n.MLock.add(op, observed)
			default:
				n.Lock.add(op, observed)
			}
		}
		if !observed || op.Outcome != OK || !op.Granted || op.Token == 0 {
			continue
		}
		if op.Token <= s.place {
			bad = append(bad, fmt.Sprintf("queue: %s was granted token %d, not above its place %d", op, op.Token, s.place))
		}
		byKey[op.Key] = append(byKey[op.Key], waitGrant{op, s.place})
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		gs := byKey[k]
		slices.SortFunc(gs, func(a, b waitGrant) int { return cmp.Compare(a.place, b.place) })
		n.Pairs += len(gs) * (len(gs) - 1) / 2
		perKind := map[string]int{}
		for _, g := range gs {
			perKind[g.op.Via]++
		}
		n.MixedPairs += len(gs) * (len(gs) - 1) / 2
		for _, c := range perKind {
			n.MixedPairs -= c * (c - 1) / 2
		}
		// tokens increasing along places, pair by neighbouring pair, is every pair in order
		for i := 1; i < len(gs); i++ {
			a, b := gs[i-1], gs[i]
			if a.op.Token >= b.op.Token {
				bad = append(bad, fmt.Sprintf("fifo: %s waited at place %d before %s at place %d, but was granted after it",
					a.op, a.place, b.op, b.place))
			}
		}
		bad = append(bad, checkBatches(gs, onKey[k], places, &n)...)
	}
	bad = append(bad, checkOvertaken(byKey, queues, &n)...)
	return n, bad
}

// checkOvertaken finds, in each LOCKWAITERS reply on a key, the grants of that key it is shown to
// follow (a waiter it lists has a place above the grant's token), and flags every waiter it lists
// at or before such a grantee's place. A waiter that was granted later is left to the order
// check, which flags the same pair.
func checkOvertaken(byKey map[string][]waitGrant, queues []QueueRead, n *WaitCounts) []string {
	var bad []string
	for _, q := range queues {
		if len(q.Waiters) == 0 {
			continue
		}
		last := slices.MaxFunc(q.Waiters, func(a, b QueuedWaiter) int { return cmp.Compare(a.Place, b.Place) })
		// the grants this reply shows applied (g's token was flagged already if not above its place)
		after := slices.DeleteFunc(slices.Clone(byKey[q.Key]), func(g waitGrant) bool {
			return g.op.Token >= last.Place || g.op.Token <= g.place
		})
		n.AfterGrant += len(after)
		for _, x := range q.Waiters {
			i := slices.IndexFunc(after, func(g waitGrant) bool {
				// a waiter granted after g is the order check's, which flags the same pair
				return x.Place <= g.place && (x.Owner == g.op.Owner || !slices.ContainsFunc(byKey[q.Key], func(o waitGrant) bool {
					return o.op.Owner == x.Owner && o.op.Token > g.op.Token
				}))
			})
			if i < 0 {
				continue
			}
			g := after[i]
			bad = append(bad, fmt.Sprintf("overtaken: LOCKWAITERS %s on %s at %.3fs listed %s at place %d and %s at place %d, after the entry of token %d, which %s got from place %d",
				q.Key, q.Node, sec(q.Invoke), x.Owner, x.Place, last.Owner, last.Place, g.op.Token, g.op, g.place))
		}
	}
	return bad
}

// checkBatches holds two shares of one key to being granted in one entry when they were next
// to each other in its queue as the first was granted: gs are the key's observed grants in
// place order, ops every request on the key.
func checkBatches(gs []waitGrant, ops []Op, places map[string]seen, n *WaitCounts) []string {
	var bad []string
	var shares []waitGrant
	for _, g := range gs {
		if g.op.Via == ViaShared {
			shares = append(shares, g)
		}
	}
	for i := 1; i < len(shares); i++ {
		a, b := shares[i-1], shares[i]
		if b.place > a.op.Token || a.op.Token > b.op.Token {
			continue // b queued after a's grant; or out of order, which the order check flags
		}
		// may x have waited between a and b when a was granted?
		between := func(x Op) bool {
			if x.Owner == a.op.Owner || x.Owner == b.op.Owner {
				return false
			}
			// A failed request may still have queued (its node shut down while it waited), so
			// it is judged by its place or its timing, as an unknown one is.
			if s, ok := places[x.Owner]; ok {
				return s.place > a.place && s.place < b.place
			}
			granted := x.Outcome == OK && x.Granted && x.Token > 0
			return !(granted && x.Token < a.op.Token) && x.Invoke <= a.op.Complete
		}
		if slices.ContainsFunc(ops, between) {
			continue
		}
		n.Batches++
		if b.op.Token != a.op.Token+1 {
			bad = append(bad, fmt.Sprintf("batch: %s at place %d and %s at place %d waited next to each other when the first was granted, but were not granted in one entry",
				a.op, a.place, b.op, b.place))
		}
	}
	return bad
}
