package ops

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/raftlock/raftlock/node"
)

// fakeLocks serves pages by cursor and remembers the queries it was asked. mu orders the
// handler's writes before the test's reads (the race detector does not see the socket between).
type fakeLocks struct {
	pages map[string]node.LockPage // by cursor ("" is the first)
	mu    sync.Mutex
	err   error
	asked []node.LockPageQuery
}

func (f *fakeLocks) LockPage(q node.LockPageQuery) (node.LockPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, q)
	if f.err != nil {
		return node.LockPage{}, f.err
	}
	page, ok := f.pages[q.Cursor]
	if !ok {
		return node.LockPage{}, fmt.Errorf("%w: cursor %q", node.ErrInvalidLockQuery, q.Cursor)
	}
	return page, nil
}

// getLocks serves one /locks.json request with query args straight from serveLocks (no guard),
// the clock at now.
func getLocks(t *testing.T, src Locks, now time.Time, args url.Values) (int, locksPage) {
	t.Helper()
	mux := http.NewServeMux()
	serveLocks(mux, func(h http.HandlerFunc) http.Handler { return h }, nil, src, func() time.Time { return now })
	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest("GET", "/locks.json?"+args.Encode(), nil))
	var page locksPage
	if rec.Code == http.StatusOK {
		if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
			t.Fatalf("/locks.json = %q: %v", rec.Body, err)
		}
	}
	return rec.Code, page
}

// /locks.json passes the database, the pattern and the cursor through, pages on the server's
// cursor, quotes keys and owners, gives each holder when it was granted and through which node
// (nothing when not recorded), and each waiter how long it has waited and its node.
func TestLocksJSON(t *testing.T) {
	now := time.Unix(1000, 0)
	src := &fakeLocks{pages: map[string]node.LockPage{
		"": {Next: "0361", Holders: []node.LockHolder{
			{Key: []byte("app:a"), Kind: "lock", Owner: []byte("<b>alice</b>"), Token: 7, PTTL: 1500 * time.Millisecond,
				Since: time.UnixMilli(999_250), Node: "n2"},
			{Key: []byte("app:\xff"), Kind: "shared", Owner: []byte("say \"hi\"\n"), Token: 8, PTTL: -1},
		}, Queues: []node.KeyQueue{{Key: []byte("app:a"), Waiters: []node.LockWaiter{
			{Owner: []byte("bob"), Kind: "lock", Waited: 2 * time.Second, Since: time.UnixMilli(998_000), Node: "n3"},
			{Owner: []byte("carol"), Kind: "mlock", Waited: 250 * time.Millisecond},
		}}}},
		"0361": {Next: "0", Holders: []node.LockHolder{{Key: []byte("app:b"), Kind: "semaphore", Owner: []byte("w"), Token: 9, PTTL: time.Second}}},
	}}
	code, first := getLocks(t, src, now, url.Values{"db": {"3"}, "match": {"app:*"}})
	if code != http.StatusOK {
		t.Fatalf("first page = %d, want 200", code)
	}
	want := locksPage{DB: 3, Match: "app:*", Next: "0361",
		Holders: []locksHolder{
			{Key: "app:a", Kind: "lock", Owner: "<b>alice</b>", Token: 7, PTTLMs: 1500, SinceMs: 999_250, Node: "n2"},
			{Key: `app:\xff`, Kind: "shared", Owner: `say \"hi\"\n`, Token: 8, PTTLMs: -1},
		},
		Queues: []locksQueue{{Key: "app:a", Waiters: []locksWaiter{{Owner: "bob", Kind: "lock", WaitingMs: 2000, Node: "n3"}, {Owner: "carol", Kind: "mlock", WaitingMs: 250}}}},
	}
	if diff := cmp.Diff(want, first); diff != "" {
		t.Errorf("first page (-want +got):\n%s", diff)
	}
	code, second := getLocks(t, src, now, url.Values{"db": {"3"}, "match": {"app:*"}, "cursor": {first.Next}})
	if code != http.StatusOK || second.Next != "0" || len(second.Holders) != 1 || second.Holders[0].Key != "app:b" || len(second.Queues) != 0 {
		t.Errorf("second page = %d %+v, want app:b and the walk's end", code, second)
	}
	wantAsked := []node.LockPageQuery{
		{DB: 3, Match: []byte("app:*"), Count: node.MaxLockPageCount},
		{DB: 3, Match: []byte("app:*"), Cursor: "0361", Count: node.MaxLockPageCount},
	}
	if diff := cmp.Diff(wantAsked, src.asked); diff != "" {
		t.Errorf("queries (-want +got):\n%s", diff)
	}
	src.asked = nil
	if code, _ := getLocks(t, src, now, url.Values{}); code != http.StatusOK || len(src.asked) != 1 || src.asked[0].DB != 0 || src.asked[0].Match != nil {
		t.Errorf("no arguments = %d, asked %+v: want database 0, every key", code, src.asked)
	}
}

