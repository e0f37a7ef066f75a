//go:build chaos_staleinstall

package raftnode

// A deliberately broken build for the chaos harness (GOFLAGS=-tags=chaos_staleinstall): Restore
// takes a snapshot older than the table it has applied and raft knows committed, as raftnode did
// before it refused such stale installs. It shows whether the harness catches the table going
// back in time, and what that looks like in a history. Never built otherwise.

func init() { takeStaleSnapshots = true }
