package soak

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// The plot: panels stacked on one time axis, in minutes since the paced load began. Restarts
// are dashed vertical lines through every panel, labelled at the top; the run's first and last
// thirds, which the p99 and error-rate checks compare, are shaded (a process's growth is judged
// over the thirds of its own life, not these).
const (
	plotWidth   = 960
	panelHeight = 170
	marginLeft  = 72
	marginRight = 170 // the legends
	marginTop   = 56
	panelGap    = 44
)

var (
	nodeColors   = map[string]string{"n1": "#1f77b4", "n2": "#ff7f0e", "n3": "#2ca02c"}
	quantColors  = []string{"#2ca02c", "#ff7f0e", "#d62728"} // p50, p99, p999
	familyColors = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f"}
)

type plotInput struct {
	title    string
	figures  Figures
	restarts []Restart
	interval time.Duration
	warmup   int // intervals the checks leave out at the start
}

// series is one line of a panel: its points (x in minutes), broken where a point is missing.
type series struct {
	name, color string
	points      []point
}

type point struct {
	x, y   float64
	ok     bool // false: a gap (the node was down)
	leader bool // drawn ringed: the node led when sampled
}

type panel struct {
	title, unit string
	log         bool // a logarithmic y axis (latency)
	series      []series
}

// writePlot draws the run's figures as an SVG.
func writePlot(w io.Writer, in plotInput) {
	f := in.figures
	minutes := func(sample int) float64 { return (time.Duration(sample) * in.interval).Minutes() }
	var nodes []string
	for _, s := range f.Nodes {
		if !slices.Contains(nodes, s.Node) {
			nodes = append(nodes, s.Node)
		}
	}
	nodePanel := func(title, unit string, v func(NodeSample) (float64, bool)) panel {
		p := panel{title: title, unit: unit}
		for _, n := range nodes {
			sr := series{name: n, color: nodeColors[n]}
			for _, s := range f.Nodes {
				if s.Node == n {
					y, ok := v(s)
					sr.points = append(sr.points, point{minutes(s.Sample), y, ok && s.Up, s.Leader})
				}
			}
			p.series = append(p.series, sr)
		}
		return p
	}
	famSeries := func(fam, name, color string, v func(FamilySample) float64) series {
		sr := series{name: name, color: color}
		for _, s := range f.Families {
			if s.Family == fam {
				y := v(s)
				sr.points = append(sr.points, point{x: minutes(s.Sample), y: y, ok: y > 0})
			}
		}
		return sr
	}
	msOf := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

	panels := []panel{
		nodePanel("RSS per node", "MiB", func(s NodeSample) (float64, bool) { return float64(s.RSS) / (1 << 20), true }),
		nodePanel("goroutines per node", "", func(s NodeSample) (float64, bool) { return float64(s.Goroutines), s.Goroutines >= 0 }),
		nodePanel("open files per node", "", func(s NodeSample) (float64, bool) { return float64(s.OpenFDs), true }),
	}
	lat := panel{title: "latency, every request but LOCK … WAIT", unit: "ms", log: true}
	for i, q := range []struct {
		name string
		v    func(FamilySample) float64
	}{
		{"p50", func(s FamilySample) float64 { return msOf(s.P50) }},
		{"p99", func(s FamilySample) float64 { return msOf(s.P99) }},
		{"p999", func(s FamilySample) float64 { return msOf(s.P999) }},
	} {
		lat.series = append(lat.series, famSeries(famAll, q.name, quantColors[i], q.v))
	}
	byFam := panel{title: "p99 by operation family", unit: "ms", log: true}
	for i, fam := range families {
		byFam.series = append(byFam.series, famSeries(fam, fam, familyColors[i%len(familyColors)], func(s FamilySample) float64 { return msOf(s.P99) }))
	}
	rate := panel{title: "requests and errors per second, every family", unit: "/s"}
	reqs, errs := series{name: "requests", color: "#1f77b4"}, series{name: "errors", color: "#d62728"}
	for s := 1; s <= f.Samples; s++ {
		ops, e := 0, 0
		for _, fs := range f.Families {
			if fs.Sample == s && fs.Family != famAll {
				ops += fs.Ops
				e += fs.Errors
			}
		}
		reqs.points = append(reqs.points, point{x: minutes(s), y: float64(ops) / in.interval.Seconds(), ok: true})
		errs.points = append(errs.points, point{x: minutes(s), y: float64(e) / in.interval.Seconds(), ok: true})
	}
	rate.series = []series{reqs, errs}
	panels = append(panels, lat, byFam, rate)

	xmax := max(minutes(f.Samples), 1e-9)
	plotW := float64(plotWidth - marginLeft - marginRight)
	height := marginTop + len(panels)*(panelHeight+panelGap) + 20
	xAt := func(x float64) float64 { return marginLeft + x/xmax*plotW }

	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", plotWidth, height, plotWidth, height)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(w, `<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", marginLeft, esc(in.title))
	fmt.Fprintf(w, `<text x="%d" y="38" fill="#555">minutes since the paced load began; ringed: the node led; dashed lines: restarts; shaded: the run's thirds the p99 and error checks compare (growth is judged per process)</text>`+"\n", marginLeft)

	third := f.Samples / 3
	for i, p := range panels {
		top := float64(marginTop + i*(panelHeight+panelGap) + 16)
		bottom := top + panelHeight
		fmt.Fprintf(w, `<text x="%d" y="%.1f" font-size="12" font-weight="bold">%s</text>`+"\n", marginLeft, top-6, esc(p.title))
		if third > in.warmup {
			for _, band := range [][2]int{{in.warmup, third}, {f.Samples - third, f.Samples}} {
				fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="%.1f" height="%d" fill="#f0f0f0"/>`+"\n",
					xAt(minutes(band[0])), top, xAt(minutes(band[1]))-xAt(minutes(band[0])), panelHeight)
			}
		}
		ymin, ymax := p.bounds()
		yAt := func(y float64) float64 {
			if p.log {
				return bottom - (math.Log10(y)-math.Log10(ymin))/(math.Log10(ymax)-math.Log10(ymin))*panelHeight
			}
			return bottom - (y-ymin)/(ymax-ymin)*panelHeight
		}
		for _, t := range p.ticks(ymin, ymax) {
			y := yAt(t)
			fmt.Fprintf(w, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", marginLeft, marginLeft+plotW, y, y)
			fmt.Fprintf(w, `<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", marginLeft-6, y+4, esc(tickLabel(t, p.unit)))
		}
		for _, t := range xTicks(xmax) {
			x := xAt(t)
			fmt.Fprintf(w, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#999"/>`+"\n", x, x, bottom, bottom+4)
			fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, bottom+16, strings.TrimSuffix(fmt.Sprintf("%.1f", t), ".0"))
		}
		fmt.Fprintf(w, `<rect x="%d" y="%.1f" width="%.1f" height="%d" fill="none" stroke="#999"/>`+"\n", marginLeft, top, plotW, panelHeight)
		for _, r := range in.restarts {
			x := xAt(r.At.Minutes())
			fmt.Fprintf(w, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#888" stroke-dasharray="4,3"/>`+"\n", x, x, top, bottom)
			if i == 0 {
				fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#555" font-size="9">%s %s</text>`+"\n", x, top+10, r.Node, strings.TrimPrefix(how(r.Kill), "SIG"))
			}
		}
		for j, s := range p.series {
			var segs []string
			var cur []string
			flush := func() {
				if len(cur) > 0 {
					segs = append(segs, strings.Join(cur, " "))
				}
				cur = nil
			}
			for _, pt := range s.points {
				if !pt.ok || (p.log && pt.y <= 0) {
					flush()
					continue
				}
				x, y := xAt(pt.x), yAt(pt.y)
				cur = append(cur, fmt.Sprintf("%.1f,%.1f", x, y))
				fmt.Fprintf(w, `<circle cx="%.1f" cy="%.1f" r="1.8" fill="%s"/>`+"\n", x, y, s.color)
				if pt.leader {
					fmt.Fprintf(w, `<circle cx="%.1f" cy="%.1f" r="4" fill="none" stroke="%s"/>`+"\n", x, y, s.color)
				}
			}
			flush()
			for _, seg := range segs {
				fmt.Fprintf(w, `<polyline data-series="%s" points="%s" fill="none" stroke="%s" stroke-width="1.5"/>`+"\n", esc(s.name), seg, s.color)
			}
			ly := top + 12 + float64(j)*15
			lx := marginLeft + plotW + 12
			fmt.Fprintf(w, `<line x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-width="2"/>`+"\n", lx, lx+18, ly-4, ly-4, s.color)
			fmt.Fprintf(w, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+24, ly, esc(s.name))
		}
	}
	fmt.Fprintln(w, "</svg>")
}

// bounds is the panel's y range: from 0 (a decade below the least value, on a log axis) to a
// little above the greatest.
func (p panel) bounds() (lo, hi float64) {
	lo, hi = math.Inf(1), 0
	for _, s := range p.series {
		for _, pt := range s.points {
			if pt.ok && (!p.log || pt.y > 0) {
				lo, hi = min(lo, pt.y), max(hi, pt.y)
			}
		}
	}
	if p.log {
		if hi == 0 {
			return 0.1, 10
		}
		return math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi*1.01)))
	}
	if hi == 0 {
		return 0, 1
	}
	step := niceStep(hi * 1.1 / 5)
	return 0, math.Ceil(hi*1.1/step) * step
}

// ticks are the y axis's labelled values: decades on a log axis, about five round steps on a
// linear one.
func (p panel) ticks(lo, hi float64) []float64 {
	var out []float64
	if p.log {
		for v := lo; v <= hi*1.0001; v *= 10 {
			out = append(out, v)
		}
		return out
	}
	step := niceStep((hi - lo) / 5)
	for v := lo; v <= hi+step/1000; v += step {
		out = append(out, v)
	}
	return out
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

// xTicks are the time axis's labelled minutes: about ten.
func xTicks(xmax float64) []float64 {
	step := niceStep(xmax / 10)
	var out []float64
	for v := 0.0; v <= xmax+step/1000; v += step {
		out = append(out, v)
	}
	return out
}

func tickLabel(v float64, unit string) string {
	s := strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
	if unit == "" || unit == "/s" {
		return s
	}
	return s + " " + unit
}

func esc(s string) string { return html.EscapeString(s) }
