package soak

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Operation families: each request of the mix is timed and counted under one.
const (
	famLockWait   = "lock_wait"  // LOCK key ttl OWNER id WAIT ms on a few contended keys (includes the wait)
	famUnlock     = "unlock"     // UNLOCK key token after a grant
	famSetNX      = "set_nx"     // SET key val NX PX ms
	famScript     = "evalsha"    // the compare-and-delete script after a SET NX grant
	famCollection = "collection" // HSET, HGET, SADD, SREM, RPUSH, LTRIM, LPOP on a bounded key set
	famLease      = "lease"      // LOCK key ttl with a short lease, never released
	famPublish    = "publish"    // PUBLISH of a sequence number
	// famAll is every request but lock_wait's, whose latency is mostly the wait for the holder.
	famAll = "all"
)

// families is the order of the families in the CSV files and the plot.
var families = []string{famLockWait, famUnlock, famSetNX, famScript, famCollection, famLease, famPublish}

// window is one family's requests through one node over one interval.
type window struct {
	latency []time.Duration // of requests that got a reply (an error reply included)
	ops     int             // requests sent
	errors  map[string]int  // by kind: the reply's first word (UNCERTAIN, TRYAGAIN ...), or conn, timeout
}

func (w *window) errorCount() int {
	n := 0
	for _, c := range w.errors {
		n += c
	}
	return n
}

// recorder collects every request's outcome by node and family, an interval at a time, and
// the longest time in which no request was answered.
type recorder struct {
	mu struct {
		sync.Mutex
		cur      []map[string]*window // per node index
		on       bool                 // false: outcomes are not recorded (capacity measurement)
		lastOK   time.Time
		stall    time.Duration // longest gap between answered requests while on
		answered int64
	}
}

func newRecorder(nodes int) *recorder {
	r := &recorder{}
	r.mu.cur = make([]map[string]*window, nodes)
	for i := range r.mu.cur {
		r.mu.cur[i] = map[string]*window{}
	}
	return r
}

// start begins recording: the stall clock starts now.
func (r *recorder) start(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.on, r.mu.lastOK = true, now
	for i := range r.mu.cur {
		r.mu.cur[i] = map[string]*window{}
	}
}

// observe records one request through node of family fam, which took d and ended with err.
// A nil reply (redis.Nil: a lock held by someone else) is an answer, not an error.
func (r *recorder) observe(node int, fam string, at time.Time, d time.Duration, err error) {
	kind := errorKind(err)
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.mu.on {
		return
	}
	w := r.mu.cur[node][fam]
	if w == nil {
		w = &window{errors: map[string]int{}}
		r.mu.cur[node][fam] = w
	}
	w.ops++
	if kind != "" {
		w.errors[kind]++
	}
	if kind == "" || isReplyError(err) {
		w.latency = append(w.latency, d)
	}
	if kind == "" {
		end := at.Add(d)
		r.mu.stall = max(r.mu.stall, end.Sub(r.mu.lastOK))
		if end.After(r.mu.lastOK) {
			r.mu.lastOK = end
		}
		r.mu.answered++
	}
}

// swap returns the interval's windows per node and starts the next.
func (r *recorder) swap() []map[string]*window {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.mu.cur
	r.mu.cur = make([]map[string]*window, len(out))
	for i := range r.mu.cur {
		r.mu.cur[i] = map[string]*window{}
	}
	return out
}

// stop ends recording at now and returns the answered requests and the longest stall.
func (r *recorder) stop(now time.Time) (answered int64, stall time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.mu.on = false
	r.mu.stall = max(r.mu.stall, now.Sub(r.mu.lastOK))
	return r.mu.answered, r.mu.stall
}

// errorKind names what went wrong: "" for an answer (nil included), the first word of an error
// reply (UNCERTAIN, TRYAGAIN, NOSCRIPT, ERR ...), "timeout", or "conn" for the connection
// failing or refused.
func errorKind(err error) string {
	var ne net.Error
	switch {
	case err == nil, errors.Is(err, redis.Nil):
		return ""
	case isReplyError(err):
		word, _, _ := strings.Cut(err.Error(), " ")
		return word
	case errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne) && ne.Timeout():
		return "timeout"
	}
	return "conn"
}

// isReplyError reports whether err is the server's error reply.
func isReplyError(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && !errors.Is(err, redis.Nil)
}

// quantiles returns the p50, p99 and p999 of ds (sorted in place); zero for none.
func quantiles(ds []time.Duration) (p50, p99, p999 time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration {
		i := int(q * float64(len(ds)))
		return ds[min(i, len(ds)-1)]
	}
	return at(0.50), at(0.99), at(0.999)
}

// familySamples merges one interval's windows of every node into one FamilySample per family
// (those with requests), and famAll.
func familySamples(sample int, perNode []map[string]*window) []FamilySample {
	var out []FamilySample
	var all []time.Duration
	allOps, allErrs := 0, 0
	for _, fam := range families {
		var lat []time.Duration
		ops, errs := 0, 0
		for _, m := range perNode {
			if w := m[fam]; w != nil {
				lat = append(lat, w.latency...)
				ops += w.ops
				errs += w.errorCount()
			}
		}
		if ops == 0 {
			continue
		}
		if fam != famLockWait {
			all = append(all, lat...)
			allOps += ops
			allErrs += errs
		}
		p50, p99, p999 := quantiles(lat)
		out = append(out, FamilySample{Sample: sample, Family: fam, Ops: ops, Errors: errs, P50: p50, P99: p99, P999: p999})
	}
	if allOps > 0 {
		p50, p99, p999 := quantiles(all)
		out = append(out, FamilySample{Sample: sample, Family: famAll, Ops: allOps, Errors: allErrs, P50: p50, P99: p99, P999: p999})
	}
	return out
}