// What /locks.json refuses, and which status says so.
func TestLocksJSONRefused(t *testing.T) {
	src := &fakeLocks{pages: map[string]node.LockPage{"": {Next: "0"}}}
	for _, tc := range []struct {
		name  string
		args  url.Values
		err   error // the server's answer
		want  int
		asked bool // whether the server was asked
	}{
		{"a pattern at the bound", url.Values{"match": {strings.Repeat("*", maxMatchBytes)}}, nil, http.StatusOK, true},
		{"a pattern past the bound", url.Values{"match": {strings.Repeat("*", maxMatchBytes+1)}}, nil, http.StatusBadRequest, false},
		{"a database that is not a number", url.Values{"db": {"zero"}}, nil, http.StatusBadRequest, false},
		{"a query the server refuses", url.Values{"db": {"99"}}, fmt.Errorf("%w: db 99", node.ErrInvalidLockQuery), http.StatusBadRequest, true},
		{"a user gone", url.Values{}, fmt.Errorf("%w: ops", node.ErrUnknownUser), http.StatusForbidden, true},
		{"anything else", url.Values{}, fmt.Errorf("the disk is on fire"), http.StatusInternalServerError, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src.asked, src.err = nil, tc.err
			code, _ := getLocks(t, src, time.Unix(0, 0), tc.args)
			if code != tc.want || (len(src.asked) > 0) != tc.asked {
				t.Errorf("status %d, server asked %d times; want %d, asked: %v", code, len(src.asked), tc.want, tc.asked)
			}
		})
	}
}

// Once the node's clients must authenticate, /locks.json needs an @admin user's basic auth, as
// /status.json does, and the page is read as that user.
func TestLocksJSONBehindAuth(t *testing.T) {
	src := &fakeLocks{pages: map[string]node.LockPage{"": {Next: "0"}}}
	s, err := Start(Config{Addr: "127.0.0.1:0", Users: users{required: true, user: "ops", pass: "pw"}, Locks: src},
		fixedStats{}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	get := func(user, pass string) int {
		t.Helper()
		req, _ := http.NewRequest("GET", "http://"+s.Addr().String()+"/locks.json", nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	if code := get("", ""); code != http.StatusUnauthorized {
		t.Errorf("no credentials: %d, want 401", code)
	}
	if code := get("ops", "wrong"); code != http.StatusUnauthorized {
		t.Errorf("a wrong password: %d, want 401", code)
	}
	asked := func() []node.LockPageQuery {
		src.mu.Lock()
		defer src.mu.Unlock()
		return src.asked
	}
	if got := asked(); len(got) != 0 {
		t.Errorf("the server was asked %+v for a refused request", got)
	}
	if code := get("ops", "pw"); code != http.StatusOK || len(asked()) != 1 || asked()[0].User != "ops" {
		t.Errorf("the admin's credentials: %d, asked %+v; want 200, read as ops", code, asked())
	}
}
