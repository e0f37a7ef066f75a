package node

import "testing"

// A log's end holds the entries committed by then, and those up to its last entry of that
// entry's term; not one of another term above the committed prefix (it may have replaced what the
// log held), not one past its end, not index 0.
func TestLogEndHolds(t *testing.T) {
	end := LogEnd{Last: LogPosition{Index: 10, Term: 3}, Committed: 6}
	for _, c := range []struct {
		e    LogPosition
		want bool
	}{
		{LogPosition{Index: 10, Term: 3}, true},
		{LogPosition{Index: 8, Term: 3}, true},
		{LogPosition{Index: 6, Term: 2}, true},
		{LogPosition{Index: 5, Term: 1}, true},
		{LogPosition{Index: 8, Term: 2}, false}, // of an earlier term, committed later: perhaps not what the log held
		{LogPosition{Index: 9, Term: 4}, false},
		{LogPosition{Index: 11, Term: 3}, false},
		{LogPosition{}, false},
	} {
		if got := end.Holds(c.e); got != c.want {
			t.Errorf("%+v.Holds(%+v) = %v, want %v", end, c.e, got, c.want)
		}
	}
	if (LogEnd{}).Holds(LogPosition{Index: 1, Term: 1}) {
		t.Error("the end of an empty log holds an entry")
	}
}
