package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/raftlock/raftlock/fsm"
	"github.com/raftlock/raftlock/node"
	"github.com/raftlock/raftlock/script"
)

// groupAdmin is a fake node's administration with members that serve clients, for CLUSTER.
type groupAdmin struct {
	*fakeNode
	members []node.Member
}

func (a groupAdmin) Members() ([]node.Member, error) { return a.members, nil }

// startGroups serves a server over two fake groups (both led here) and returns its address,
// the fakes, and a key of each group.
func startGroups(t *testing.T) (addr string, groups []*fakeNode, keys [2]string) {
	t.Helper()
	groups = []*fakeNode{newFakeNode(), newFakeNode()}
	var reps []Replica
	for _, f := range groups {
		f.startLocks(t)
		reps = append(reps, f)
	}
	admin := groupAdmin{fakeNode: groups[0], members: []node.Member{{ID: "n1", RaftAddr: "fake:1", ClientAddr: "127.0.0.1:7001", Voter: true, Leader: true}}}
	addr, _ = serveDeps(t, Deps{Replica: groups[0], Groups: reps, Admin: admin}, nil)
	found := 0
	for i := 0; found < 2; i++ {
		k := fmt.Sprintf("key%d", i)
		g := fsm.GroupOfSlot(fsm.KeySlot([]byte(k)), 2)
		if keys[g] == "" {
			keys[g] = k
			found++
		}
	}
	return addr, groups, keys
}

// holds reports whether f's table holds key of database 0.
func holds(f *fakeNode, key string) bool {
	var ok bool
	f.ExecLocal(func(v node.View) { _, _, ok = v.Lookup(append([]byte{0}, key...)) })
	return ok
}

func TestSlotsSplitEvenlyOverGroups(t *testing.T) {
	for _, groups := range []int{1, 2, 3, 4, 7, 16, 1000} {
		next := 0
		for g := range groups {
			first, last := fsm.DefaultSlots(g, groups)
			if first != next || last < first {
				t.Fatalf("%d groups: group %d serves %d-%d; want it to start at %d", groups, g, first, last, next)
			}
			if fsm.GroupOfSlot(first, groups) != g || fsm.GroupOfSlot(last, groups) != g {
				t.Fatalf("%d groups: slots %d and %d map to groups %d and %d; want %d", groups, first, last,
					fsm.GroupOfSlot(first, groups), fsm.GroupOfSlot(last, groups), g)
			}
			next = last + 1
		}
		if next != hashSlots {
			t.Fatalf("%d groups end at slot %d; want %d", groups, next-1, hashSlots-1)
		}
	}
}

// TestRequestsRunInTheirKeysGroup: a key's commands run in the group of its slot, and only
// there; a request with keys of different slots is refused (CROSSSLOT), as a transaction with
// them is, and a script cannot reach a key of another group.
func TestRequestsRunInTheirKeysGroup(t *testing.T) {
	addr, groups, keys := startGroups(t)
	c := client(t, addr, 2)
	ctx := context.Background()
	for _, k := range keys {
		if err := c.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for g, k := range keys {
		if !holds(groups[g], k) || holds(groups[1-g], k) {
			t.Errorf("%s (group %d): held by group 0 %v, group 1 %v; want its own group only", k, g, holds(groups[0], k), holds(groups[1], k))
		}
	}
	if err := c.MSet(ctx, keys[0], "1", keys[1], "2").Err(); err == nil || !strings.HasPrefix(err.Error(), "CROSSSLOT") {
		t.Errorf("MSET over two groups: %v; want CROSSSLOT", err)
	}
	if err := c.MSet(ctx, "{t}a", "1", "{t}b", "2").Err(); err != nil {
		t.Errorf("MSET of one hash tag: %v", err)
	}
	_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, keys[0], "x", 0)
		p.Set(ctx, keys[1], "x", 0)
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") && !strings.Contains(err.Error(), "EXECABORT") {
		t.Errorf("MULTI over two groups: %v; want CROSSSLOT, EXECABORT", err)
	}
	if got, err := c.Eval(ctx, "return redis.call('get', KEYS[1])", []string{keys[0]}).Result(); err != nil || got != "v" {
		t.Errorf("a script reading its own key: %v, %v", got, err)
	}
	if _, err := c.Eval(ctx, "return redis.call('get', ARGV[1])", []string{keys[0]}, keys[1]).Result(); err == nil ||
		!strings.Contains(err.Error(), "non local key") {
		t.Errorf("a script reading another group's key: %v; want refused", err)
	}
}

