// Package chaos owns raftlock's Jepsen-style fault harness. It runs a cluster of real raftlock
// processes on loopback (127.0.0.2 and up), each behind proxies that carry node-to-node traffic
// (raft, and a follower's forwarding of client requests to the leader) so every directed link
// can be cut or slowed while clients still reach every node directly. A seeded nemesis injects
// faults one at a time or mixed (faults.go): partitions (leader isolated, minority/majority,
// bridge), SIGSTOP/SIGCONT, kill -9 and restart (of one node or all), slow links, lease-clock
// skew and jumps (--test-clock, DEBUG CLOCK-SHIFT; see clock.go for what is promised), RAFT
// REMOVE and re-add with --join, and snapshot installs forced by tiny snapshot thresholds.
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
// TestChaosShort is the short mode (make chaos-short, part of make test); cmd/raftlock-chaos
// (under this directory) is the long mode (make chaos). A failing run leaves its history,
// porcupine's visualizations and every node's log in one folder and prints its path.
package chaos
