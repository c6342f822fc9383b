package cost

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// Anchor is a reference cost drawn across the chart.
type Anchor struct {
	Label      string
	PerMillion float64
}

// Anchors are the references of issue 12: the AWS SAM WebSocket chat
// sample (no storage, no ack; at 500 connections) and a bare send in plus
// push out.
var Anchors = []Anchor{
	{Label: "AWS chat sample ($10)", PerMillion: 10},
	{Label: "bare send + push ($2)", PerMillion: 2},
}

// chartColors colour the components in Price's order.
var chartColors = []string{"#4e79a7", "#a0cbe8", "#f28e2b", "#ffbe7d", "#59a14f", "#8cd17d", "#b6992d", "#e15759", "#79706e"}

// Chart draws each scenario's cost per million units as a stacked bar,
// one segment per component, with the anchors as vertical lines, as SVG.
func Chart(w io.Writer, title string, scenarios []Priced, anchors []Anchor) error {
	const left, barH, gap, width, top = 110, 28, 14, 560, 70
	top2 := top + len(scenarios)*(barH+gap)
	height := top2 + 40 + 18*((len(chartColors)+1)/2)
	limit := 0.0
	for _, s := range scenarios {
		limit = max(limit, s.PerMillion)
	}
	for _, a := range anchors {
		limit = max(limit, a.PerMillion)
	}
	limit = math.Ceil(limit/10) * 10
	x := func(v float64) float64 { return left + v/limit*width }
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", left+width+30, height)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="14" font-weight="bold">%s</text>`+"\n", left, html.EscapeString(title))
	for v := 0.0; v <= limit; v += 10 {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle" fill="#555">$%g</text>`+"\n",
			x(v), top-8, x(v), top2, x(v), top2+14, v)
	}
	for i, s := range scenarios {
		y := top + i*(barH+gap)
		fmt.Fprintf(&b, `<text x="%d" y="%d" text-anchor="end">%s</text>`+"\n", left-8, y+barH/2+4, html.EscapeString(s.Scenario))
		at := 0.0
		for j, l := range s.Lines {
			if l.PerMillion <= 0 {
				continue
			}
			fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s: $%.2f</title></rect>`+"\n",
				x(at), y, x(at+l.PerMillion)-x(at), barH, chartColors[j%len(chartColors)], html.EscapeString(l.Component), l.PerMillion)
			at += l.PerMillion
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d">$%.2f</text>`+"\n", x(at)+4, y+barH/2+4, s.PerMillion)
	}
	for i, a := range anchors {
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#c00" stroke-dasharray="4 3"/><text x="%.1f" y="%d" fill="#c00" text-anchor="start">%s</text>`+"\n",
			x(a.PerMillion), top-8-14*(i%2), x(a.PerMillion), top2, x(a.PerMillion)+3, top-12-14*(i%2), html.EscapeString(a.Label))
	}
	if len(scenarios) > 0 {
		for j, l := range scenarios[0].Lines {
			lx, ly := left+(j%2)*280, top2+32+18*(j/2)
			fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n",
				lx, ly-10, chartColors[j%len(chartColors)], lx+18, ly, html.EscapeString(l.Component))
		}
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
