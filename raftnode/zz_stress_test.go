package raftnode

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

func TestZZStress(t *testing.T) {
	n := newNode(t, func(c *Config) { c.MaxAppendEntries = 1 })
	var errs, ops atomic.Int64
	var maxLat atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(3 * time.Second)
	for g := range 500 {
		wg.Go(func() {
			for i := 0; time.Now().Before(stop); i++ {
				s := time.Now()
				_, err := tryLock(t.Context(), n, fmt.Sprintf("g%d-%d", g, i), "o", 0)
				if d := int64(time.Since(s)); d > maxLat.Load() {
					maxLat.Store(d)
				}
				if err != nil {
					errs.Add(1)
				}
				ops.Add(1)
			}
		})
	}
	wg.Wait()
	t.Logf("ops %d errs %d maxlat %v", ops.Load(), errs.Load(), time.Duration(maxLat.Load()))
}
