package chaos

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// Op kinds.
const (
	Acquire  = "acquire"
	Renew    = "renew"
	Release  = "release"
	Read     = "read"
	Validate = "validate" // VALIDATE key token: Success says whether token still holds key
)

// Outcomes.
const (
	OK      = "ok"      // the reply says what happened
	Fail    = "fail"    // CLUSTERDOWN/TRYAGAIN or a failed dial: certainly nothing happened
	Unknown = "unknown" // UNCERTAIN, timeout, I/O error: it may or may not have happened
)

// never is the completion time of an op whose outcome is unknown: it may take effect at any
// time after its invocation.
const never = math.MaxInt64

// Op is one client operation in the history. Times are nanoseconds since the run started
// (monotonic); Complete is never for an unknown outcome.
type Op struct {
	Client   int    `json:"client"`
	Node     string `json:"node"`
	Key      string `json:"key"`
	Kind     string `json:"kind"`
	Via      string `json:"via,omitempty"`   // acquire: "lock" (native), "set" (SET NX PX), "hash" (a script's HSET), or a lock kind (ViaShared, ViaSem, ViaMLock)
	Owner    string `json:"owner,omitempty"` // acquire: the attempt's unique owner; renew/release: the holder's
	TTL      int64  `json:"ttl_ms,omitempty"`
	Token    uint64 `json:"token,omitempty"` // acquire: granted token (0: unknown); renew/release: the token used
	Invoke   int64  `json:"invoke_ns"`
	Complete int64  `json:"complete_ns"`
	Outcome  string `json:"outcome"`
	Granted  bool   `json:"granted,omitempty"` // acquire ok: granted (token or OK), false = nil (held)
	Success  bool   `json:"success,omitempty"` // renew/release ok: 1
	Free     bool   `json:"free,omitempty"`    // read ok: nil
	RdOwner  string `json:"read_owner,omitempty"`
	RdToken  uint64 `json:"read_token,omitempty"`
	RdPTTL   int64  `json:"read_pttl,omitempty"`
	Err      string `json:"err,omitempty"`
	// The lock kinds (kinds.go). Permits is a SEMACQUIRE's count, DelayMs an acquire's
	// lock-delay (DELAY), Keys all the keys of the MLOCK an acquire is one key's part of. A read
	// that is not free says which kind of holding it saw (RdKind): a plain lock's holder is in
	// RdOwner and RdToken, a lock-delay's token in RdToken, shares and permits in RdHolders.
	Permits   int64    `json:"permits,omitempty"`
	DelayMs   int64    `json:"delay_ms,omitempty"`
	Keys      []string `json:"keys,omitempty"`
	RdKind    string   `json:"read_kind,omitempty"`
	RdPermits int64    `json:"read_permits,omitempty"`
	RdHolders []Holder `json:"read_holders,omitempty"`
}

// Holder is one share or permit a LOCKINFO listed.
type Holder struct {
	Owner string `json:"owner"`
	Token uint64 `json:"token"`
	PTTL  int64  `json:"pttl"`
}

func (o Op) String() string {
	res := o.Outcome
	if o.Outcome == OK {
		switch o.Kind {
		case Acquire:
			switch {
			case !o.Granted:
				res = "nil"
			case o.Token == 0:
				res = "OK (token unknown)"
			default:
				res = fmt.Sprintf("token %d", o.Token)
			}
		case Renew, Release, Validate:
			res = fmt.Sprint(o.Success)
		case Read:
			res = o.readString()
		}
	}
	switch o.Kind {
	case Acquire:
		verb := "lock"
		switch o.Via {
		case "set":
			verb = "set-nx"
		case "hash":
			verb = "hash-lock"
		case ViaShared:
			verb = "lock-shared"
		case ViaSem:
			verb = fmt.Sprintf("semacquire(%d)", o.Permits)
		case ViaMLock:
			verb = fmt.Sprintf("mlock%v", o.Keys)
		}
		if o.DelayMs > 0 {
			verb += fmt.Sprintf(" delay %dms", o.DelayMs)
		}
		return fmt.Sprintf("c%d %s %s %dms %s -> %s", o.Client, verb, o.Key, o.TTL, o.Owner, res)
	case Renew:
		return fmt.Sprintf("c%d renew %s tok %d %dms -> %s", o.Client, o.Key, o.Token, o.TTL, res)
	case Release:
		verb := "unlock"
		if o.Via == ViaSem {
			verb = "semrelease"
		}
		return fmt.Sprintf("c%d %s %s tok %d -> %s", o.Client, verb, o.Key, o.Token, res)
	case Validate:
		return fmt.Sprintf("c%d validate %s tok %d -> %s", o.Client, o.Key, o.Token, res)
	}
	return fmt.Sprintf("c%d lockinfo %s -> %s", o.Client, o.Key, res)
}

