package main

import (
	"context"
	"errors"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"
)

// sessionTTL is the lease of every etcd session, in seconds: long enough
// that no session expires during a cell (the client keeps it alive anyway).
const sessionTTL = 60

// revokeTimeout bounds closing a cell's sessions.
const revokeTimeout = 10 * time.Second

// etcdLocker takes locks with client/v3/concurrency's Mutex in its own
// session: Lock puts a key under the lock's prefix and waits until it is the
// oldest; Unlock deletes it.
type etcdLocker struct {
	s    *concurrency.Session
	held *concurrency.Mutex
}

// openEtcd opens conns clients (one gRPC connection each) to addr, the
// leader's client address, and n lockers spread over them, every locker
// with a session of its own: gRPC multiplexes their requests, which is how
// etcd keeps several operations in flight on one connection.
func openEtcd(ctx context.Context, addr string, conns, n int) (*workers, error) {
	var (
		clients  []*clientv3.Client
		sessions = make([]*concurrency.Session, n)
		errs     = make([]error, len(sessions))
		wg       sync.WaitGroup
	)
	closeClients := func() {
		for _, c := range clients {
			_ = c.Close() // nothing to do about a failed close
		}
	}
	for range conns {
		c, err := clientv3.New(clientv3.Config{
			Endpoints:   []string{addr},
			DialTimeout: netTimeout,
			Context:     ctx,
			Logger:      zap.NewNop(),
		})
		if err != nil {
			closeClients()
			return nil, err
		}
		clients = append(clients, c)
	}
	for k := range sessions {
		c := clients[k%len(clients)]
		wg.Go(func() { sessions[k], errs[k] = concurrency.NewSession(c, concurrency.WithTTL(sessionTTL)) })
	}
	wg.Wait()
	closeSessions := func() {
		// Revoke the leases now, so that their expiry does not load the
		// next cell on this cluster. Session.Close would wait up to the
		// session TTL; this waits revokeTimeout at most.
		ctx, cancel := context.WithTimeout(ctx, revokeTimeout)
		defer cancel()
		var wg sync.WaitGroup
		for _, ss := range sessions {
			if ss != nil {
				ss.Orphan()                                                  // stop its keepalive
				wg.Go(func() { _, _ = ss.Client().Revoke(ctx, ss.Lease()) }) // best effort
			}
		}
		wg.Wait()
		closeClients()
	}
	if err := errors.Join(errs...); err != nil {
		closeSessions()
		return nil, err
	}
	w := &workers{batch: 1, close: closeSessions}
	for _, ss := range sessions {
		w.lockers = append(w.lockers, &etcdLocker{s: ss})
	}
	return w, nil
}

func (l *etcdLocker) acquire(ctx context.Context, keys []string) (int, error) {
	if len(keys) != 1 {
		return 0, errors.New("etcd Mutex takes one lock at a time")
	}
	m := concurrency.NewMutex(l.s, "/"+keys[0])
	if err := m.Lock(ctx); err != nil {
		return 0, err
	}
	l.held = m
	return 1, nil
}

func (l *etcdLocker) release(ctx context.Context) error {
	m := l.held
	l.held = nil
	return m.Unlock(ctx)
}
