package soak

import (
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The plot is well-formed SVG with a line for each node in each node panel, the latency
// quantiles, and a labelled mark for each restart; a node that was down breaks its line.
func TestWritePlot(t *testing.T) {
	f := flat()
	for i := range f.Nodes {
		if s := &f.Nodes[i]; s.Node == "n2" && s.Sample == 9 {
			s.Up = false
		}
	}
	for s := 1; s <= f.Samples; s++ {
		f.Families = append(f.Families, FamilySample{Sample: s, Family: famAll, Ops: 9000, P50: 700 * time.Microsecond, P99: 6 * time.Millisecond, P999: 30 * time.Millisecond})
	}
	var b strings.Builder
	writePlot(&b, plotInput{title: "soak <test>", figures: f, interval: time.Minute, warmup: 1,
		restarts: []Restart{{At: 4 * time.Minute, Node: "n2"}, {At: 8 * time.Minute, Node: "n3", Kill: true}}})
	out := b.String()

	dec := xml.NewDecoder(strings.NewReader(out))
	series := map[string]int{}
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, out)
		}
		if el, ok := tok.(xml.StartElement); ok && el.Name.Local == "polyline" {
			for _, a := range el.Attr {
				if a.Name.Local == "data-series" {
					series[a.Value]++
				}
			}
		}
	}
	// Three node panels; n2's line is broken once in each.
	for n, want := range map[string]int{"n1": 3, "n2": 6, "n3": 3, "p50": 1, "p99": 1, "p999": 1, "requests": 1} {
		if series[n] != want {
			t.Errorf("%d polylines for %s, want %d (all: %v)", series[n], n, want, series)
		}
	}
	for _, want := range []string{"soak &lt;test&gt;", ">n2 TERM<", ">n3 KILL<", "RSS per node", "p99 by operation family"} {
		if !strings.Contains(out, want) {
			t.Errorf("plot lacks %q", want)
		}
	}
	if dir := os.Getenv("SOAK_PLOT_DIR"); dir != "" { // to look at it
		if err := os.WriteFile(filepath.Join(dir, "test.svg"), []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestNiceStep(t *testing.T) {
	for _, tt := range []struct{ in, want float64 }{{0.7, 1}, {1.2, 2}, {3, 5}, {7, 10}, {42, 50}, {180, 200}} {
		if got := niceStep(tt.in); got != tt.want {
			t.Errorf("niceStep(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}
