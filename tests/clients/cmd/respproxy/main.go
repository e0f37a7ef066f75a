// Command respproxy forwards a local port to a RESP server and prints every command and reply it
// carries, one per line: how to see what a client library sends to raftlock (which has no
// MONITOR). Example: respproxy -target 127.0.0.1:6379 -listen-file /tmp/addr, then point the
// client at the address written there.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/raftlock/raftlock/tests/clients/internal/proxy"
)

func main() {
	target := flag.String("target", "127.0.0.1:6379", "server to forward to")
	addrFile := flag.String("listen-file", "", "write the proxy's address to this file")
	flag.Parse()
	start := time.Now()
	p, err := proxy.Start(*target, func(format string, args ...any) {
		fmt.Printf("%8.3f ", time.Since(start).Seconds())
		fmt.Printf(format+"\n", args...)
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Fprintf(os.Stderr, "respproxy: %s -> %s\n", p.Addr, *target)
	if *addrFile != "" {
		if err := os.WriteFile(*addrFile, []byte(p.Addr+"\n"), 0o644); err != nil {
			log.Fatal(err)
		}
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
	p.Close()
}
