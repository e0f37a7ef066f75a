package main

import (
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"sync"
	"syscall"

	"github.com/raftlock/raftlock/certs"
)

// loadTLS loads the client port's and the raft transport's certificates; each is nil when its
// flags are not set.
func loadTLS(opts options) (client, raft *certs.Source, err error) {
	if opts.tls.Cert != "" {
		if client, err = certs.Load(opts.tls); err != nil {
			return nil, nil, fmt.Errorf("client TLS: %w", err)
		}
	}
	if opts.raftTLS.Cert != "" {
		if raft, err = certs.Load(opts.raftTLS); err != nil {
			return nil, nil, fmt.Errorf("raft TLS: %w", err)
		}
		// Peers admit a raft certificate by the node it names (DESIGN.md §10).
		if id, ok := raft.NodeID(); !ok || id != opts.id {
			return nil, nil, fmt.Errorf("raft TLS: %s names node %q, not this node's --id %q: make it with raftlock cert node --id %s",
				opts.raftTLS.Cert, id, opts.id, opts.id)
		}
	}
	if client != nil && client.HasCA() {
		// Other nodes dialing this node's client port (forwarding, joins) verify the same.
		if id, ok := client.NodeID(); (!ok || id != opts.id) && (len(opts.peers) > 0 || opts.join != "") {
			return nil, nil, fmt.Errorf("client TLS: %s names node %q, not this node's --id %q, and the other nodes verify it: make it with raftlock cert node --id %s",
				opts.tls.Cert, id, opts.id, opts.id)
		}
	}
	return client, raft, nil
}

// reloadOnHangup re-reads every source's files on each SIGHUP until the returned func is
// called (which waits for the goroutine it started). A file that does not load leaves that
// source's certificate as it was, and is logged.
func reloadOnHangup(logger *slog.Logger, sources map[string]*certs.Source) (stop func()) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			case <-hup:
			}
			for port, src := range sources {
				if src == nil {
					continue
				}
				if err := src.Reload(); err != nil {
					logger.Error("TLS reload failed; keeping the old certificate", "port", port, "err", err)
					continue
				}
				logger.Info("TLS certificates reloaded", "port", port, "serial", src.Leaf().SerialNumber.String(),
					"not_after", src.Leaf().NotAfter)
			}
		}
	}()
	return func() {
		signal.Stop(hup)
		close(done)
		wg.Wait()
	}
}
