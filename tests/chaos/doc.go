// Package chaos owns raftlock's Jepsen-style fault harness. It runs a cluster of real raftlock
// processes on loopback (127.0.0.2 and up), each behind proxies that carry node-to-node traffic
// (raft, and a follower's forwarding of client requests to the leader) so every directed link
// can be cut or slowed while clients still reach every node directly. A seeded nemesis injects
// faults one at a time or mixed (faults.go): partitions (leader isolated, minority/majority,
// bridge), SIGSTOP/SIGCONT, kill -9 and restart (of one node or all), slow links, lease-clock
// skew and jumps (--test-clock, DEBUG CLOCK-SHIFT; see clock.go for what is promised), RAFT
// REMOVE and re-add with --join, snapshot installs forced by tiny snapshot thresholds, and disk
// faults (disk.go): a disk that fails every write (--test-disk-faults, SIGUSR2) and a full one
// (a tmpfs per node, when the harness may mount one).
//
// Clients (workload.go) acquire with LOCK and with SET NX PX, renew (some deliberately late),
// release, read holder and token, and read-modify-write two protected resources, one fenced by
// the token and one not; one more client takes hour-long locks whose fate is checked at the end.
// The history is checked (checks.go, model.go): per-key linearizability with porcupine (expiry
// a hidden step allowed once the lease may have ended), fencing tokens unique and increasing in
// real-time order, the fenced resource (token order, no lost update, no holder fenced off inside
// its lease), no acknowledged operation lost, identical tables on every node after healing,
// recovery within a bounded time, and no panic or data race in any node's log. The unfenced
// resource's overlaps are counted, not failed: they show the faults bite.
//
// More clients work on the data types lock recipes keep besides the lock (datatypes.go): the
// counter of Redisson's semaphores and fenced locks (INCR, INCRBY, DECRBY, GET, its
// permit-taking script), the sorted-set semaphore of Symfony and redis-semaphore (ZADD, ZREM,
// ZREMRANGEBYSCORE, ZCARD, ZSCORE, redis-semaphore's acquire script) and python-redis-lock's
// signal list (LPUSH, RPOP, LLEN). Each type has its own porcupine model, checked per key
// (datamodels.go); unknown outcomes are handled as for the locks.
//
// Two clients work on the lock kinds (kinds.go): shares (LOCK ... SHARED) and plain locks on the
// same keys, MLOCK over two or three of those keys, semaphore permits (SEMACQUIRE of 2), and
// lock-delays (DELAY) on leases short enough to expire; they renew, release, forget (the lease
// expires), VALIDATE and LOCKINFO them through any node. A porcupine model per key
// (kindsmodel.go) holds the server to shared/exclusive exclusion, permits never oversold, no
// grant while a lock-delay may still run (timed from the expiry, with the same clock slack as a
// lease), tokens increasing, and exact LOCKINFO and VALIDATE replies; an MLOCK's all or nothing
// is checked across its keys, and every kind's tokens join the fencing check. These clients do
// not WAIT: a waiter makes a request that does not wait refused on a free key, which the models
// do not know of.
//
// Waiting has keys of its own (waits.go): one client sends rounds of two to four requests with
// WAIT at once, each on its own connection through a node picked at random, under owners unique
// per request: plain LOCKs and shares (LOCK ... SHARED) on two keys, an MLOCK of both among them,
// or permits (SEMACQUIRE of 2) on a semaphore key of their own. Leases are short; it gives its
// tokens back soon (UNLOCK per key, SEMRELEASE) or lets them expire, and while a round lasts it
// polls LOCKWAITERS on the round's keys through any node, recording each waiter's place. The
// queues' FIFO is checked across kinds (checkWaitOrder), from tokens and places (times only to
// know a request was sent after a grant was acknowledged), so stale follower reads and slow
// replies raise no false alarm: each reply lists places in order and waiters by the kind and key they asked for; a waiter keeps one
// place, an MLOCK the same in both queues; a grant's token is above its place; of two granted
// waiters of a key whose places were observed, the earlier place has the lower token (an MLOCK's
// token of that key), so no reader overtakes a waiting writer nor any waiter another; a reply
// that lists a waiter whose place is above a grant's token shows that grant applied, so it may
// list nobody at or before the grantee's place (one that gave up later was overtaken); and two
// shares that waited next to each other when the first was granted, with nothing that may have
// waited between them, were granted in one entry: consecutive tokens. A waiter never observed,
// given up (nil) or of unknown outcome imposes nothing of its own; the grants join the fencing
// check.
//
// Two more workloads check DESIGN.md §8.7 and §8.8 (multikey.go, pubsub.go). Multi-key clients
// set every key of a group to a fresh value with one script or MULTI/EXEC, or DEL the whole
// group, and read groups on followers' own tables; collection groups (a hash, a sorted set and
// a list) get one fresh value added to all three keys the same ways (HSET, ZADD, LPUSH), and
// are read with one read-only script. A group seen split, during the run or on any node after
// healing, is a request applied in part (whatever its outcome: an unknown one may have applied
// whole or not at all). CHAOS_NONATOMIC=1 make chaos-short runs against nodes built with the tag
// chaos_nonatomic, which propose a request's commands one entry each, and passes only if that
// is caught. Publishers publish "key=value" after each acknowledged SET; a subscriber on every
// node (RESP3, plus one in RESP2 subscribed mode) reads the key on the same connection after each
// message, and must see the change; no subscription may receive a message twice, or a
// publisher's messages out of order, or lose one published while it was up. A follower that
// installs the leader's snapshot skips the log entries it covers, messages included, so the
// server closes its subscribers' connections then: a loss on a subscription that stayed up
// across an install is a violation too, counted apart (lost_in_snapshot) to say where it came
// from.
//
// TestChaosShort is the short mode (make chaos-short, part of make test); cmd/raftlock-chaos
// (under this directory) is the long mode (make chaos). A failing run leaves its history,
// porcupine's visualizations and every node's log in one folder and prints its path.
package chaos
