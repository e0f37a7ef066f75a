package chaos

import (
	"bufio"
	"fmt"
	"os"
	"sort"
	"strings"
)

// checkFencing checks that known grants have unique tokens across all keys and that tokens
// increase in real-time order: a grant that completed before another was invoked has the lower
// token.
func checkFencing(ops []Op) []string {
	var grants []Op
	for _, op := range ops {
		if op.Kind == Acquire && op.Outcome == OK && op.Granted {
			grants = append(grants, op)
		}
	}
	var bad []string
	seen := map[uint64]Op{}
	for _, g := range grants {
		if prev, dup := seen[g.Token]; dup {
			bad = append(bad, fmt.Sprintf("fencing: token %d granted twice: %s and %s", g.Token, prev, g))
		}
		seen[g.Token] = g
	}
	byComplete := append([]Op(nil), grants...)
	sort.Slice(byComplete, func(i, j int) bool { return byComplete[i].Complete < byComplete[j].Complete })
	byInvoke := append([]Op(nil), grants...)
	sort.Slice(byInvoke, func(i, j int) bool { return byInvoke[i].Invoke < byInvoke[j].Invoke })
	// sweep: for each grant B in invoke order, the highest token among grants completed before
	// B was invoked must be lower than B's.
	i := 0
	var best *Op
	for _, b := range byInvoke {
		for i < len(byComplete) && byComplete[i].Complete < b.Invoke {
			if best == nil || byComplete[i].Token > best.Token {
				best = &byComplete[i]
			}
			i++
		}
		if best != nil && best.Token >= b.Token {
			bad = append(bad, fmt.Sprintf("fencing: %s completed at %.3fs before %s was invoked at %.3fs, but its token is not lower",
				*best, float64(best.Complete)/1e9, b, float64(b.Invoke)/1e9))
		}
	}
	return bad
}

// checkResource checks the fenced resource: accepted writes per key are in token order, and no
// holder that still held a valid lease in its own view (the write happened before the lease end
// it computed from its grant/renew invoke time) was fenced off: a fenced-off write inside its
// own lease means someone else was granted the key while the lease was still valid.
func checkResource(writes []Write) []string {
	var bad []string
	last := map[string]Write{}
	for _, w := range writes {
		if w.Accepted {
			if p, ok := last[w.Key]; ok && p.Token > w.Token {
				bad = append(bad, fmt.Sprintf("resource: %s accepted token %d after token %d", w.Key, w.Token, p.Token))
			}
			last[w.Key] = w
			continue
		}
		if w.At < w.ValidUntil {
			p := last[w.Key]
			bad = append(bad, fmt.Sprintf("mutual exclusion: c%d holding %s with token %d was fenced off at %.3fs, inside its lease (valid until %.3fs); token %d (c%d) was written at %.3fs",
				w.Client, w.Key, w.Token, float64(w.At)/1e9, float64(w.ValidUntil)/1e9, p.Token, p.Client, float64(p.At)/1e9))
		}
	}
	return bad
}

// checkLogs looks for panics and data races in node logs.
func checkLogs(paths []string) []string {
	var bad []string
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		ln := 0
		for sc.Scan() {
			ln++
			line := sc.Text()
			if strings.Contains(line, "panic:") || strings.Contains(line, "DATA RACE") || strings.HasPrefix(line, "fatal error:") {
				bad = append(bad, fmt.Sprintf("log %s:%d: %s", p, ln, line))
			}
		}
		f.Close()
	}
	return bad
}
