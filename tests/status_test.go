package tests

import (
	"encoding/json"
	"fmt"
	"html"
	"image/png"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/raftlock/raftlock/tests/testutil"
)

// artifactDir is where tests leave files for CI to keep: $RAFTLOCK_ARTIFACTS, or
// tests/artifacts (gitignored).
func artifactDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("RAFTLOCK_ARTIFACTS")
	if dir == "" {
		dir = "artifacts"
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// chromium runs headless Chromium (Debian's chromium package; .ci/run installs it) with args
// and the page at url, and returns its stdout. The virtual time budget lets the page's script
// fetch /status.json and render before the DOM is dumped or the screenshot taken.
func chromium(t *testing.T, url string, args ...string) []byte {
	t.Helper()
	bin, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (.ci/run installs it; apt-get install chromium): %v", err)
	}
	args = append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--hide-scrollbars", "--no-first-run", "--user-data-dir=" + t.TempDir(), "--virtual-time-budget=6000"}, args...)
	cmd := exec.CommandContext(testContext(t, 90*time.Second), bin, append(args, url)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// infoFields returns INFO section's name:value lines on addr.
func infoFields(t *testing.T, addr, section string) map[string]string {
	t.Helper()
	v, err := call(addr, "INFO", section)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := v.(string)
	out := map[string]string{}
	for line := range strings.SplitSeq(s, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			out[k] = v
		}
	}
	return out
}

// TestStatusPage loads the leader's status page in headless Chromium, checks what it shows
// against INFO, and keeps a screenshot (artifactDir, status-page.png).
func TestStatusPage(t *testing.T) {
	webs := make([]string, 3)
	c := newClusterWith(t, 3, &cluster{nodeArgs: func(i int) []string {
		webs[i] = net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
		return []string{"--metrics-addr", webs[i]}
	}})
	leader := c.leader()
	web := webs[leader.id[1]-'1']

	// Some locks in db 0 and db 3, and one key that is fought over.
	for i := range 5 {
		if _, err := call(leader.addr, "LOCK", fmt.Sprintf("job:%d", i), "60000"); err != nil {
			t.Fatal(err)
		}
	}
	rc, err := dialRESP(leader.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	for _, cmd := range [][]string{{"SELECT", "3"}, {"LOCK", "invoice:7", "60000"}, {"SET", "lease:a", "x", "PX", "60000"}, {"SET", "plain", "y"}} {
		if _, err := rc.do(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 4 { // a key granted to w0, then refused three times
		if _, err := call(leader.addr, "LOCK", "report:daily", "60000", "OWNER", fmt.Sprintf("w%d", i)); err != nil {
			t.Fatal(err)
		}
	}

	// Wait until every member answers and has applied everything: the page then shows
	// figures INFO can be compared with.
	testutil.WaitFor(t, 20*time.Second, func() error {
		res, err := http.Get("http://" + web + "/status.json")
		if err != nil {
			return err
		}
		defer res.Body.Close()
		var st struct {
			Members []struct {
				ID    string `json:"id"`
				Lag   uint64 `json:"lag"`
				Error string `json:"error"`
			} `json:"members"`
		}
		if err := json.NewDecoder(res.Body).Decode(&st); err != nil {
			return err
		}
		if len(st.Members) != 3 {
			return fmt.Errorf("status.json lists %d members, want 3", len(st.Members))
		}
		for _, m := range st.Members {
			if m.Error != "" || m.Lag != 0 {
				return fmt.Errorf("member %s: lag %d, error %q", m.ID, m.Lag, m.Error)
			}
		}
		return nil
	})

	dom := string(chromium(t, "http://"+web+"/", "--dump-dom"))
	raft, keyspace := infoFields(t, leader.addr, "raft"), infoFields(t, leader.addr, "keyspace")
	byID := func(id string) string {
		m := regexp.MustCompile(`id="` + id + `"[^>]*>([^<]*)<`).FindStringSubmatch(dom)
		if m == nil {
			t.Fatalf("the page has no #%s:\n%s", id, dom)
		}
		return html.UnescapeString(m[1])
	}
	if !strings.Contains(dom, `data-loaded="true"`) {
		t.Fatalf("the page never rendered /status.json:\n%s", dom)
	}
	totalKeys := 0
	for db := range 16 {
		if v, ok := keyspace["db"+strconv.Itoa(db)]; ok {
			n, _ := strconv.Atoi(strings.TrimPrefix(strings.Split(v, ",")[0], "keys="))
			totalKeys += n
		}
	}
	for _, tc := range []struct{ id, want string }{
		{"node-id", raft["raft_id"]},
		{"node-state", raft["raft_state"]},
		{"node-term", raft["raft_term"]},
		{"node-leader", raft["raft_leader_id"]},
		{"total-keys", strconv.Itoa(totalKeys)},
	} {
		if got := byID(tc.id); got != tc.want {
			t.Errorf("#%s shows %q, INFO says %q", tc.id, got, tc.want)
		}
	}
	if totalKeys != 9 {
		t.Errorf("INFO keyspace counts %d keys, want 9 (6 locks in db 0, 3 keys in db 3)", totalKeys)
	}
	// Database 3's row: INFO keyspace's keys and expires.
	db3 := regexp.MustCompile(`<tr data-db="3"><td>3</td><td class="keys num">(\d+)</td><td class="leases num">(\d+)</td>`).FindStringSubmatch(dom)
	if want := "keys=" + db3Field(db3, 1) + ",expires=" + db3Field(db3, 2) + ",avg_ttl=0"; db3 == nil || keyspace["db3"] != want {
		t.Errorf("db 3's row %q; INFO keyspace db3:%s", db3, keyspace["db3"])
	}
	for _, id := range []string{"n1", "n2", "n3"} {
		if !strings.Contains(dom, `<tr data-member="`+id+`">`) {
			t.Errorf("the members table lacks %s", id)
		}
	}
	if !regexp.MustCompile(`<tr data-key="report:daily"><td>0</td><td class="key">report:daily</td><td class="num">3</td>`).MatchString(dom) {
		t.Errorf("the contended keys do not show report:daily refused 3 times:\n%s", dom)
	}
	if !regexp.MustCompile(`<tr data-family="lock"><td>lock</td><td class="num">[1-9]`).MatchString(dom) {
		t.Errorf("the latency table shows no lock commands")
	}

	// Traffic in the rate window, so the screenshot shows rates and quantiles.
	for i := range 100 {
		for _, cmd := range [][]string{{"LOCK", "burst", "5000"}, {"GET", "burst"}, {"UNLOCK", "burst"}, {"LOCK", "report:daily", "60000"}} {
			if _, err := rc.do(cmd...); err != nil {
				t.Fatalf("round %d, %v: %v", i, cmd, err)
			}
		}
	}
	shot := filepath.Join(artifactDir(t), "status-page.png")
	chromium(t, "http://"+web+"/", "--window-size=1280,1500", "--screenshot="+shot)
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	if cfg, err := png.DecodeConfig(f); err != nil || cfg.Width != 1280 || cfg.Height != 1500 {
		t.Errorf("screenshot %s: %+v %v, want a 1280x1500 PNG", shot, cfg, err)
	}
	t.Logf("screenshot: %s", shot)
}

func db3Field(m []string, i int) string {
	if m == nil {
		return ""
	}
	return m[i]
}

// The status page and /status.json need an @admin user's basic auth once clients must
// authenticate; /metrics stays open.
func TestStatusPageAuth(t *testing.T) {
	web := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	n := startNodeWith(t, nil, "--metrics-addr", web)
	for _, cmd := range [][]string{
		{"ACL", "SETUSER", "ops", "on", ">s3cret", "+@all", "~*", "&*"},
		{"ACL", "SETUSER", "viewer", "on", ">pw", "+@read", "~*"},
	} {
		if _, err := call(n.addr, cmd...); err != nil {
			t.Fatal(err)
		}
	}
	get := func(path, user, pass string) int {
		req, _ := http.NewRequestWithContext(t.Context(), "GET", "http://"+web+path, nil)
		if user != "" {
			req.SetBasicAuth(user, pass)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		return res.StatusCode
	}
	for _, path := range []string{"/", "/status.json"} {
		for _, tc := range []struct {
			user, pass string
			want       int
		}{{"", "", 401}, {"ops", "wrong", 401}, {"viewer", "pw", 401}, {"ops", "s3cret", 200}} {
			if got := get(path, tc.user, tc.pass); got != tc.want {
				t.Errorf("%s as %q:%q = %d, want %d", path, tc.user, tc.pass, got, tc.want)
			}
		}
	}
	if got := get("/metrics", "", ""); got != 200 {
		t.Errorf("/metrics = %d, want 200 without credentials", got)
	}
}
