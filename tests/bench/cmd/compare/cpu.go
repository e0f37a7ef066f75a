package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The servers' CPU: what every server process of a system used over a
// cell's measured window, read from /proc, divided by the pairs done.

// cpuMeter returns the CPU time a system's server processes have used so
// far, all of them summed.
type cpuMeter func() (time.Duration, error)

// clockTick is the unit of /proc/PID/stat's times: 1/CLK_TCK seconds, from
// getconf (Go cannot call sysconf without cgo), or the usual 100 Hz if
// getconf fails.
var clockTick = sync.OnceValue(func() time.Duration {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err != nil {
		return 10 * time.Millisecond
	}
	hz, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || hz <= 0 {
		return 10 * time.Millisecond
	}
	return time.Second / time.Duration(hz)
})

// cpuTime returns the user plus system time c's processes have used so far,
// every thread included.
func (c *cluster) cpuTime() (time.Duration, error) {
	var total time.Duration
	for _, p := range c.procs {
		d, err := procCPU(p.cmd.Process.Pid)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p.name, err)
		}
		total += d
	}
	return total, nil
}

// procCPU returns utime+stime of process pid.
func procCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	ticks, err := statTicks(b)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	return time.Duration(ticks) * clockTick(), nil
}

// statTicks returns utime+stime from the text of a /proc/PID/stat: fields
// 14 and 15, in clock ticks. The second field, the command name in
// parentheses, may hold spaces and parentheses itself, so the fields are
// counted from after its last ')': the first of them is field 3.
func statTicks(b []byte) (uint64, error) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("no command name")
	}
	f := bytes.Fields(b[i+1:])
	const utime, stime = 14 - 3, 15 - 3
	if len(f) <= stime {
		return 0, fmt.Errorf("%d fields after the command name, want at least %d", len(f), stime+1)
	}
	u, err1 := strconv.ParseUint(string(f[utime]), 10, 64)
	s, err2 := strconv.ParseUint(string(f[stime]), 10, 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("utime %q, stime %q: not numbers", f[utime], f[stime])
	}
	return u + s, nil
}

// cpuWindow is the CPU the servers used over a stretch of wall time.
type cpuWindow struct {
	used, wall time.Duration
	err        error
}

// sampleCPU reads meter at from and again at to, sleeping until each, and
// returns what was used in between. It gives up (with ctx's error) if ctx
// ends first.
func sampleCPU(ctx context.Context, meter cpuMeter, from, to time.Time) cpuWindow {
	pause(ctx, time.Until(from))
	if ctx.Err() != nil {
		return cpuWindow{err: ctx.Err()}
	}
	c0, err := meter()
	t0 := time.Now()
	if err != nil {
		return cpuWindow{err: err}
	}
	pause(ctx, time.Until(to))
	if ctx.Err() != nil {
		return cpuWindow{err: ctx.Err()}
	}
	c1, err := meter()
	t1 := time.Now()
	if err != nil {
		return cpuWindow{err: err}
	}
	return cpuWindow{used: c1 - c0, wall: t1.Sub(t0)}
}

// perPair returns the servers' CPU per acquire+release pair, in
// microseconds, at rate pairs per second over the window; 0 if either is
// unknown.
func (w cpuWindow) perPair(rate float64) float64 {
	if w.err != nil || w.wall <= 0 || rate <= 0 {
		return 0
	}
	return w.used.Seconds() / w.wall.Seconds() / rate * 1e6
}
