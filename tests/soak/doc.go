// Package soak is raftlock's soak test (make soak, docs/soak.md): a 3-node cluster of real
// raftlock processes on loopback held under a steady mixed load for half an hour while nodes
// restart, watched for what only a long run shows: memory, goroutines or file descriptors that
// grow, and latency that drifts.
//
// The load (load.go) is a mix over one connection per worker, workers spread over the three
// nodes' client ports (a follower forwards): LOCK key ttl OWNER id WAIT ms on four contended
// keys, then UNLOCK; SET key val NX PX ms, then EVALSHA of the compare-and-delete script;
// HSET, HGET, SADD, SREM, RPUSH (trimmed with LTRIM) and LPOP on a bounded set of keys; LOCK
// with a 500 ms lease never released, so leases expire all the time; and PUBLISH of sequence
// numbers on three channels, one publisher each, to a subscriber on every node (pubsub.go).
// The key space is bounded: the data set does not grow by design. The mix first runs unpaced
// (20 s) to measure the cluster's capacity; then each worker is paced at Load (0.7) of its own
// unpaced rate, so the mix keeps its proportions. Clients ride through restarts: an error (a
// refused connection, a timeout, a reply such as -UNCERTAIN or -TRYAGAIN) is counted by kind
// and the worker goes on at its pace.
//
// Every RestartEvery (4 min), half an interval off the samples, n2 or n3 in turn is restarted,
// each alternating SIGTERM and SIGKILL (n2 TERM, n3 KILL, n2 KILL, n3 TERM ...), and the run
// waits for its /readyz and a PING. n1 is never restarted: it is the process held under load
// for the whole half hour, through its peers' restarts and the leader changes they cause, so a
// leak shows on its curve rather than being reset by a restart every few minutes.
//
// Every Interval (1 min) each node is sampled: its resident memory, open files and goroutines
// as its own /metrics reports them (served to loopback without credentials); and the load's requests, errors by kind and p50/p99/p999 latency per
// family over the interval (of requests that got a reply; a timeout or a connection error is
// counted, not timed). soak.csv has a row per node per interval, with the load its clients sent
// through that node; latency.csv a row per family per interval, every node's clients together;
// restarts.csv the restarts. soak.svg is drawn from the same figures.
//
// # The checks (Check, DefaultLimits)
//
// The machine a soak runs on is noisy (two cores, shared), so the checks compare medians, not
// single samples. Growth is judged per process (a node and its PID: n1 has one for the whole
// run, n2 and n3 a new one at each restart): for each process's RSS, goroutines and open files,
// Check compares the median of the last third of that process's usable samples with the median
// of its first third. A usable sample is one taken while it was up, past the warm-up (the first
// interval: caches, pebble's first memtable and the Go heap grow to their working size), leaving
// out the process's first interval and any sample taken when it was younger than an interval (a
// start's figures are not a steady state's). Judging each process over its own life is what
// shows a leak that every restart resets: judged per node across restarts, both thirds would
// hold processes of every age. A process with fewer than six usable samples is not judged
// (n/a), unless it is the run's longest-lived (n1): a run long enough to judge it fails when a
// figure of it could not be judged (go_goroutines never read, say). For each family's p99 Check
// compares the median of the run's last third of intervals with its first, leaving out the
// warm-up, intervals in which a node restarted (the failover is a spike, not drift) and
// intervals in which the family answered fewer than 20 requests. A median of nine or ten
// samples ignores a few spikes: a GC cycle, a pebble compaction; a short run's thirds may hold
// only one or two. A figure fails only past both a ratio and an absolute amount; the ratio
// alone would trip on small numbers, the amount alone on large ones.
//
//   - RSS over 1.5x and more than 64 MiB. With GOGC at 100 a Go process's RSS swings up to
//     twice its live heap between collections, and pebble's caches fill over minutes; 64 MiB
//     is more than those swings and less than a leak of 40 bytes per request makes in half an
//     hour at 1,000 requests a second.
//   - Goroutines over 1.5x and more than 200. A node runs a few goroutines per client
//     connection and one per request in flight or waiting (LOCK ... WAIT), so the count moves
//     by tens with the moment it is read, and with leadership: a leader runs about 40 more than
//     a follower (replication, the followers' forwarding links), so a node that comes to lead
//     looks 1.7x up. A leak per request, per connection or per waiter makes hundreds within
//     minutes.
//   - Open files over 1.5x and more than 64. Raft log segments, pebble's tables (which come and
//     go with compactions) and snapshots move the count by tens, and leading adds about 15
//     (the followers' connections); client connections are a fixed number. A leak per request
//     or per reconnection trips it; one per restart (a handful in a run) would not.
//   - p99 over 3x and more than 5 ms, per family. A shared machine's neighbours move latency by
//     less than 3x over medians of minutes; under 5 ms of growth a sub-millisecond p99 that
//     triples on a scheduler's hiccup is not drift.
//   - Errors: in the run's last third, more than half the requests sent through a node, in the
//     intervals in which it was up and not restarted, failed (soak.csv's requests and errors).
//     A healthy node answers nearly all; a restart's errors are left out with its interval.
//   - No pub/sub message lost on a subscription while it stayed connected: when a subscription
//     (one channel on one subscriber connection) is confirmed, the highest number already
//     acknowledged to the publisher, or sent (one PUBLISH at most is in flight on a channel),
//     is noted, and every number acknowledged above it is due on it; a subscription still open at the end owes every acknowledged number up to the last
//     (the run waits up to 10 s for it), one whose connection ended (its node restarted) owes
//     them up to the last it delivered, what was in flight at its end is not counted. A
//     subscription that never delivers anything owes the same. Each node's subscriber must
//     have received messages in the run.
//   - The load never went unserved for more than 30 s: a failover after a SIGKILLed leader
//     takes a few seconds; thirty is no healthy failover.
//   - No node exited on its own during the run (the check says which, when, and its exit
//     status; the run goes on and every other check is still judged); every restarted node
//     served again within 60 s; and no node log shows a panic, a data race or a fatal error.
//
// A short run judges less, and says so (n/a): a process needs six usable samples (n1 a run of
// seven intervals), the p99 and error checks a third of the run past the warm-up (six
// intervals for the p99's first third, three for the last third's errors). The short
// development runs (make soak SOAK_DURATION=3m SOAK_RESTART_EVERY=40s SOAK_INTERVAL=15s)
// exercise the machinery; their medians rest on two or three samples, not a verdict to trust.
package soak
