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
// Every Interval (1 min) each node is sampled: VmRSS from /proc/PID/status, open files as the
// entries of /proc/PID/fd, goroutines from go_goroutines on its /metrics (served to loopback
// without credentials); and the load's requests, errors by kind and p50/p99/p999 latency per
// family over the interval (of requests that got a reply; a timeout or a connection error is
// counted, not timed). soak.csv has a row per node per interval, with the load its clients sent
// through that node; latency.csv a row per family per interval, every node's clients together;
// restarts.csv the restarts. soak.svg is drawn from the same figures.
//
// # The checks (Check, DefaultLimits)
//
// The machine a soak runs on is noisy (two cores, shared), so no check reads a single sample.
// For each node's RSS, goroutines and open files, and each family's p99, Check compares the
// median of the last third of the intervals with the median of the first third, leaving out the
// first interval (the warm-up: caches, pebble's first memtable and the Go heap grow to their
// working size) and, for a node's figures, each interval in which its process had just started
// or was down (a start's figures are not a steady state's). A median of nine or ten samples
// ignores a few spikes: a GC cycle, a pebble compaction, a failover. A figure fails only past
// both a ratio and an absolute amount; the ratio alone would trip on small numbers, the amount
// alone on large ones.
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
//   - No pub/sub message lost on a subscription that stayed connected: an acknowledged PUBLISH
//     reaches every node's subscribers; a subscriber whose node restarted is off the count
//     from its disconnection to its resubscription, and the messages of that gap are not
//     counted as lost.
//   - The load never went unserved for more than 30 s: a failover after a SIGKILLed leader
//     takes a few seconds; thirty is no healthy failover.
//   - Every restarted node served again within 60 s, and no node log shows a panic, a data
//     race or a fatal error.
//
// A run of fewer than six intervals has no first third past the warm-up: it judges no growth
// and says so (n/a):
// the short development runs (make soak SOAK_DURATION=2m SOAK_RESTART_EVERY=40s
// SOAK_INTERVAL=10s) exercise the machinery, not the verdict.
package soak
