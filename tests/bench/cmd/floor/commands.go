package main

import (
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"strings"
	"sync"
	"time"
)

// table is the locks: key → holder (a value or a token) and lease deadline.
// A lease that ran out is found out when its key is next touched.
type table struct {
	mu      sync.Mutex
	locks   map[string]lock
	token   uint64
	scripts map[string]bool // SHA1 of the loaded compare-and-delete scripts
}

type lock struct {
	value    string
	token    uint64
	deadline time.Time
}

func newTable() *table { return &table{locks: map[string]lock{}, scripts: map[string]bool{}} }

// heldLocked returns key's lock if its lease has not run out.
func (t *table) heldLocked(key string, now time.Time) (lock, bool) {
	l, ok := t.locks[key]
	if ok && !now.Before(l.deadline) {
		delete(t.locks, key)
		return lock{}, false
	}
	return l, ok
}

// record is one write's log record: its kind, key, holder and lease.
func record(kind byte, key, value []byte, token uint64, ttlMS int64) []byte {
	rec := make([]byte, 0, 32+len(key)+len(value))
	rec = append(rec, kind)
	rec = binary.AppendUvarint(rec, uint64(len(key)))
	rec = append(rec, key...)
	rec = binary.AppendUvarint(rec, uint64(len(value)))
	rec = append(rec, value...)
	rec = binary.AppendUvarint(rec, token)
	return binary.AppendVarint(rec, ttlMS)
}

// handle answers one command. A write changes the table, then queues its
// record in the log (durable): its reply reaches the socket only once the
// record is synced (syncedWriter), so a reply never announces what a crash
// could lose. What a crash loses of the table does not matter here: the log
// is never read back.
func (s *server) handle(c *client, args [][]byte) {
	switch name := strings.ToUpper(string(args[0])); {
	case name == "PING":
		c.w.WriteString("+PONG\r\n")
	case name == "LOCK" && len(args) == 3:
		s.lock(c, args[1], args[2], nil)
	case name == "LOCK" && len(args) == 5 && eq(args[3], "OWNER"):
		s.lock(c, args[1], args[2], args[4])
	case name == "UNLOCK" && len(args) == 3:
		s.unlock(c, args[1], args[2])
	case name == "SET" && len(args) == 6 && eq(args[3], "NX") && eq(args[4], "PX"):
		s.setNX(c, args[1], args[2], args[5])
	case name == "SCRIPT" && len(args) == 3 && eq(args[1], "LOAD"):
		sum := sha1.Sum(args[2])
		sha := hex.EncodeToString(sum[:])
		s.locks.mu.Lock()
		s.locks.scripts[sha] = true
		s.locks.mu.Unlock()
		c.w.WriteString("$40\r\n" + sha + "\r\n")
	case name == "EVALSHA" && len(args) == 5 && eq(args[2], "1"):
		s.compareAndDelete(c, strings.ToLower(string(args[1])), args[3], args[4])
	case name == "EVAL" && len(args) == 5 && eq(args[2], "1"):
		s.compareAndDelete(c, "", args[3], args[4])
	case name == "DEL" && len(args) == 2:
		s.del(c, args[1])
	case name == "INFO":
		// What the benchmark driver asks to find a cluster's leader, as it asks raftlock.
		state := "Leader"
		if !s.leads() {
			state = "Follower"
		}
		info := "# Raft\r\nraft_state:" + state + "\r\n"
		c.w.WriteString("$" + strconv.Itoa(len(info)) + "\r\n" + info + "\r\n")
	default:
		writeError(c.w, "ERR the floor server does not serve '"+string(args[0])+"' with "+strconv.Itoa(len(args)-1)+" arguments")
	}
}

// notLeader refuses a write on a raft floor's follower.
const notLeader = "READONLY the raft floor takes writes on its leader only"

func eq(b []byte, upper string) bool { return strings.EqualFold(string(b), upper) }

