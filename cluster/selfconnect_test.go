package cluster

import (
	"errors"
	"net"
	"testing"
	"time"
)

// A dial to a port on this host that nothing listens on can connect to itself (TCP simultaneous
// open, when the source port is the destination port). The transport refuses and closes such a
// connection, so the port stays free for the peer that restarts on it.
func TestDialRefusesSelfConnection(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	addr := ln.Addr().String()
	// The source port forced to the destination's: the kernel connects the socket to itself.
	s := &streamLayer{from: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port}}
	c, err := s.dial(addr, time.Second)
	if err == nil {
		c.Close()
		t.Fatalf("dial of %s from the same port returned a connection", addr)
	}
	if !errors.Is(err, errSelfConnect) {
		t.Skipf("this kernel did not connect the socket to itself (%v): nothing to refuse", err)
	}
	// The port is free again: the peer restarting there can listen.
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("after the refused self-connection, listen on %s: %v", addr, err)
	}
	ln.Close()
}