// readString is what an acknowledged LOCKINFO saw.
func (o Op) readString() string {
	switch {
	case o.Free:
		return "free"
	case o.RdKind == KindDelay:
		return fmt.Sprintf("delay of tok %d/%dms", o.RdToken, o.RdPTTL)
	case o.RdKind == KindShared || o.RdKind == KindSemaphore:
		hs := make([]string, len(o.RdHolders))
		for i, h := range o.RdHolders {
			hs[i] = fmt.Sprintf("%s/%d/%dms", h.Owner, h.Token, h.PTTL)
		}
		kind := o.RdKind
		if o.RdKind == KindSemaphore {
			kind += fmt.Sprintf("(%d)", o.RdPermits)
		}
		return kind + fmt.Sprint(hs)
	}
	return fmt.Sprintf("%s/%d/%dms", o.RdOwner, o.RdToken, o.RdPTTL)
}

// Access is one read-modify-write of a protected resource by a lock holder: it read Based and
// wrote Based+1. Fenced accesses carry the holder's token and may be rejected; unfenced ones
// are always accepted.
type Access struct {
	Client     int    `json:"client"`
	Key        string `json:"key"`
	Token      uint64 `json:"token"`
	Start      int64  `json:"start_ns"` // the read
	At         int64  `json:"at_ns"`    // the write
	LeaseFrom  int64  `json:"lease_from_ns"`
	ValidUntil int64  `json:"valid_until_ns"` // the holder's own view of its lease end
	Based      int64  `json:"based"`
	Paused     bool   `json:"paused,omitempty"` // the holder paused past its lease between read and write
	Stale      bool   `json:"stale,omitempty"`  // unfenced: a newer holder had already used the resource
	Accepted   bool   `json:"accepted"`
	Rejected   string `json:"rejected,omitempty"` // "read" or "write": where the resource fenced it off
	Seen       uint64 `json:"seen,omitempty"`     // fenced: the highest token the resource had seen then
}

// Fault is one injected fault, for the record.
type Fault struct {
	Kind  string `json:"kind"`
	Start int64  `json:"start_ns"`
	End   int64  `json:"end_ns"`
	Desc  string `json:"desc"`
}

// ClockEvent is a change of one node's lease clock offset: a DEBUG CLOCK-SHIFT, or a restart
// (a new process starts at offset 0). It took effect somewhere in [Invoke, Complete].
type ClockEvent struct {
	Node     int   `json:"node"`
	Invoke   int64 `json:"invoke_ns"`
	Complete int64 `json:"complete_ns"`
	Offset   int64 `json:"offset_ns"` // the offset after the event
}

// History is everything a run records.
type History struct {
	Seed     uint64       `json:"seed"`
	Ops      []Op         `json:"ops"`
	Fenced   []Access     `json:"fenced"`
	Unfenced []Access     `json:"unfenced"`
	Faults   []Fault      `json:"faults"`
	Clock    []ClockEvent `json:"clock"`
	// Typed are the ops on counters, sorted sets and lists (datatypes.go), Multi the multi-key
	// requests and group reads (multikey.go), Publishes and Subs the pub/sub workload
	// (pubsub.go). None of them is in Ops: the lock model does not know them.
	Typed     []TypedOp      `json:"typed,omitempty"`
	Multi     []MultiOp      `json:"multi,omitempty"`
	Publishes []Publish      `json:"publishes,omitempty"`
	Subs      []Subscription `json:"subscriptions,omitempty"`
	// Kinds are the ops on the lock kinds' keys (kinds.go), checked by their own model.
	Kinds []Op `json:"kinds,omitempty"`
	// Waits are the LOCK ... WAIT requests and their UNLOCKs (waits.go), Queues the
	// LOCKWAITERS replies the waiting client read meanwhile: checkWaitOrder holds them to FIFO.
	Waits  []Op        `json:"waits,omitempty"`
	Queues []QueueRead `json:"queues,omitempty"`
}

// recorder collects the history from concurrent clients and holds the two protected resources.
type recorder struct {
	start time.Time
	mu    sync.Mutex
	h     History
	// fenced is the resource that rejects stale tokens: per key, the highest token it has seen
	// (on a read or a write) and its value.
	fenced map[string]*cell
	// unfenced is the same resource without the check: what a lock alone protects.
	unfenced map[string]*cell
}

type cell struct {
	token uint64
	value int64
}

func newRecorder(seed uint64) *recorder {
	return &recorder{start: time.Now(), h: History{Seed: seed}, fenced: map[string]*cell{}, unfenced: map[string]*cell{}}
}

