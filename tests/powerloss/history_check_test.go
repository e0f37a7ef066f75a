package powerloss

import (
	"fmt"
	"testing"

	"github.com/raftlock/raftlock/fsm"
)

// TestPossibleStates: the history's replay accepts what acknowledged requests allow and reports
// what they do not, an acknowledged grant or release lost (each case fails without its check).
func TestPossibleStates(t *testing.T) {
	lock := func(owner string, out outcome, tok uint64) op {
		return op{kind: opLock, owner: owner, outcome: out, token: fsm.Token(tok)}
	}
	unlock := func(owner string, out outcome, tok uint64) op {
		return op{kind: opUnlock, owner: owner, outcome: out, token: fsm.Token(tok)}
	}
	for _, c := range []struct {
		name    string
		ops     []op
		reports int
	}{
		{"grant then release", []op{lock("a", granted, 7), unlock("a", released, 7)}, 0},
		{"granted twice", []op{lock("a", granted, 7), lock("b", granted, 8)}, 1},
		{"released with a token never granted", []op{lock("a", granted, 7), unlock("a", released, 9)}, 1},
		{"release finds an acknowledged grant gone", []op{lock("a", granted, 7), unlock("a", notFound, 7)}, 1},
		{"release finds an unacknowledged grant never applied", []op{lock("a", unknown, 0), unlock("a", notFound, 7)}, 0},
		{"an unknown release, then a grant", []op{lock("a", granted, 7), unlock("a", unknown, 7), lock("b", granted, 8)}, 0},
	} {
		var reports []string
		h := newHistory(func(format string, args ...any) { reports = append(reports, fmt.Sprintf(format, args...)) })
		h.possible(&keyLog{key: "k", ops: c.ops})
		if len(reports) != c.reports {
			t.Errorf("%s: %d reports %q, want %d", c.name, len(reports), reports, c.reports)
		}
	}
}
