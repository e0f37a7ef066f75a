package node

import "testing"

// A log that ended at a position holds the entries up to its index of its last entry's term or
// an earlier one; one of a later term, or past its end, is new; the zero position holds nothing.
func TestLogPositionHolds(t *testing.T) {
	end := LogPosition{Index: 10, Term: 3}
	for _, c := range []struct {
		e    LogPosition
		want bool
	}{
		{LogPosition{Index: 10, Term: 3}, true},
		{LogPosition{Index: 4, Term: 1}, true},
		{LogPosition{Index: 11, Term: 3}, false},
		{LogPosition{Index: 9, Term: 4}, false},
		{LogPosition{Index: 11, Term: 2}, false},
	} {
		if got := end.Holds(c.e); got != c.want {
			t.Errorf("%+v.Holds(%+v) = %v, want %v", end, c.e, got, c.want)
		}
	}
	if (LogPosition{}).Holds(LogPosition{Index: 1, Term: 1}) {
		t.Error("the zero position holds an entry")
	}
}