func (r *recorder) now() int64 { return int64(time.Since(r.start)) }

// completion is an op's completion time as the history records it: never for an unknown
// outcome, which may take effect at any time after its invocation.
func completion(outcome string, complete int64) int64 {
	if outcome == Unknown {
		return never
	}
	return complete
}

// record appends v to one of the history's lists under the recorder's lock.
func record[T any](r *recorder, list *[]T, v T) {
	r.mu.Lock()
	*list = append(*list, v)
	r.mu.Unlock()
}

func (r *recorder) add(op Op) {
	op.Complete = completion(op.Outcome, op.Complete)
	record(r, &r.h.Ops, op)
}

// kind records an op on a lock kinds' key.
func (r *recorder) kind(op Op) {
	op.Complete = completion(op.Outcome, op.Complete)
	record(r, &r.h.Kinds, op)
}

// wait records an op of the waiting workload.
func (r *recorder) wait(op Op) {
	op.Complete = completion(op.Outcome, op.Complete)
	record(r, &r.h.Waits, op)
}

func (r *recorder) queue(q QueueRead) { record(r, &r.h.Queues, q) }

func (r *recorder) typed(op TypedOp) {
	op.Complete = completion(op.Outcome, op.Complete)
	record(r, &r.h.Typed, op)
}

func (r *recorder) multi(op MultiOp) {
	op.Complete = completion(op.Outcome, op.Complete)
	record(r, &r.h.Multi, op)
}

func (r *recorder) publish(p Publish) {
	p.Complete = completion(p.Outcome, p.Complete)
	record(r, &r.h.Publishes, p)
}

func (r *recorder) subscription(s Subscription) { record(r, &r.h.Subs, s) }

func (r *recorder) fault(f Fault) { record(r, &r.h.Faults, f) }

func (r *recorder) clock(e ClockEvent) { record(r, &r.h.Clock, e) }

func cellOf(m map[string]*cell, key string) *cell {
	c := m[key]
	if c == nil {
		c = &cell{}
		m[key] = c
	}
	return c
}

// fencedRead reads key's value as the holder of token. Like every access, it raises the
// resource's token, so an older holder can no longer write what it read before: a check on
// writes alone would let two holders read the same value and both write (a lost update).
func (r *recorder) fencedRead(key string, token uint64) (int64, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := cellOf(r.fenced, key)
	if token < c.token {
		return 0, false
	}
	c.token = token
	return c.value, true
}

// fencedWrite writes based+1 as the holder of token unless a newer token was seen, and
// records the access.
func (r *recorder) fencedWrite(a Access) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := cellOf(r.fenced, a.Key)
	a.At, a.Seen = r.now(), c.token
	a.Accepted = a.Token >= c.token
	if a.Accepted {
		c.token, c.value = a.Token, a.Based+1
	} else {
		a.Rejected = "write"
	}
	r.h.Fenced = append(r.h.Fenced, a)
	return a.Accepted
}

// fencedRejected records an access the resource fenced off on its read.
func (r *recorder) fencedRejected(a Access) {
	r.mu.Lock()
	defer r.mu.Unlock()
	a.At, a.Rejected, a.Seen = r.now(), "read", cellOf(r.fenced, a.Key).token
	r.h.Fenced = append(r.h.Fenced, a)
}

func (r *recorder) unfencedRead(key string) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return cellOf(r.unfenced, key).value
}

// unfencedWrite writes based+1 whatever the token: it only notes that a newer holder had been
// there before (the write the fenced resource would refuse).
func (r *recorder) unfencedWrite(a Access) {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := cellOf(r.unfenced, a.Key)
	a.At, a.Accepted, a.Stale = r.now(), true, a.Token < c.token
	c.value, c.token = a.Based+1, max(c.token, a.Token)
	r.h.Unfenced = append(r.h.Unfenced, a)
}

// snapshot copies the history so far.
func (r *recorder) snapshot() History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.h
	h.Ops = append([]Op(nil), h.Ops...)
	h.Fenced = append([]Access(nil), h.Fenced...)
	h.Unfenced = append([]Access(nil), h.Unfenced...)
	h.Faults = append([]Fault(nil), h.Faults...)
	h.Clock = append([]ClockEvent(nil), h.Clock...)
	h.Typed = append([]TypedOp(nil), h.Typed...)
	h.Multi = append([]MultiOp(nil), h.Multi...)
	h.Publishes = append([]Publish(nil), h.Publishes...)
	h.Subs = append([]Subscription(nil), h.Subs...)
	h.Kinds = append([]Op(nil), h.Kinds...)
	h.Waits = append([]Op(nil), h.Waits...)
	h.Queues = append([]QueueRead(nil), h.Queues...)
	return h
}
