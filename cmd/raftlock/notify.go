package main

import (
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"
)

// readyPoll is how often the node asks itself whether it is ready until it is.
const readyPoll = 200 * time.Millisecond

// sdNotifier speaks the service manager's readiness protocol (systemd's sd_notify(3), what a
// unit of Type=notify waits for): one datagram of newline-separated VAR=value lines to the unix
// socket $NOTIFY_SOCKET names (an "@name" is in the abstract namespace, as Go's net package
// reads it). With no socket it does nothing, so the node runs the same under Type=exec, a
// shell or a test.
type sdNotifier struct {
	socket string
	log    *slog.Logger
}

// notify sends the lines as one datagram. A failure is logged, not returned: the service
// manager's view is worth a warning, never the node.
func (n sdNotifier) notify(lines ...string) {
	if n.socket == "" {
		return
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: n.socket, Net: "unixgram"})
	if err == nil {
		_, err = c.Write([]byte(strings.Join(lines, "\n") + "\n"))
		c.Close()
	}
	if err != nil {
		n.log.Warn("notifying the service manager failed", "socket", n.socket, "msg", lines[0], "err", err)
	}
}

// notifyWhenReady asks ready every readyPoll until it says the node can serve, then sends
// READY=1; meanwhile each new set of reasons it gives is sent as STATUS= (what `systemctl
// status` shows while the unit is activating). It returns a func that stops the polling and
// waits for it. Without a socket nothing starts.
func (n sdNotifier) notifyWhenReady(ready func() (bool, []string)) (stop func()) {
	if n.socket == "" {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(readyPoll)
		defer t.Stop()
		var last []string
		for {
			ok, reasons := ready()
			if ok {
				n.notify("READY=1", "STATUS=serving")
				return
			}
			if !slices.Equal(reasons, last) {
				n.notify("STATUS=not ready: " + strings.Join(reasons, "; "))
				last = reasons
			}
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		wg.Wait()
	}
}