// LOCK key ttl [OWNER owner] → :token, or nil while someone else holds it;
// the same owner again gets its token back with a new lease.
func (s *server) lock(c *client, key, ttl, owner []byte) {
	if tok, ok := s.acquire(c, 'L', key, owner, ttl, owner != nil, "ERR invalid ttl"); ok {
		c.w.WriteString(":" + strconv.FormatUint(tok, 10) + "\r\n")
	}
}

// SET key value NX PX ttl → +OK, or nil while held.
func (s *server) setNX(c *client, key, value, ttl []byte) {
	if _, ok := s.acquire(c, 'S', key, value, ttl, false, "ERR invalid expire time in 'set' command"); ok {
		c.w.WriteString("+OK\r\n")
	}
}

// acquire grants key to holder for ttl milliseconds unless someone else holds
// it (with renew, the same holder again keeps its token and gets a new lease),
// and reports its token, its record queued. Otherwise it has replied
// (nil, or an error: badTTL for a ttl that is not a positive integer).
func (s *server) acquire(c *client, kind byte, key, holder, ttl []byte, renew bool, badTTL string) (uint64, bool) {
	ms, err := strconv.ParseInt(string(ttl), 10, 64)
	if err != nil || ms <= 0 {
		writeError(c.w, badTTL)
		return 0, false
	}
	if !s.leads() {
		writeError(c.w, notLeader)
		return 0, false
	}
	t, now := s.locks, time.Now()
	t.mu.Lock()
	l, held := t.heldLocked(string(key), now)
	if held && (!renew || l.value != string(holder)) {
		t.mu.Unlock()
		c.w.WriteString("$-1\r\n")
		return 0, false
	}
	tok := l.token
	if !held {
		t.token++
		tok = t.token
	}
	t.locks[string(key)] = lock{value: string(holder), token: tok, deadline: now.Add(time.Duration(ms) * time.Millisecond)}
	t.mu.Unlock()
	s.durable(c, record(kind, key, holder, tok, ms))
	return tok, true
}

// UNLOCK key token → :1 released, :0 not held with that token.
func (s *server) unlock(c *client, key, token []byte) {
	tok, err := strconv.ParseUint(string(token), 10, 64)
	if err != nil {
		writeError(c.w, "ERR invalid token")
		return
	}
	s.release(c, 'U', key, nil, tok, func(l lock) bool { return l.token == tok })
}

// EVALSHA sha 1 key value, or EVAL script 1 key value → :1 deleted, :0 not
// holding value. The floor has no Lua: every script it is sent is taken to be
// the compare-and-delete release (the one script the drivers send), run
// natively; EVALSHA still needs the script loaded first (sha "" is EVAL's).
func (s *server) compareAndDelete(c *client, sha string, key, value []byte) {
	if sha != "" {
		s.locks.mu.Lock()
		loaded := s.locks.scripts[sha]
		s.locks.mu.Unlock()
		if !loaded {
			writeError(c.w, "NOSCRIPT No matching script. Please use EVAL.")
			return
		}
	}
	s.release(c, 'D', key, value, 0, func(l lock) bool { return l.value == string(value) })
}

// DEL key → :1 deleted, :0 no such key.
func (s *server) del(c *client, key []byte) {
	s.release(c, 'D', key, nil, 0, func(lock) bool { return true })
}

// release deletes key if its lock matches and replies :1, its record
// queued; :0 when key is free or its lock does not match.
func (s *server) release(c *client, kind byte, key, value []byte, token uint64, matches func(lock) bool) {
	if !s.leads() {
		writeError(c.w, notLeader)
		return
	}
	t := s.locks
	t.mu.Lock()
	l, held := t.heldLocked(string(key), time.Now())
	if !held || !matches(l) {
		t.mu.Unlock()
		c.w.WriteString(":0\r\n")
		return
	}
	delete(t.locks, string(key))
	t.mu.Unlock()
	s.durable(c, record(kind, key, value, token, 0))
	c.w.WriteString(":1\r\n")
}
