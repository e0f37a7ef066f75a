package chaos

import (
	"fmt"
	"math"
	"sync"
	"time"
)

// Op kinds.
const (
	Acquire = "acquire"
	Renew   = "renew"
	Release = "release"
	Read    = "read"
)

// Outcomes.
const (
	OK      = "ok"      // the reply says what happened
	Fail    = "fail"    // CLUSTERDOWN/TRYAGAIN: certainly nothing happened
	Unknown = "unknown" // UNCERTAIN, timeout, I/O error: it may or may not have happened
)

// Op is one client operation in the history. Times are nanoseconds since the run started
// (monotonic); Complete is math.MaxInt64 for an unknown outcome.
type Op struct {
	Client   int    `json:"client"`
	Node     string `json:"node"`
	Key      string `json:"key"`
	Kind     string `json:"kind"`
	Owner    string `json:"owner,omitempty"` // acquire: the attempt's unique owner; renew/release: the holder's
	TTL      int64  `json:"ttl_ms,omitempty"`
	Token    uint64 `json:"token,omitempty"` // acquire: granted token; renew/release: the token used
	Invoke   int64  `json:"invoke_ns"`
	Complete int64  `json:"complete_ns"`
	Outcome  string `json:"outcome"`
	Granted  bool   `json:"granted,omitempty"` // acquire ok: true = token, false = nil (held)
	Success  bool   `json:"success,omitempty"` // renew/release ok: 1
	Free     bool   `json:"free,omitempty"`    // read ok: nil
	RdOwner  string `json:"read_owner,omitempty"`
	RdToken  uint64 `json:"read_token,omitempty"`
	RdPTTL   int64  `json:"read_pttl,omitempty"`
	Err      string `json:"err,omitempty"`
}

func (o Op) String() string {
	res := o.Outcome
	if o.Outcome == OK {
		switch o.Kind {
		case Acquire:
			if o.Granted {
				res = fmt.Sprintf("token %d", o.Token)
			} else {
				res = "nil"
			}
		case Renew, Release:
			res = fmt.Sprint(o.Success)
		case Read:
			if o.Free {
				res = "free"
			} else {
				res = fmt.Sprintf("%s/%d/%dms", o.RdOwner, o.RdToken, o.RdPTTL)
			}
		}
	}
	switch o.Kind {
	case Acquire:
		return fmt.Sprintf("c%d lock %s %dms %s -> %s", o.Client, o.Key, o.TTL, o.Owner, res)
	case Renew:
		return fmt.Sprintf("c%d renew %s tok %d %dms -> %s", o.Client, o.Key, o.Token, o.TTL, res)
	case Release:
		return fmt.Sprintf("c%d unlock %s tok %d -> %s", o.Client, o.Key, o.Token, res)
	}
	return fmt.Sprintf("c%d lockinfo %s -> %s", o.Client, o.Key, res)
}

// Write is one write to the fenced resource.
type Write struct {
	Client     int    `json:"client"`
	Key        string `json:"key"`
	Token      uint64 `json:"token"`
	At         int64  `json:"at_ns"`
	ValidUntil int64  `json:"valid_until_ns"` // the writer's own view of its lease end
	Accepted   bool   `json:"accepted"`
}

// Fault is one injected fault, for the record.
type Fault struct {
	Kind  string `json:"kind"`
	Start int64  `json:"start_ns"`
	End   int64  `json:"end_ns"`
	Desc  string `json:"desc"`
}

// History is everything a run records.
type History struct {
	Seed   uint64  `json:"seed"`
	Ops    []Op    `json:"ops"`
	Writes []Write `json:"writes"`
	Faults []Fault `json:"faults"`
}

// recorder collects the history from concurrent clients.
type recorder struct {
	start time.Time
	mu    sync.Mutex
	h     History
	res   map[string]uint64 // fenced resource: highest token accepted per key
}

func newRecorder(seed uint64) *recorder {
	return &recorder{start: time.Now(), h: History{Seed: seed}, res: map[string]uint64{}}
}

func (r *recorder) now() int64 { return int64(time.Since(r.start)) }

func (r *recorder) add(op Op) {
	if op.Outcome == Unknown {
		op.Complete = math.MaxInt64
	}
	r.mu.Lock()
	r.h.Ops = append(r.h.Ops, op)
	r.mu.Unlock()
}

// write is the fenced resource: it accepts a token no lower than the highest it has seen.
func (r *recorder) write(client int, key string, token uint64, validUntil int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	ok := token >= r.res[key]
	if ok {
		r.res[key] = token
	}
	r.h.Writes = append(r.h.Writes, Write{Client: client, Key: key, Token: token, At: r.now(),
		ValidUntil: validUntil, Accepted: ok})
	return ok
}

func (r *recorder) fault(f Fault) {
	r.mu.Lock()
	r.h.Faults = append(r.h.Faults, f)
	r.mu.Unlock()
}
