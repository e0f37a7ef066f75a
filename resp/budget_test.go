package resp

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// countingBudget records what a Reader charges, refusing past limit.
type countingBudget struct {
	held, peak, limit int
}

func (b *countingBudget) Grow(n int) string {
	if b.held+n > b.limit {
		return "over budget"
	}
	b.held += n
	b.peak = max(b.peak, b.held)
	return ""
}

func (b *countingBudget) Shrink(n int) { b.held -= n }

// A Reader charges its buffer past the first 16 KiB before it grows (so the budget sees a
// large command before it is in memory), gives it back once the command was read, and a
// refused growth is a protocol error that names the budget.
func TestReaderBudget(t *testing.T) {
	arg := strings.Repeat("x", 1<<20)
	cmd := fmt.Sprintf("*2\r\n$3\r\nSET\r\n$%d\r\n%s\r\n", len(arg), arg)

	b := &countingBudget{limit: 4 << 20}
	r := NewReader(strings.NewReader(cmd+cmd), Limits{})
	r.SetBudget(b)
	for range 2 {
		args, err := r.ReadCommand()
		if err != nil || len(args) != 2 || len(args[1]) != len(arg) {
			t.Fatalf("ReadCommand = %d args, %v", len(args), err)
		}
	}
	if b.peak < len(arg)-initialBufSize {
		t.Errorf("peak charge %d, want at least the argument's %d bytes past the first buffer", b.peak, len(arg))
	}
	r.Release()
	if b.held != 0 {
		t.Errorf("after Release the reader still charges %d bytes", b.held)
	}

	small := &countingBudget{limit: 256 << 10}
	r = NewReader(strings.NewReader(cmd), Limits{})
	r.SetBudget(small)
	_, err := r.ReadCommand()
	var pe *ProtocolError
	if !errors.As(err, &pe) || pe.Msg != "over budget" {
		t.Fatalf("ReadCommand over the budget = %v, want the budget's refusal", err)
	}
	if small.held > small.limit {
		t.Errorf("charged %d past the limit %d", small.held, small.limit)
	}
	if _, err2 := r.ReadCommand(); !errors.Is(err2, err) {
		t.Errorf("the refusal is not sticky: %v", err2)
	}
	r.Discard()
	if small.held != 0 {
		t.Errorf("after Discard the reader still charges %d bytes", small.held)
	}
}