// TestWholeDatabaseCommandsSpanGroups: DBSIZE, KEYS, SCAN and LOCKS see every group's keys;
// FLUSHALL and SCRIPT LOAD reach every group; CLUSTER SLOTS shows each group's range.
func TestWholeDatabaseCommandsSpanGroups(t *testing.T) {
	addr, groups, keys := startGroups(t)
	c := client(t, addr, 2)
	ctx := context.Background()
	var all []string
	for i := range 10 {
		k := fmt.Sprintf("{%s}-%d", keys[i%2], i)
		all = append(all, k)
		if err := c.Set(ctx, k, "v", 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(all)
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 10 {
		t.Errorf("DBSIZE: %d, %v; want 10", n, err)
	}
	if got, err := c.Keys(ctx, "*").Result(); err != nil || !slices.Equal(got, all) {
		t.Errorf("KEYS *: %v, %v; want %v", got, err, all)
	}
	var scanned []string
	for cur, rounds := uint64(0), 0; ; rounds++ {
		ks, next, err := c.Scan(ctx, cur, "*", 3).Result()
		if err != nil || rounds > 20 {
			t.Fatalf("SCAN round %d: %v", rounds, err)
		}
		scanned = append(scanned, ks...)
		if cur = next; cur == 0 {
			break
		}
	}
	slices.Sort(scanned)
	if !slices.Equal(scanned, all) {
		t.Errorf("SCAN: %v; want every key once: %v", scanned, all)
	}

	sha, err := c.ScriptLoad(ctx, "return 1").Result()
	if err != nil {
		t.Fatal(err)
	}
	for g, f := range groups {
		var ok bool
		f.ExecLocal(func(v node.View) { _, ok = v.Script(sha) })
		if !ok {
			t.Errorf("SCRIPT LOAD: group %d does not hold the script", g)
		}
	}
	if got, err := c.EvalSha(ctx, sha, []string{keys[1]}).Result(); err != nil || got != int64(1) {
		t.Errorf("EVALSHA on group 1's key after SCRIPT LOAD: %v, %v", got, err)
	}

	slots, err := c.ClusterSlots(ctx).Result()
	if err != nil || len(slots) != 2 || slots[0].Start != 0 || slots[0].End != 8191 || slots[1].Start != 8192 || slots[1].End != 16383 {
		t.Errorf("CLUSTER SLOTS: %+v, %v; want 0-8191 and 8192-16383", slots, err)
	}

	if err := c.FlushAll(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := c.DBSize(ctx).Result(); err != nil || n != 0 {
		t.Errorf("DBSIZE after FLUSHALL: %d, %v; want 0", n, err)
	}
}

// TestKeyEventsOfEveryGroupReachSubscribers: a subscriber hears the keyspace events of every
// group, each judged against where that group's log ended when it subscribed: group 1's log,
// shorter than group 0's, does not make its new entries look old.
func TestKeyEventsOfEveryGroupReachSubscribers(t *testing.T) {
	addr, _, keys := startGroups(t)
	c := client(t, addr, 2)
	ctx := context.Background()
	if err := c.ConfigSet(ctx, "notify-keyspace-events", "KEA").Err(); err != nil {
		t.Fatal(err)
	}
	for i := range 20 { // group 0's log grows well past group 1's
		c.Set(ctx, fmt.Sprintf("{%s}-%d", keys[0], i), "v", 0)
	}
	sub := client(t, addr, 2).Subscribe(ctx, "__keyspace@0__:"+keys[1])
	defer sub.Close()
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Set(ctx, keys[1], "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Del(ctx, keys[1]).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-sub.Channel():
		if m.Payload != "del" && m.Payload != "set" {
			t.Errorf("keyspace event %q; want set or del", m.Payload)
		}
	case <-time.After(5 * time.Second):
		t.Error("no keyspace event of group 1's key reached the subscriber")
	}
}

// TestQueuedWaitersOfTwoGroups: each group numbers its waiters with its own counter, so two
// clients waiting in two groups can have the same place; each is served its own grant.
func TestQueuedWaitersOfTwoGroups(t *testing.T) {
	addr, _, keys := startGroups(t)
	ctx := context.Background()
	holder := client(t, addr, 2)
	var tokens [2]int64
	for g, k := range keys {
		tok, err := holder.Do(ctx, "LOCK", k, 30000).Int64()
		if err != nil {
			t.Fatal(err)
		}
		tokens[g] = tok
	}
	type grant struct {
		tok int64
		err error
	}
	var waits [2]chan grant
	for g, k := range keys {
		waits[g] = make(chan grant, 1)
		c := client(t, addr, 2)
		go func() {
			tok, err := c.Do(ctx, "LOCK", k, 30000, "WAIT", 10000).Int64()
			waits[g] <- grant{tok, err}
		}()
	}
	time.Sleep(200 * time.Millisecond) // both queued
	for g, k := range keys {
		if err := holder.Do(ctx, "UNLOCK", k, tokens[g]).Err(); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-waits[g]:
			if got.err != nil || got.tok <= tokens[g] {
				t.Errorf("the waiter on %s (group %d): token %d, %v; want a grant above %d", k, g, got.tok, got.err, tokens[g])
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("the waiter on %s (group %d) was not served after its holder's UNLOCK", k, g)
		}
	}
}

// TestTransactionsInGroups: a transaction's keyed commands share a group, a command without keys
// may join any, and one that must reach every group is refused inside MULTI.
func TestTransactionsInGroups(t *testing.T) {
	addr, groups, keys := startGroups(t)
	c := client(t, addr, 2)
	ctx := context.Background()
	_, err := c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, keys[1], "x", 0)
		p.Publish(ctx, "ch", "m")
		return nil
	})
	if err != nil || !holds(groups[1], keys[1]) {
		t.Errorf("MULTI of a group-1 key and a PUBLISH: %v (held in group 1: %v)", err, holds(groups[1], keys[1]))
	}
	_, err = c.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, keys[1], "y", 0)
		p.DBSize(ctx)
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "not allowed inside MULTI") && !strings.Contains(err.Error(), "EXECABORT") {
		t.Errorf("MULTI with DBSIZE: %v; want refused", err)
	}
}

