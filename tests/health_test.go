package tests

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
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
