// Package chaos owns raftlock's Jepsen-style fault harness: it runs a cluster of real raftlock
// processes behind per-link TCP proxies, injects faults (partitions, SIGSTOP/SIGCONT, kill -9 and
// restart, slow links, membership and snapshot churn) from a seeded RNG while clients run a lock
// workload, records the history, and checks it: per-key linearizability (porcupine), fencing
// token order, mutual exclusion on a fenced resource, convergence and recovery after healing,
// and clean node logs. TestChaosShort runs it briefly; cmd/raftlock-chaos runs it for long.
package chaos
