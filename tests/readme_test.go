package tests

import (
	"bufio"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// consoleLine is one `$ redis-cli …` line of the README and the output it shows.
type consoleLine struct {
	line    int // in README.md
	command string
	want    string
}

// readmeSessions returns every `$ redis-cli …` line of the README's console blocks, in order,
// with the lines that follow it up to the next command or the block's end.
func readmeSessions(t *testing.T) []consoleLine {
	t.Helper()
	f, err := os.Open("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []consoleLine
	inConsole := false
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		text := sc.Text()
		switch {
		case strings.HasPrefix(text, "```"):
			inConsole = strings.TrimPrefix(text, "```") == "console"
		case !inConsole:
		case strings.HasPrefix(text, "$ redis-cli "):
			out = append(out, consoleLine{line: n, command: strings.TrimPrefix(text, "$ ")})
		case strings.HasPrefix(text, "$ "):
			t.Fatalf("README.md:%d: a console line that is not redis-cli (this test runs only those): %s", n, text)
		case len(out) > 0:
			out[len(out)-1].want += text + "\n"
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestReadmeSessions runs the README's redis-cli sessions against a fresh node, as a newcomer
// types them, through a shell (a line's `# …` is a comment there too), and compares what
// redis-cli prints with what the README shows: the fencing tokens a fresh node hands out do not
// depend on timing (cluster.Member.AwaitSetup).
func TestReadmeSessions(t *testing.T) {
	if _, err := exec.LookPath("redis-cli"); err != nil {
		t.Fatalf("redis-cli is needed (make test's setup installs it: apt-get install redis-tools): %v", err)
	}
	lines := readmeSessions(t)
	if len(lines) == 0 {
		t.Fatal("README.md has no `$ redis-cli` lines in a console block")
	}
	// The first line goes out as soon as the node takes connections, as a newcomer's right
	// after make run may: not after a request of the harness's own has waited for the leader.
	n := &node{dir: t.TempDir(), raftAddr: net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t))), id: "n1"}
	port := strconv.Itoa(freePort(t))
	if err := n.start(t, net.JoinHostPort("127.0.0.1", port)); err != nil {
		t.Fatal(err)
	}
	for _, l := range lines {
		var got []byte
		deadline := time.Now().Add(20 * time.Second)
		for {
			var err error
			cmd := exec.Command("bash", "-c", "redis-cli --no-raw -p "+port+" "+strings.TrimPrefix(l.command, "redis-cli "))
			got, err = cmd.CombinedOutput()
			if strings.Contains(string(got), "Connection refused") && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
				continue
			}
			if err != nil {
				t.Fatalf("README.md:%d: %s: %v\n%s", l.line, l.command, err, got)
			}
			break
		}
		if string(got) != l.want {
			t.Errorf("README.md:%d: %s\nprinted:\n%sthe README shows:\n%s", l.line, l.command, got, l.want)
		}
	}
}
