//go:build chaos_nofloor

package cluster

// A deliberately broken build for the chaos harness (tests/chaos, CHAOS_NOFLOOR=1): a slot move
// carries no fence floor, so a key whose lock was released in its source group and is granted
// again in the target may get a token below the ones the source gave it. The harness's fencing
// check must find that. Never built otherwise.

func init() { dropFenceFloor = true }
