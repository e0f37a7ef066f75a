package main

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestSummarize(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	phases := []phase{{"before", 0, ms(1000)}, {"wave", ms(1000), ms(1100)}, {"after", ms(1100), ms(2100)}}
	var samples []sample
	// before: 10 grants per 100 ms, each 1 ms, except none in [500, 600).
	for at := 5; at < 1000; at += 10 {
		if at < 500 || at >= 600 {
			samples = append(samples, sample{done: ms(at), lat: ms(1)})
		}
	}
	// One grant held up by the wave: it started before, but ends inside.
	samples = append(samples, sample{done: ms(1050), lat: ms(80)})
	// after: one grant; and two outside every phase.
	samples = append(samples, sample{done: ms(1100), lat: ms(2)}, sample{done: ms(2100), lat: ms(1)}, sample{done: -ms(1), lat: ms(1)})

	got := summarize(samples, phases, ms(100))
	want := []PhaseStats{
		{Name: "before", Start: 0, End: ms(1000), Grants: 90, PerSec: 90, P50: ms(1), P99: ms(1), P999: ms(1), Max: ms(1), MinWindowPerSec: 0},
		{Name: "wave", Start: ms(1000), End: ms(1100), Grants: 1, PerSec: 10, P50: ms(80), P99: ms(80), P999: ms(80), Max: ms(80), MinWindowPerSec: 10},
		{Name: "after", Start: ms(1100), End: ms(2100), Grants: 1, PerSec: 1, P50: ms(2), P99: ms(2), P999: ms(2), Max: ms(2), MinWindowPerSec: 0},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("summarize mismatch (-want +got):\n%s", diff)
	}
}

func TestSummarizeShortAndEmptyPhases(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	// A phase shorter than a window has no slowest window; an empty one
	// (an overrunning fill leaves hold with no length) has no rate either.
	phases := []phase{{"hold", ms(500), ms(500)}, {"wave", ms(500), ms(550)}}
	got := summarize([]sample{{done: ms(520), lat: ms(3)}}, phases, ms(250))
	if got[0].Grants != 0 || got[0].PerSec != 0 || got[0].MinWindowPerSec != -1 {
		t.Errorf("empty phase = %+v, want no grants, rate 0, no window", got[0])
	}
	if got[1].Grants != 1 || got[1].MinWindowPerSec != -1 || got[1].PerSec != 20 {
		t.Errorf("short phase = %+v, want 1 grant, 20/s, no window", got[1])
	}
}
