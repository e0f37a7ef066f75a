package ops

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/raftlock/raftlock/node"
)

// Locks reads the lock table for the status page's locks view (server.Server).
type Locks interface {
	LockPage(q node.LockPageQuery) (node.LockPage, error)
}

// maxMatchBytes bounds the pattern /locks.json takes: compiling and matching cost grow with it.
const maxMatchBytes = 1024

// locksPage is /locks.json: one page of database DB's holders (LOCKS's walk, at most
// node.MaxLockPageCount table entries looked at, so a page may hold fewer holders, or none,
// with more to come), read from this node's applied table as a READONLY read is (on a follower it
// may lag the leader), and the queue of each listed key that has waiters (replicated: a follower
// lists it as the leader does, as of what it applied).
//
// Keys and owners are bytes: each is written as Go's strconv.Quote writes it, without the
// enclosing quotes (printable UTF-8 as it is; a quote, a backslash, control characters and
// bytes that are not UTF-8 escaped, the last as \xNN), so strconv.Unquote of it in quotes gives
// the bytes back and two values never show alike.
type locksPage struct {
	DB      int           `json:"db"`
	Match   string        `json:"match"` // quoted as keys are; "" lists every key
	Next    string        `json:"next"`  // the cursor of the next page; "0": this one is the last
	Holders []locksHolder `json:"holders"`
	Queues  []locksQueue  `json:"queues"`
}

type locksHolder struct {
	Key    string `json:"key"`
	Kind   string `json:"kind"` // lock, shared or semaphore
	Owner  string `json:"owner"`
	Token  uint64 `json:"token"`
	PTTLMs int64  `json:"pttl_ms"` // -1: no lease
	// SinceMs is when it was granted, Unix ms on the leader's clock, and Node the ID of the node
	// its client asked through: 0 and "" when not recorded (a key SET without NX).
	SinceMs int64  `json:"since_ms"`
	Node    string `json:"node"`
}

// locksQueue is a key's waiters in the order they will be served.
type locksQueue struct {
	Key     string        `json:"key"`
	Waiters []locksWaiter `json:"waiters"`
}

type locksWaiter struct {
	Owner     string `json:"owner"`
	Kind      string `json:"kind"` // lock, shared, semaphore or mlock
	WaitingMs int64  `json:"waiting_ms"`
	Node      string `json:"node"` // the node its client is on; "" when not recorded
}

// quoteBytes is b as strconv.Quote writes it, without the enclosing quotes.
func quoteBytes(b []byte) string {
	q := strconv.Quote(string(b))
	return q[1 : len(q)-1]
}

// serveLocks serves /locks.json through guard: ?db= (0 if absent), ?match= (a glob, as LOCKS
// MATCH takes it; every key if absent or empty), ?cursor= (a page's next; the start if absent).
// The page is read as the guard's user when the node's clients must authenticate (so LOCKS's
// key permissions apply to it), and as the default user otherwise.
func serveLocks(mux *http.ServeMux, guard func(http.HandlerFunc) http.Handler, users Users, src Locks, now func() time.Time) {
	mux.Handle("GET /locks.json", guard(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		args := r.URL.Query()
		q := node.LockPageQuery{Cursor: args.Get("cursor"), Count: node.MaxLockPageCount}
		if db := args.Get("db"); db != "" {
			n, err := strconv.Atoi(db)
			if err != nil {
				http.Error(w, "400 bad request: db is a database number", http.StatusBadRequest)
				return
			}
			q.DB = n
		}
		match := args.Get("match")
		if len(match) > maxMatchBytes {
			http.Error(w, "400 bad request: match is longer than "+strconv.Itoa(maxMatchBytes)+" bytes", http.StatusBadRequest)
			return
		}
		if match != "" {
			q.Match = []byte(match)
		}
		if credentialsSet(users) {
			q.User, _, _ = r.BasicAuth() // the guard checked them
		}
		page, err := src.LockPage(q)
		switch {
		case errors.Is(err, node.ErrInvalidLockQuery):
			http.Error(w, "400 bad request: "+err.Error(), http.StatusBadRequest)
			return
		case errors.Is(err, node.ErrUnknownUser):
			http.Error(w, "403 forbidden: "+err.Error(), http.StatusForbidden)
			return
		case err != nil:
			http.Error(w, "500 internal server error: "+err.Error(), http.StatusInternalServerError)
			return
		}
		doc := locksPage{DB: q.DB, Match: quoteBytes(q.Match), Next: page.Next, Holders: []locksHolder{}, Queues: []locksQueue{}}
		for _, h := range page.Holders {
			pttl := h.PTTL.Milliseconds()
			if h.PTTL < 0 {
				pttl = -1
			}
			var since int64
			if !h.Since.IsZero() {
				since = h.Since.UnixMilli()
			}
			doc.Holders = append(doc.Holders, locksHolder{Key: quoteBytes(h.Key), Kind: h.Kind, Owner: quoteBytes(h.Owner),
				Token: uint64(h.Token), PTTLMs: pttl, SinceMs: since, Node: h.Node})
		}
		for _, kq := range page.Queues {
			lq := locksQueue{Key: quoteBytes(kq.Key), Waiters: make([]locksWaiter, 0, len(kq.Waiters))}
			for _, wt := range kq.Waiters {
				lq.Waiters = append(lq.Waiters, locksWaiter{Owner: quoteBytes(wt.Owner), Kind: wt.Kind,
					WaitingMs: wt.Waited.Milliseconds(), Node: wt.Node})
			}
			doc.Queues = append(doc.Queues, lq)
		}
		body, _ := json.Marshal(doc) // strings and numbers only
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
}