// TestReadIndexOfAGroup: RAFT READINDEX g answers from group g's administration (a follower
// backing up every group asks each group's leader), as do RAFT DIGEST g and SNAPSHOT g, and
// each refuses a group this node does not run.
func TestReadIndexOfAGroup(t *testing.T) {
	groups := []*fakeNode{newFakeNode(), newFakeNode()}
	var reps []Replica
	for _, f := range groups {
		f.startLocks(t)
		reps = append(reps, f)
	}
	admin := groupAdmin{fakeNode: groups[0]}
	addr, _ := serveDeps(t, Deps{Replica: groups[0], Groups: reps, Admin: admin, GroupAdmins: []Admin{admin, groupAdmin{fakeNode: groups[1]}}}, nil)
	r := dialRaw(t, addr)
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("key%d", i); fsm.GroupOfSlot(fsm.KeySlot([]byte(k)), 2) == 1 {
			key = k
		}
	}
	for range 3 { // group 1 applies more than group 0
		if got := r.do("SET", key, "v"); got != "+OK\r\n" {
			t.Fatalf("SET %s = %q", key, got)
		}
	}
	want0, want1 := groups[0].Stats().AppliedIndex, groups[1].Stats().AppliedIndex
	if want0 == want1 {
		t.Fatalf("both groups applied %d: the test cannot tell them apart", want0)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"RAFT", "READINDEX"}, fmt.Sprintf(":%d\r\n", want0)},
		{[]string{"RAFT", "READINDEX", "0"}, fmt.Sprintf(":%d\r\n", want0)},
		{[]string{"RAFT", "READINDEX", "1"}, fmt.Sprintf(":%d\r\n", want1)},
		{[]string{"RAFT", "READINDEX", "2"}, "-ERR RAFT READINDEX: no raft group \"2\" on this node (it runs 2)\r\n"},
		{[]string{"RAFT", "READINDEX", "one"}, "-ERR RAFT READINDEX: no raft group \"one\" on this node (it runs 2)\r\n"},
		{[]string{"RAFT", "READINDEX", "1", "2"}, "-ERR wrong number of arguments for 'raft|readindex' command\r\n"},
		{[]string{"RAFT", "DIGEST", "1"}, fmt.Sprintf("*2\r\n:%d\r\n$0\r\n\r\n", want1)},
		{[]string{"RAFT", "DIGEST", "3"}, "-ERR RAFT DIGEST: no raft group \"3\" on this node (it runs 2)\r\n"},
		{[]string{"RAFT", "SNAPSHOT", "1"}, "+OK\r\n"},
		{[]string{"RAFT", "SNAPSHOT", "x"}, "-ERR RAFT SNAPSHOT: no raft group \"x\" on this node (it runs 2)\r\n"},
	} {
		if got := r.do(tc.args...); got != tc.want {
			t.Errorf("%v = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// A peer's acrossGroups forwards a write that spans the groups to each node that leads some:
// that node runs it in the groups it leads and answers which, a (group, reply) pair each, so
// that the sender can send it again to a group whose leadership moved meanwhile.
func TestForwardedSpanningWriteSaysWhichGroupsRanIt(t *testing.T) {
	addr, groups, _ := startGroups(t)
	c := dialRaw(t, addr)
	if got := c.do("RAFT", "FORWARDED"); got != "+OK\r\n" {
		t.Fatalf("RAFT FORWARDED = %q", got)
	}
	sha := "$40\r\n" + script.SHA1Hex([]byte("return 1")) + "\r\n"
	if got, want := c.do("SCRIPT", "LOAD", "return 1"), "*4\r\n:0\r\n"+sha+":1\r\n"+sha; got != want {
		t.Errorf("SCRIPT LOAD over a forwarding link = %q, want %q", got, want)
	}
	groups[1].setLeader(false)
	if got, want := c.do("FLUSHALL"), "*2\r\n:0\r\n+OK\r\n"; got != want {
		t.Errorf("FLUSHALL over a forwarding link, leading group 0 only = %q, want %q", got, want)
	}
	groups[0].setLeader(false)
	if got := c.do("FLUSHALL"); got != "*0\r\n" {
		t.Errorf("FLUSHALL over a forwarding link, leading no group = %q, want an empty array", got)
	}

	ran, err := parseGroupReplies([]byte("*4\r\n:1\r\n-ERR no\r\n:0\r\n$2\r\nok\r\n"), 2)
	if err != nil || string(ran[1]) != "-ERR no\r\n" || string(ran[0]) != "$2\r\nok\r\n" || len(ran) != 2 {
		t.Errorf("parseGroupReplies = %v, %v", ran, err)
	}
	for _, bad := range []string{"-ERR refused\r\n", "+OK\r\n", "*2\r\n:2\r\n+OK\r\n", "*1\r\n:0\r\n", "*2\r\n$1\r\n0\r\n+OK\r\n", "*2\r\n:0\r\n", "\r\n", ""} {
		if ran, err := parseGroupReplies([]byte(bad), 2); err == nil {
			t.Errorf("parseGroupReplies(%q) = %v, want an error", bad, ran)
		}
	}
}

// addressLater is this node's replica of a group that n2 leads, whose client address this node
// learns only later: from group 0's member table, as cmd/raftlock's addressedReplica reads it.
type addressLater struct {
	*fakeNode
	addr atomic.Value // string
}

func (a *addressLater) IsLeader() bool { return false }
func (a *addressLater) Leadership() node.Leadership {
	addr, _ := a.addr.Load().(string)
	return node.Leadership{ID: "n2", ClientAddr: addr, Changed: a.fakeNode.leaderChanged()}
}

// A request of a group whose leader is known but not yet its address waits, and is woken when
// group 0's member table changes (where members announce their addresses), not only at the end
// of --leader-wait.
func TestGroupWaitWokenByAnnouncedAddress(t *testing.T) {
	leaderAddr, _ := serveNode(t, newFakeNode(), nil)
	lc := dialRaw(t, leaderAddr)
	g0 := newFakeNode()
	g1 := &addressLater{fakeNode: newFakeNode()}
	for _, f := range []*fakeNode{g0, g1.fakeNode} {
		f.startLocks(t)
	}
	addr, _ := serveDeps(t, Deps{Replica: g0, Groups: []Replica{g0, g1}}, func(c *Config) { c.LeaderWait = time.Minute })
	key := ""
	for i := 0; key == ""; i++ {
		if k := fmt.Sprintf("key%d", i); fsm.GroupOfSlot(fsm.KeySlot([]byte(k)), 2) == 1 {
			key = k
		}
	}
	if got := lc.do("SET", key, "v"); got != "+OK\r\n" {
		t.Fatalf("SET on the leader = %q", got)
	}
	c := dialRaw(t, addr)
	reply := make(chan string, 1)
	go func() { reply <- c.do("GET", key) }()
	select {
	case got := <-reply:
		t.Fatalf("GET answered %q before the leader's address was known", got)
	case <-time.After(300 * time.Millisecond):
	}
	g1.addr.Store(leaderAddr)
	g0.setLeader(true) // group 0's member table changed: its LeaderChanged fires
	select {
	case got := <-reply:
		if got != "$1\r\nv\r\n" {
			t.Errorf("GET through the group's leader = %q, want v", got)
		}
	case <-time.After(20 * time.Second): // --leader-wait is a minute: only the wake-up answers sooner
		t.Fatal("the waiting GET was not woken by group 0's change")
	}
}
