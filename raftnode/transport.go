package raftnode

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/hashicorp/raft"
)

// NewTCPTransport starts raft's TCP transport listening on bind and advertising advertise
// (default: bind). Outgoing connections leave from bind's IP address, so a node on 127.0.0.2
// talks to its peers from 127.0.0.2: a fault harness (or a firewall) can then tell the links
// between nodes apart and cut one direction of one link.
func NewTCPTransport(bind, advertise string, logger *slog.Logger) (*raft.NetworkTransport, error) {
	if advertise == "" {
		advertise = bind
	}
	adv, err := net.ResolveTCPAddr("tcp", advertise)
	if err != nil {
		return nil, fmt.Errorf("raft advertise address %q: %w", advertise, err)
	}
	if adv.IP == nil || adv.IP.IsUnspecified() {
		return nil, fmt.Errorf("raft advertise address %q is not a reachable address", advertise)
	}
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("raft transport on %s: %w", bind, err)
	}
	local := ln.Addr().(*net.TCPAddr)
	var from *net.TCPAddr
	if !local.IP.IsUnspecified() {
		from = &net.TCPAddr{IP: local.IP}
	}
	layer := &streamLayer{Listener: ln, advertise: adv, from: from}
	return raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream:  layer,
		MaxPool: 3,
		Timeout: 10 * time.Second,
		Logger:  newHCLogger(logger.With("component", "raft-transport")),
	}), nil
}

// streamLayer is raft's TCP stream layer with a fixed source address for outgoing connections.
type streamLayer struct {
	net.Listener
	advertise *net.TCPAddr
	from      *net.TCPAddr
}

var _ raft.StreamLayer = (*streamLayer)(nil)

func (s *streamLayer) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	if s.from != nil {
		d.LocalAddr = s.from
	}
	c, err := d.Dial("tcp", string(addr))
	if err != nil && s.from != nil && errors.Is(err, errAddrNotAvail) {
		// The bind IP cannot reach this peer (a wildcard-free bind on another interface):
		// let the kernel choose.
		return net.DialTimeout("tcp", string(addr), timeout)
	}
	return c, err
}

func (s *streamLayer) Addr() net.Addr { return s.advertise }
