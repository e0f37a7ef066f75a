package script

import (
	"context"
	"errors"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"
)

func liveHeap() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// The script retained 1.28 GB in 0.36 s; now it stops at the memory limit, quickly,
// and what it built is garbage once it stopped.
func TestScriptMemoryLimit(t *testing.T) {
	e := New(Config{Timeout: 20 * time.Second, MaxMemory: 64 << 20})
	defer e.Close()
	before := liveHeap()
	start := time.Now()
	_, err := e.Run(context.Background(), []byte(`local t = {} for i=1,1e8 do t[i] = string.rep('x', 1000) end`), nil, nil, nil)
	if !errors.Is(err, ErrMemory) {
		t.Fatalf("Run = %v, want the memory limit", err)
	}
	if !strings.HasPrefix(err.Error(), "ERR Script killed: it used more than the script memory limit (64 MiB)") {
		t.Errorf("error text %q", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("stopped after %v", d)
	}
	if after := liveHeap(); after > before+32<<20 {
		t.Errorf("live heap %d MiB after the run, %d MiB before", after>>20, before>>20)
	}
	// A script that makes garbage, not a hoard, runs to its end.
	v, err := e.Run(context.Background(), []byte(`local n = 0 for i=1,200000 do local s = string.rep('y', 1000) n = n + #s end return n`), nil, nil, nil)
	if err != nil || v.Int != 200000*1000 {
		t.Errorf("a garbage-making script = %+v, %v", v, err)
	}
}

func TestScriptReplyLimit(t *testing.T) {
	e := New(Config{MaxReplyBytes: 1 << 20})
	defer e.Close()
	_, err := e.Run(context.Background(), []byte(`local s = string.rep('x', 1000) local t = {} for i=1,2000 do t[i] = s end return t`), nil, nil, nil)
	if !errors.Is(err, ErrMemory) || !strings.Contains(err.Error(), "reply is larger than 1048576 bytes") {
		t.Fatalf("a 2 MB reply = %v", err)
	}
	v, err := e.Run(context.Background(), []byte(`local s = string.rep('x', 1000) local t = {} for i=1,500 do t[i] = s end return t`), nil, nil, nil)
	if err != nil || len(v.Array) != 500 {
		t.Errorf("a 500 KB reply = %d elements, %v", len(v.Array), err)
	}
}

func TestScriptKill(t *testing.T) {
	e := New(Config{Timeout: time.Minute})
	defer e.Close()
	if n := e.Kill(); n != 0 {
		t.Errorf("Kill with nothing running = %d", n)
	}
	done := make(chan error, 1)
	go func() {
		_, err := e.Run(context.Background(), []byte(`while true do end`), nil, nil, nil)
		done <- err
	}()
	deadline := time.Now().Add(5 * time.Second)
	for e.Running() == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // the run starts on another goroutine
	}
	start := time.Now()
	if n := e.Kill(); n != 1 {
		t.Fatalf("Kill = %d, want 1", n)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrKilled) || !strings.HasPrefix(err.Error(), "ERR Script killed by user with SCRIPT KILL...") {
			t.Errorf("killed run = %v", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("the script stopped %v after Kill", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Kill did not stop the script")
	}
	// The next run on the pool is not killed.
	if v, err := e.Run(context.Background(), []byte(`return 1`), nil, nil, nil); err != nil || v.Int != 1 {
		t.Errorf("run after a kill = %+v, %v", v, err)
	}
}

// loadstring and load compile outside the time limit, so their source is bounded instead.
func TestLoadBounded(t *testing.T) {
	e := New(Config{Timeout: 2 * time.Second})
	defer e.Close()
	for _, src := range []string{
		`local f, err = loadstring(string.rep('a=1 ', 1e6)) return {f == nil, err}`,
		`local n = 0 local f, err = load(function() n = n + 1 if n > 1e4 then return nil end return string.rep('a=1 ', 1000) end) return {f == nil, err}`,
	} {
		start := time.Now()
		v, err := e.Run(context.Background(), []byte(src), nil, nil, nil)
		if err != nil || len(v.Array) != 2 || v.Array[0].Int != 1 || !strings.HasPrefix(string(v.Array[1].Str), "chunk too large") {
			t.Errorf("%s = %+v, %v", src, v, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("%s took %v", src, d)
		}
	}
	v, err := e.Run(context.Background(), []byte(`local parts = {'return ', '4', '2'} local i = 0 return load(function() i = i + 1 return parts[i] end)()`), nil, nil, nil)
	if err != nil || v.Int != 42 {
		t.Errorf("load of pieces = %+v, %v", v, err)
	}
}
