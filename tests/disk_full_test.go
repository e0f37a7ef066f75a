package tests

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/raftlock/raftlock/resp"
	"github.com/raftlock/raftlock/tests/testutil"
)

// fullDiskSize is the tmpfs the full-disk test runs a node on: the store's first segment and its
// spare (8 MiB each) and pebble fit, with room left for the filler to take.
const fullDiskSize = "32m"

// mountTmpfs mounts a tmpfs of size on a new directory and unmounts it when the test ends
// (after the node on it stopped: cleanups run last first). It skips the test, saying why, where
// mounting is not permitted (not root, no CAP_SYS_ADMIN, a container without it).
func mountTmpfs(t *testing.T, size string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("cannot mount a %s tmpfs here (%v: %s): the full-disk test needs a small real filesystem", size, err, strings.TrimSpace(string(out)))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			// Busy (a process of a failed test still in it): detach it now, freed once idle,
			// so that the temporary directory around it can go.
			if lout, lerr := exec.Command("umount", "-l", dir).CombinedOutput(); lerr != nil {
				t.Errorf("umount %s: %v: %s; umount -l: %v: %s", dir, err, out, lerr, lout)
			}
		}
	})
	return dir
}

// fillDisk writes zeros to path until the filesystem is full, and returns how much it took.
func fillDisk(t *testing.T, path string) int64 {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := make([]byte, 64<<10)
	var n int64
	for range 1 << 14 { // bounded: 1 GiB, far more than the tmpfs
		w, err := f.Write(chunk)
		n += int64(w)
		if errors.Is(err, syscall.ENOSPC) {
			return n
		}
		if err != nil {
			t.Fatalf("fill %s: %v", path, err)
		}
	}
	t.Fatalf("fill %s: no ENOSPC after %d bytes", path, n)
	return 0
}

// infoPersistence returns one field of INFO persistence.
func infoPersistence(addr, field string) (string, error) {
	v, err := call(addr, "INFO", "persistence")
	if err != nil {
		return "", err
	}
	s, _ := v.(string)
	for _, line := range strings.Split(s, "\r\n") {
		if val, ok := strings.CutPrefix(line, field+":"); ok {
			return val, nil
		}
	}
	return "", fmt.Errorf("INFO persistence has no %s: %q", field, s)
}

// TestFullDiskRealFilesystem runs the real binary on a small tmpfs and fills it: writes get a
// clear MISCONF reply (never UNCERTAIN, never OK for something not written), INFO and /readyz
// say the disk is full, reads go on, and once space is freed the node takes writes again by
// itself; after a restart every acknowledged write is there.
func TestFullDiskRealFilesystem(t *testing.T) {
	mnt := mountTmpfs(t, fullDiskSize)
	web := net.JoinHostPort("127.0.0.1", strconv.Itoa(freePort(t)))
	n := startNodeWith(t, nil, "--metrics-addr", web)
	// startNodeWith runs on its own temp dir: run the node again on the tmpfs instead.
	if err := n.stop(); err != nil {
		t.Fatal(err)
	}
	n.dir = filepath.Join(mnt, "data")
	n = n.restart(t)

	filler := filepath.Join(mnt, "filler")
	took := fillDisk(t, filler)
	t.Logf("filler took %d bytes", took)

	// Each write an MSET of 50 values of the largest size (4096 bytes): a segment fills in
	// about 40 of them.
	value := strings.Repeat("v", 4096)
	acked := map[string]bool{}
	var refusal string
	deadline := time.Now().Add(30 * time.Second)
	for i := 0; refusal == "" && i < 2000 && time.Now().Before(deadline); i++ {
		args := []string{"MSET"}
		for j := range 50 {
			args = append(args, fmt.Sprintf("k%d-%d", i, j), value)
		}
		key := args[1]
		v, err := call(n.addr, args...)
		var re *resp.ReplyError
		switch {
		case errors.As(err, &re):
			refusal = re.Error()
		case err != nil:
			t.Fatalf("SET %s: %v", key, err)
		case v != "OK":
			t.Fatalf("SET %s = %#v", key, v)
		default:
			for j := 1; j < len(args); j += 2 {
				acked[args[j]] = true
			}
		}
	}
	t.Logf("%d keys acknowledged before the first refusal: %s", len(acked), refusal)
	if !strings.HasPrefix(refusal, "MISCONF disk full") {
		t.Fatalf("first refused write = %q; want MISCONF disk full …", refusal)
	}
	for i := range 10 {
		_, err := call(n.addr, "SET", fmt.Sprintf("full-%d", i), "x")
		var re *resp.ReplyError
		if !errors.As(err, &re) || !strings.HasPrefix(re.Error(), "MISCONF disk full") {
			t.Fatalf("SET while full = %v; want MISCONF disk full …", err)
		}
	}
	if v, err := call(n.addr, "GET", "k0-0"); err != nil || v != value {
		t.Fatalf("GET k0-0 while full = %.20q, %v; want the value written", v, err)
	}
	if st, err := infoPersistence(n.addr, "disk_state"); err != nil || st != "full" {
		t.Fatalf("INFO disk_state while full = %q, %v; want full", st, err)
	}
	if err := readyz(web); err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "disk full") {
		t.Fatalf("/readyz while full: %v; want 503 saying disk full", err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	testutil.WaitFor(t, 10*time.Second, func() error {
		v, err := call(n.addr, "SET", "after", "x")
		if err == nil && v != "OK" {
			err = fmt.Errorf("SET after = %#v", v)
		}
		return err
	})
	t.Logf("writes taken again %v after space was freed", time.Since(start).Round(time.Millisecond))
	if st, err := infoPersistence(n.addr, "disk_state"); err != nil || st != "ok" {
		t.Fatalf("INFO disk_state after space was freed = %q, %v; want ok", st, err)
	}
	testutil.WaitFor(t, 5*time.Second, func() error { return readyz(web) })

	if err := n.stop(); err != nil {
		t.Fatal(err)
	}
	n = n.restart(t)
	for key := range acked {
		if v, err := call(n.addr, "GET", key); err != nil || v != value {
			t.Fatalf("acknowledged %s after restart: GET = %.20q, %v", key, v, err)
		}
	}
}
