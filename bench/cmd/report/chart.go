package main

import (
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"strconv"
	"strings"
)

// colors of the chart's series: sluice in blues and greens, peers in warm
// colours, the raw references in greys.
var colors = map[string]string{
	"sluice_fixed_window":           "#9ecae1",
	"sluice_sliding_window_log":     "#6baed6",
	"sluice_sliding_window_counter": "#4292c6",
	"sluice_leaky_bucket":           "#2171b5",
	"sluice_token_bucket":           "#08519c",
	"sluice_gcra":                   "#08306b",
	"sluice_policy":                 "#41ab5d",
	"sluice_gcra_ctxtimeout":        "#6a51a3",
	"redis_rate":                    "#e6550d",
	"ulule":                         "#fdae6b",
	"throttled":                     "#a63603",
	"raw_incr":                      "#bdbdbd",
	"raw_evalsha":                   "#737373",
}

var fallbackColors = []string{"#984ea3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d"}

// writeChart draws decisions/s of BenchmarkAllow as grouped bars: one group
// per concurrency, one bar per library, each labelled with its value.
func writeChart(w io.Writer, r *results) error {
	g := gridOf(r.suite("Allow"), 1)
	if len(g.rows) == 0 || len(g.concs) == 0 {
		return errors.New("no BenchmarkAllow results to chart")
	}
	maxV := 0.0
	for _, row := range g.rows {
		for _, c := range g.concs {
			if v, ok := g.value(row, c, "decisions/s"); ok {
				maxV = math.Max(maxV, v)
			}
		}
	}
	top, step := niceScale(maxV * 1.12) // headroom for the value labels

	const (
		width       = 1100
		left, right = 90, 20
		top0        = 60 // top of the plot area
		plotH       = 380
		legendRow   = 22
		legendCols  = 3
	)
	plotW := float64(width - left - right)
	legendRows := (len(g.rows) + legendCols - 1) / legendCols
	height := top0 + plotH + 70 + legendRows*legendRow + 10
	y := func(v float64) float64 { return top0 + plotH - v/top*plotH }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="26" font-size="17" font-weight="bold" fill="#222">Rate-limit decisions per second, one redis-server on loopback (higher is better)</text>`+"\n", left)
	sub := "sluice and its peers at 1 to 256 concurrent callers"
	if e := r.env; e["nproc"] != "" {
		sub += fmt.Sprintf(" · %s cores (%s) · Go %s · Redis %s", e["nproc"], e["cpu"], strings.TrimPrefix(e["go"], "go"), e["redis"])
	}
	fmt.Fprintf(&b, `<text x="%d" y="46" font-size="12" fill="#555">%s</text>`+"\n", left, html.EscapeString(sub))

	// grid lines and the y axis
	for v := 0.0; v <= top*1.0001; v += step {
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e0e0e0"/>`+"\n", left, y(v), width-right, y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="12" text-anchor="end" fill="#333">%s</text>`+"\n", left-8, y(v)+4, fmtTick(v))
	}
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", left, top0, left, top0+plotH)
	fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", left, top0+plotH, width-right, top0+plotH)
	fmt.Fprintf(&b, `<text transform="translate(22 %d) rotate(-90)" font-size="13" text-anchor="middle" fill="#222">decisions per second</text>`+"\n", top0+plotH/2)

	// bars
	groupW := plotW / float64(len(g.concs))
	barW := groupW * 0.86 / float64(len(g.rows))
	for gi, c := range g.concs {
		x0 := float64(left) + float64(gi)*groupW + groupW*0.07
		for ri, row := range g.rows {
			v, ok := g.value(row, c, "decisions/s")
			if !ok {
				continue
			}
			x := x0 + float64(ri)*barW
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s, c=%d: %s decisions/s</title></rect>`+"\n",
				x+0.5, y(v), barW-1, y(0)-y(v), color(row, ri), html.EscapeString(name(row)), c, fmtRate(v))
			fmt.Fprintf(&b, `<text transform="translate(%.1f %.1f) rotate(-90)" font-size="9" fill="#333">%s</text>`+"\n",
				x+barW/2+3, y(v)-3, fmtRate(v))
		}
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="13" text-anchor="middle" fill="#222">%d</text>`+"\n",
			float64(left)+(float64(gi)+0.5)*groupW, top0+plotH+18, c)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="13" text-anchor="middle" fill="#222">concurrent callers</text>`+"\n",
		float64(left)+plotW/2, top0+plotH+40)

	// legend
	colW := plotW / legendCols
	for ri, row := range g.rows {
		lx := float64(left) + float64(ri%legendCols)*colW
		ly := top0 + plotH + 62 + (ri/legendCols)*legendRow
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="14" height="14" fill="%s"/>`+"\n", lx, ly-11, color(row, ri))
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="12" fill="#222">%s</text>`+"\n", lx+20, ly, html.EscapeString(name(row)))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// fmtTick writes an axis value without trailing zeros: 0, 20k, 2.5k, 1.5M.
func fmtTick(v float64) string {
	trim := func(x float64) string { return strconv.FormatFloat(x, 'f', -1, 64) }
	switch {
	case v >= 1e6:
		return trim(v/1e6) + "M"
	case v >= 1e3:
		return trim(v/1e3) + "k"
	default:
		return trim(v)
	}
}

func color(row string, i int) string {
	if c, ok := colors[row]; ok {
		return c
	}
	return fallbackColors[i%len(fallbackColors)]
}

// niceScale returns an axis top at or above v and a round tick step (1, 2,
// 2.5 or 5 times a power of ten) giving 4 to 8 ticks.
func niceScale(v float64) (top, step float64) {
	if v <= 0 {
		return 1, 0.25
	}
	raw := v / 5
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		step = m * mag
		if step >= raw {
			break
		}
	}
	return math.Ceil(v/step) * step, step
}
