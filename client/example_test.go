package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/raftlock/raftlock/client"
)

// These examples need a raftlock cluster, so go test compiles them but does not run them (they
// have no Output comment).

func ExampleClient_Lock() {
	c, err := client.New(client.Options{Addrs: []string{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379"}})
	if err != nil {
		log.Fatal(err)
	}
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
	fmt.Println("holding reports/nightly with token", l.Token())
}

func ExampleClient_TryLock() {
	c, err := client.New(client.Options{Addrs: []string{"127.0.0.1:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	l, err := c.TryLock(context.Background(), "cron/cleanup", time.Minute)
	if errors.Is(err, client.ErrNotAcquired) {
		fmt.Println("another process runs the cleanup")
		return
	}
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(context.Background())
	fmt.Println("cleaning up")
}

// A holder that works in steps checks Err before each one, and stops at once when Done
// closes in the middle of one.
func ExampleLock_Done() {
	c, err := client.New(client.Options{Addrs: []string{"127.0.0.1:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	l, err := c.Lock(context.Background(), "queue/shard-7", 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(context.Background())
	for step := range 100 {
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
}

func ExampleClient_MultiLock() {
	c, err := client.New(client.Options{Addrs: []string{"127.0.0.1:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// Both accounts or neither, in one log entry: no deadlock with a transfer the other way.
	l, err := c.MultiLock(context.Background(), 10*time.Second, []string{"account/alice", "account/bob"})
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(context.Background())
	fmt.Println("tokens", l.Tokens())
}

func ExampleClient_Validate() {
	c, err := client.New(client.Options{Addrs: []string{"127.0.0.1:6379"}})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	// A resource asked to act for the holder of token 42 checks it first.
	ok, err := c.Validate(context.Background(), "reports/nightly", 42)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("token 42 holds reports/nightly:", ok)
}
