// Package powerloss holds the cluster-level power-loss tests (issue 35, item 1): in-process
// clusters of raftnode cores on the real stores of package store, each node on its own crashable
// in-memory filesystem, cut at random points under load and restarted on what a power cut would
// have left of its disk. The package has no code outside its tests.
package powerloss
