package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
)

// A node's /livez answers while it runs and /readyz once it serves (its store takes a write), on
// --metrics-addr, with the JSON the probes of systemd and Kubernetes read.
func TestHealthProbes(t *testing.T) {
	web := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	startNodeWith(t, nil, "--metrics-addr", web)
	get := func(path string) (int, map[string]any, error) {
		res, err := http.Get("http://" + web + path)
		if err != nil {
			return 0, nil, err
		}
		defer res.Body.Close()
		var body map[string]any
		err = json.NewDecoder(res.Body).Decode(&body)
		return res.StatusCode, body, err
	}
	if code, body, err := get("/livez"); err != nil || code != http.StatusOK || body["live"] != true {
		t.Fatalf("/livez = %d %v %v; want 200 live", code, body, err)
	}
	testutil.WaitFor(t, 10*time.Second, func() error {
		code, body, err := get("/readyz")
		if err == nil && (code != http.StatusOK || body["ready"] != true || body["state"] != "Leader") {
			err = fmt.Errorf("/readyz = %d %v; want 200, ready, Leader", code, body)
		}
		return err
	})
}

// TestHTTPExposureRefused: the HTTP surface (the status page with key names and member
// addresses, pprof's command line) must not be served to any address without credentials: a node
// whose --metrics-addr is not loopback does not start while no credentials are set, and says
// how to proceed; it refuses before it opens its store or binds the address (nothing here
// listens beyond 127.0.0.1).
func TestHTTPExposureRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	ports := uniquePorts(t, 3)
	dir := t.TempDir()
	cmd := exec.CommandContext(ctx, raftlockBin, "--dir", dir,
		"--addr", "127.0.0.1:"+strconv.Itoa(ports[0]), "--raft-addr", "127.0.0.1:"+strconv.Itoa(ports[1]),
		"--metrics-addr", "0.0.0.0:"+strconv.Itoa(ports[2]))
	out, err := cmd.CombinedOutput()
	if err == nil || ctx.Err() != nil {
		t.Fatalf("raftlock with --metrics-addr 0.0.0.0 and no credentials: %v (%v); want it to refuse to start\n%s", err, ctx.Err(), out)
	}
	if !strings.Contains(string(out), "--insecure-http") || !strings.Contains(string(out), "not loopback") {
		t.Errorf("the refusal does not say why or what to do:\n%s", out)
	}
	if entries, _ := os.ReadDir(dir); len(entries) > 0 {
		t.Errorf("the refused node wrote %d entries to its dir; want nothing (it is refused before it starts)", len(entries))
	}
}
