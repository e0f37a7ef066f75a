package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"runtime"
	"testing"
)

func TestFsyncCommand(t *testing.T) {
	dir := t.TempDir()
	var out bytes.Buffer
	if err := runFsync(context.Background(), []string{"-dir", dir, "-writers", "1,2", "-duration", "50ms", "-json"}, &out, io.Discard); err != nil {
		t.Fatal(err)
	}
	var rs []FsyncResult
	if err := json.Unmarshal(out.Bytes(), &rs); err != nil {
		t.Fatalf("%v in %q", err, out.String())
	}
	if len(rs) != 2 || rs[0].Writers != 1 || rs[1].Writers != 2 {
		t.Fatalf("results %+v; want writers 1 then 2", rs)
	}
	for _, r := range rs {
		if r.Syncs < 1 || r.SyncsPerSec <= 0 || r.P50us > r.P99us {
			t.Errorf("%+v: want syncs, a rate, and p50 <= p99", r)
		}
		// The kernel charges CPU time by ticks, so a run of one slow sync (CI's disks take
		// 50 ms) may be charged nothing: the figures must be there and not negative.
		if runtime.GOOS == "linux" && (r.SysUS == nil || r.UserUS == nil || *r.SysUS < 0 || *r.UserUS < 0) {
			t.Errorf("%+v: want the CPU time per sync on Linux", r)
		}
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("%d entries left in -dir; want the writers' files removed", len(left))
	}
	for _, bad := range [][]string{{"-writers", "0"}, {"-writers", "x"}, {"-bytes", "0"}, {"-duration", "0s"}} {
		if err := runFsync(context.Background(), append([]string{"-dir", dir}, bad...), io.Discard, io.Discard); !errors.Is(err, errUsage) {
			t.Errorf("%v: err %v; want a usage error", bad, err)
		}
	}
}
