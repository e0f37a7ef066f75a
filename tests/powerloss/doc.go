// Package powerloss holds the cluster-level power-loss tests (issue 35, item 1): in-process
// clusters of raftnode cores on the real stores of package store, each node on its own crashable
// in-memory filesystem (pebble's vfs.NewCrashableMem) under the log, the stable store and the
// snapshot store alike, cut at random points under load and restarted on what a power cut would
// have left of its disk (CrashClone: the synced data, and a seeded random part of the rest).
// The package has no code outside its tests.
//
// Running it:
//
//	go test ./tests/powerloss -run TestPowerLoss -v                   # 90 s of rounds (10 s with -short)
//	go test ./tests/powerloss -run TestPowerLoss -seed N -rounds 1    # one round again, from its seed
//	POWERLOSS_DROP_SYNC=wal|stable|snapshots go test ./tests/powerloss -run TestPowerLoss   # must fail
//	go test ./tests/powerloss -run TestDroppedSyncIsCaught -v         # each dropped sync, caught
//
// -budget (POWERLOSS_BUDGET) sets TestPowerLoss's time, POWERLOSS_CLUSTER_ONLY=1 leaves out the
// stores' own checks, POWERLOSS_MEMBERSHIP=0 leaves out the rounds (a third) that remove a
// node and add it back while the cuts go on, POWERLOSS_DEBUG=1 prints violations as they happen. A rerun from a
// seed needs the same variables.
package powerloss
