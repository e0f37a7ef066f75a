package server

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// TestScriptStallFigures measures LOCK's latency on other keys while scripts loop to their time
// limit (issue #30): two connections EVAL a busy loop back to back (each run ends at the 1 s
// limit) while one client LOCKs fresh keys one after another; each round prints the LOCKs'
// p50, p99 and max. It prints figures and asserts nothing about them. Run it with
//
//	RAFTLOCK_SCRIPT_STALL=1 go test -count=1 -run TestScriptStallFigures -v ./server/
func TestScriptStallFigures(t *testing.T) {
	if os.Getenv("RAFTLOCK_SCRIPT_STALL") == "" {
		t.Skip("set RAFTLOCK_SCRIPT_STALL=1 to measure")
	}
	const rounds, roundTime, loopers = 5, 3 * time.Second, 2
	addr, _ := startServer(t, func(c *Config) { c.ScriptTimeout = time.Second })
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	var wg sync.WaitGroup
	for i := range loopers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := client(t, addr, 2)
			for ctx.Err() == nil {
				c.Do(ctx, "EVAL", "local i = 0 while true do i = i + 1 end", "1", "loop"+strconv.Itoa(i))
			}
		}()
	}
	time.Sleep(100 * time.Millisecond) // the loops are running
	locker := client(t, addr, 2)
	var p99s []time.Duration
	n := 0
	for round := range rounds {
		var lat []time.Duration
		end := time.Now().Add(roundTime)
		for time.Now().Before(end) {
			n++
			start := time.Now()
			if err := locker.Do(ctx, "LOCK", "other"+strconv.Itoa(n), "10000").Err(); err != nil {
				t.Fatalf("LOCK: %v", err)
			}
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		p := func(q float64) time.Duration { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
		fmt.Printf("round %d: %d LOCKs, p50 %v, p99 %v, max %v\n", round, len(lat), p(0.50), p(0.99), lat[len(lat)-1])
		p99s = append(p99s, p(0.99))
	}
	slices.Sort(p99s)
	fmt.Printf("median of the rounds' p99: %v\n", p99s[len(p99s)/2])
	cancel()
	wg.Wait()
}
