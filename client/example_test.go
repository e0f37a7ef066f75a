package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/raftlock/raftlock/client"
)

// The examples read the cluster's addresses from RAFTLOCK_ADDRS ("10.0.0.1:6379,10.0.0.2:6379"):
// go test runs them against the node its TestMain starts.
func newClient() *client.Client {
	c, err := client.New(client.Options{Addrs: strings.Split(os.Getenv("RAFTLOCK_ADDRS"), ",")})
	if err != nil {
		log.Fatal(err)
	}
	return c
}

func ExampleClient_Lock() {
	c := newClient()
	defer c.Close()

	// Wait up to 10 s for the lock; its 30 s lease is renewed until Unlock.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := c.Lock(ctx, "reports/nightly", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(context.Background())

	// Pass the fencing token to the resource, so that it can refuse an older holder.
	fmt.Println("holding", l.Key(), "with a token:", l.Token() > 0)
	// Output: holding reports/nightly with a token: true
}

func ExampleClient_TryLock() {
	c := newClient()
	defer c.Close()

	ctx := context.Background()
	cleanup := func() *client.Lock {
		l, err := c.TryLock(ctx, "cron/cleanup", time.Minute)
		if errors.Is(err, client.ErrNotAcquired) {
			fmt.Println("another process runs the cleanup")
			return nil
		}
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println("cleaning up")
		return l
	}
	if l := cleanup(); l != nil {
		defer l.Unlock(ctx)
	}
	cleanup() // as another process would, while the first one holds the lock
	// Output:
	// cleaning up
	// another process runs the cleanup
}

// A holder that works in steps checks Err before each one, and stops at once when Done
// closes in the middle of one.
func ExampleLock_Done() {
	c := newClient()
	defer c.Close()

	l, err := c.Lock(context.Background(), "queue/shard-7", 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(context.Background())
	for step := range 3 {
		if err := l.Err(); err != nil {
			fmt.Println("stopped before step", step, "because", err)
			return
		}
		select {
		case <-l.Done():
			fmt.Println("lost during step", step, "because", l.Err())
			return
		case <-time.After(100 * time.Millisecond): // one step of work
		}
	}
	fmt.Println("all steps done")
	// Output: all steps done
}

func ExampleClient_MultiLock() {
	c := newClient()
	defer c.Close()

	// Both accounts or neither, in one log entry: no deadlock with a transfer the other way.
	l, err := c.MultiLock(context.Background(), 10*time.Second, []string{"account/alice", "account/bob"})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(context.Background())
	fmt.Println("tokens for", len(l.Tokens()), "keys")
	// Output: tokens for 2 keys
}

func ExampleSemaphore() {
	c := newClient()
	defer c.Close()

	// Two permits: two holders at once, each with a token of its own; a third waits or is
	// refused.
	ctx := context.Background()
	for worker := range 3 {
		l, err := c.TryLock(ctx, "exports/slots", time.Minute, client.Semaphore(2))
		if errors.Is(err, client.ErrNotAcquired) {
			fmt.Println("worker", worker, "finds both permits taken")
			continue
		}
		if err != nil {
			log.Fatal(err)
		}
		defer l.Unlock(ctx)
		fmt.Println("worker", worker, "has a permit")
	}
	// Output:
	// worker 0 has a permit
	// worker 1 has a permit
	// worker 2 finds both permits taken
}

func ExampleClient_Validate() {
	c := newClient()
	defer c.Close()

	ctx := context.Background()
	l, err := c.Lock(ctx, "reports/weekly", 30*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	// A resource asked to act for a token checks it first.
	ok, err := c.Validate(ctx, "reports/weekly", l.Token())
	fmt.Println("while held:", ok, err)
	l.Unlock(ctx)
	ok, err = c.Validate(ctx, "reports/weekly", l.Token())
	fmt.Println("after Unlock:", ok, err)
	// Output:
	// while held: true <nil>
	// after Unlock: false <nil>
}
