// Package client takes locks from a raftlock cluster: leases renewed in the background,
// fencing tokens, and a handle that says the moment its lock is known lost.
//
// A Client talks to any of the cluster's nodes (followers forward writes to the leader) and
// moves to the next when one stops answering. It retries only what is safe to repeat, and
// finds out what an interrupted request did by asking again rather than assuming: LOCK with
// the same OWNER answers with the same token (every call has an owner of its own), RENEW
// renews again, and an UNLOCK whose outcome was unknown is sent again and checked with
// VALIDATE.
//
// A Lock's lease is counted on the client's own clock from when the request that set it was
// sent, not from when its reply came, so the client believes the lease over before the server
// does, never after. A Lock ends, closing Done, on whichever comes first: the lost-lock notice
// for its token (the client subscribes to the channel __lock__:<key> of every key it holds), a
// renewal refused, or its lease running out with no renewal confirmed.
//
// The notices come by pub/sub even on RESP3, where the node also pushes `lock-lost` to the
// connection that took the lock: in a pool that connection goes back to the pool, and a push
// waits there unread until the connection is next used; and the lock of a request retried
// after its connection broke belongs to a connection that no longer exists. One subscribed
// connection per Client reads every notice as it comes, whichever connection took the lock.
//
// Check Err right before acting on the protected resource, and pass Token to it, so that it can refuse a holder older
// than one it has served (docs/fencing.md).
//
// The lease clock is Go's monotonic clock, which on Linux does not count time the machine
// spends suspended (a laptop asleep, a VM paused by its host): after such a suspend longer
// than the lease, Err may say the lock is held until the renewal that follows finds it is not.
// A process paused on a running machine (SIGSTOP, a long GC) is counted.
//
// Every goroutine a Lock starts exits when it ends; Close ends every Lock, held or still
// waiting, and waits for the Client's own.
package client
