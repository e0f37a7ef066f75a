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

	"github.com/redis/go-redis/v9"
)

// TestScriptStallFigures measures LOCK's latency on other keys while scripts loop to their time
// limit: two connections EVAL a busy loop back to back (each run ends at the 1 s
// limit) while one client LOCKs fresh keys one after another; each round prints the LOCKs'
// p50, p99 and max, after a round with no script for the machine's own noise. It prints
// figures and asserts nothing about them. Run it with
//
//	RAFTLOCK_SCRIPT_STALL=2 go test -count=1 -run TestScriptStallFigures -v ./server/
//
// where the number is how many connections loop (each burns a core: on a machine of 2 cores, 2
// of them starve the rest of the process whatever the locks do).
func TestScriptStallFigures(t *testing.T) {
	loopers, _ := strconv.Atoi(os.Getenv("RAFTLOCK_SCRIPT_STALL"))
	if loopers <= 0 {
		t.Skip("set RAFTLOCK_SCRIPT_STALL to the number of looping connections to measure")
	}
	const rounds, roundTime = 5, 3 * time.Second
	addr, _ := startServer(t, func(c *Config) { c.ScriptTimeout = time.Second })
	// A LOCK may wait for seconds behind the scripts: no read timeout.
	locker := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2, PoolSize: 1, MaxRetries: -1, DisableIdentity: true, ReadTimeout: time.Minute})
	defer locker.Close()
	n := 0
	// round LOCKs fresh keys for roundTime and returns the LOCKs' p99.
	round := func(name string) time.Duration {
		var lat []time.Duration
		end := time.Now().Add(roundTime)
		for time.Now().Before(end) {
			n++
			start := time.Now()
			if err := locker.Do(t.Context(), "LOCK", "other"+strconv.Itoa(n), "10000").Err(); err != nil {
				t.Fatalf("LOCK: %v", err)
			}
			lat = append(lat, time.Since(start))
		}
		slices.Sort(lat)
		p := func(q float64) time.Duration { return lat[min(len(lat)-1, int(q*float64(len(lat))))] }
		fmt.Printf("%s: %d LOCKs, p50 %v, p99 %v, max %v\n", name, len(lat), p(0.50), p(0.99), lat[len(lat)-1])
		return p(0.99)
	}
	// The machine's own noise, with no script running.
	baseline := round("no script")
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
	var p99s []time.Duration
	for i := range rounds {
		p99s = append(p99s, round(fmt.Sprintf("round %d, %d scripts looping", i, loopers)))
	}
	slices.Sort(p99s)
	fmt.Printf("LOCK p99 with no script: %v; median of the rounds' p99 with scripts looping: %v\n", baseline, p99s[len(p99s)/2])
	cancel()
	wg.Wait()
}
