package client

import (
	"errors"
	"fmt"
)

// ErrNotAcquired is what TryLock returns when someone else holds the lock, and Lock when its
// wait ran out first.
var ErrNotAcquired = errors.New("client: lock held by someone else")

// ErrLockLost is what a handle's Err matches (errors.Is) once the lock is known to be lost:
// a *LostError says how, or ErrExpired.
var ErrLockLost = errors.New("client: lock lost")

// ErrExpired is a handle's Err when its lease ran out on the client's clock before a renewal
// was confirmed. It matches ErrLockLost too.
var ErrExpired = fmt.Errorf("%w: lease ran out before a renewal was confirmed", ErrLockLost)

// ErrReleased is a handle's Err after its Unlock.
var ErrReleased = errors.New("client: lock released")

// ErrClosed is a handle's Err, and the error of every call, once its Client is closed.
var ErrClosed = errors.New("client: closed")

// LostError tells how a lock was lost. It matches ErrLockLost.
type LostError struct {
	Key   string
	Token uint64
	// Reason is the server's (expired, deleted, overwritten, flushed, unknown), "released"
	// when another connection released it with its token, or "not held" when a renewal or a
	// check found the token no longer the holder's.
	Reason string
}

func (e *LostError) Error() string {
	return fmt.Sprintf("client: lock %q (token %d) lost: %s", e.Key, e.Token, e.Reason)
}

// Is makes errors.Is(err, ErrLockLost) true.
func (e *LostError) Is(target error) bool { return target == ErrLockLost }
