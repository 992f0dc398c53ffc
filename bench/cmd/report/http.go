package main

import (
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"strings"
)

// httpVariants are BenchmarkHTTP's variants of every router, in table
// order; httpPeers are the ones sluice is compared with.
var (
	httpVariants = []string{"none", "sluice", "sluice_ctxtimeout", "ulule", "redis_rate"}
	httpPeers    = []string{"ulule", "redis_rate"}
)

var httpDisplay = map[string]string{
	"none":              "no limiter",
	"sluice":            "sluice GCRA",
	"sluice_ctxtimeout": "sluice GCRA, ContextTimeoutEnabled client",
	"ulule":             "ulule/limiter v3",
	"redis_rate":        "redis_rate v10",
	"nethttp":           "net/http ServeMux",
}

var httpColors = map[string]string{
	"none":              "#bdbdbd",
	"sluice":            "#08306b",
	"sluice_ctxtimeout": "#4292c6",
	"ulule":             "#fdae6b",
	"redis_rate":        "#e6550d",
}

func httpName(s string) string {
	if d, ok := httpDisplay[s]; ok {
		return d
	}
	return s
}

// httpRun is one router at one concurrency of BenchmarkHTTP: each
// variant's metrics (req/s, p50-us, p99-us) by unit.
type httpRun struct {
	router string
	c      int
	m      map[string]map[string]float64
}

// value returns a variant's metric, and whether it was reported.
func (h *httpRun) value(variant, unit string) (float64, bool) {
	v, ok := h.m[variant][unit]
	return v, ok
}

// bestPeer returns the req/s of the faster of httpPeers, and which it is.
func (h *httpRun) bestPeer() (float64, string) {
	best, which := 0.0, ""
	for _, p := range httpPeers {
		if v, ok := h.value(p, "req/s"); ok && v > best {
			best, which = v, p
		}
	}
	return best, which
}

// httpOf reads BenchmarkHTTP/<router>/c=N and its <variant>-<unit>
// metrics, in the order of the run.
func httpOf(bs []*bench) []*httpRun {
	var out []*httpRun
	for _, b := range bs {
		if len(b.parts) != 3 {
			continue
		}
		c := concurrency(b.parts[2])
		if c < 0 {
			continue
		}
		run := &httpRun{router: b.parts[1], c: c, m: map[string]map[string]float64{}}
		for unit := range b.samples {
			for _, m := range []string{"req/s", "p50-us", "p99-us", "cli-us/req", "srv-us/req", "calls/req"} {
				if v, ok := strings.CutSuffix(unit, "-"+m); ok {
					if run.m[v] == nil {
						run.m[v] = map[string]float64{}
					}
					run.m[v][m], _ = b.metric(unit)
				}
			}
		}
		if len(run.m) > 0 {
			out = append(out, run)
		}
	}
	return out
}

// writeHTTP writes BenchmarkHTTP: per router and concurrency, each
// variant's requests/s and latency, the latency each limiter adds to the
// same router without one, sluice's throughput over the better peer's,
// and the CPU (this process's, redis-server's) and script calls per
// request.
func writeHTTP(w io.Writer, runs []*httpRun) {
	if len(runs) == 0 {
		return
	}
	fmt.Fprintf(w, "\n#### HTTP end to end: GET through a real server on loopback, per router, variants in turns\n\n")
	fmt.Fprintf(w, "Added: the variant's p50 (p99) minus the same router's without a limiter, in the same run. "+
		"÷ best peer: sluice's requests/s over the faster of ulule/limiter and redis_rate at that router and concurrency. "+
		"CPU per request: this process's (the load generator and the servers as well as the limiter) · redis-server's, in the variant's turns; "+
		"script calls: EVALSHA and EVAL per request.\n\n")
	fmt.Fprintf(w, "| router | c | variant | req/s | p50 µs | p99 µs | added p50 / p99 µs | sluice ÷ best peer | CPU µs per request: process · Redis | script calls per request |\n|---|--:|---|--:|--:|--:|--:|--:|--:|--:|\n")
	for _, run := range runs {
		base50, ok50 := run.value("none", "p50-us")
		base99, ok99 := run.value("none", "p99-us")
		best, _ := run.bestPeer()
		for _, v := range httpVariants {
			if run.m[v] == nil {
				continue
			}
			f := func(unit string, format func(float64) string) string {
				if x, ok := run.value(v, unit); ok {
					return format(x)
				}
				return "–"
			}
			added := "–"
			if v != "none" && ok50 && ok99 {
				p50, ok1 := run.value(v, "p50-us")
				p99, ok2 := run.value(v, "p99-us")
				if ok1 && ok2 {
					added = fmtAdded(p50-base50) + " / " + fmtAdded(p99-base99)
				}
			}
			ratio := "–"
			if rps, ok := run.value(v, "req/s"); strings.HasPrefix(v, "sluice") && ok && best > 0 {
				ratio = fmt.Sprintf("%.2f×", rps/best)
			}
			cpu := "–"
			if cli, ok1 := run.value(v, "cli-us/req"); ok1 {
				if srv, ok2 := run.value(v, "srv-us/req"); ok2 {
					cpu = fmtUs(cli) + " · " + fmtUs(srv)
				}
			}
			fmt.Fprintf(w, "| %s | %d | %s | %s | %s | %s | %s | %s | %s | %s |\n", httpName(run.router), run.c, httpName(v),
				f("req/s", fmtRate), f("p50-us", fmtUs), f("p99-us", fmtUs), added, ratio, cpu, f("calls/req", fmtSmall))
		}
	}
}

// fmtAdded writes a latency difference in µs with its sign.
func fmtAdded(v float64) string {
	if math.Abs(v) < 100 {
		return fmt.Sprintf("%+.1f", v)
	}
	return fmt.Sprintf("%+.0f", v)
}

// writeHTTPChart draws BenchmarkHTTP's requests/s as grouped bars, one
// panel per concurrency (each with its own scale), one group per router,
// one bar per variant.
func writeHTTPChart(w io.Writer, r *results) error {
	runs := httpOf(r.suite("HTTP"))
	if len(runs) == 0 {
		return errors.New("no BenchmarkHTTP results to chart")
	}
	var concs []int
	var routers []string
	seen := map[string]bool{}
	for _, run := range runs {
		if k := fmt.Sprint("c", run.c); !seen[k] {
			seen[k] = true
			concs = append(concs, run.c)
		}
		if k := "r" + run.router; !seen[k] {
			seen[k] = true
			routers = append(routers, run.router)
		}
	}
	byKey := map[string]*httpRun{}
	for _, run := range runs {
		byKey[fmt.Sprint(run.router, "/", run.c)] = run
	}

	const (
		panelW, panelH = 520, 300
		left, gap      = 70, 40
		top0           = 70
	)
	width := left + len(concs)*(panelW+gap)
	height := top0 + panelH + 80
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Helvetica, Arial, sans-serif">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="#ffffff"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%d" y="26" font-size="17" font-weight="bold" fill="#222">HTTP requests per second through a real server on loopback (higher is better)</text>`+"\n", left)
	sub := "trivial handler, no limiter or a Redis-backed limiter keyed by an API-key header, variants in turns"
	if e := r.env; e["nproc"] != "" {
		sub += fmt.Sprintf(" · %s cores · Go %s · Redis %s", e["nproc"], strings.TrimPrefix(e["go"], "go"), e["redis"])
	}
	fmt.Fprintf(&b, `<text x="%d" y="46" font-size="12" fill="#555">%s</text>`+"\n", left, html.EscapeString(sub))

	for pi, c := range concs {
		x0 := float64(left + pi*(panelW+gap))
		maxV := 0.0
		for _, run := range runs {
			if run.c != c {
				continue
			}
			for _, v := range httpVariants {
				if x, ok := run.value(v, "req/s"); ok {
					maxV = math.Max(maxV, x)
				}
			}
		}
		top, step := niceScale(maxV * 1.12)
		y := func(v float64) float64 { return top0 + panelH - v/top*panelH }
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="14" font-weight="bold" text-anchor="middle" fill="#222">c=%d</text>`+"\n", x0+panelW/2, top0-8, c)
		for v := 0.0; v <= top*1.0001; v += step {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#e0e0e0"/>`+"\n", x0, y(v), x0+panelW, y(v))
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="end" fill="#333">%s</text>`+"\n", x0-6, y(v)+4, fmtTick(v))
		}
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#333"/>`+"\n", x0, top0+panelH, x0+panelW, top0+panelH)
		groupW := float64(panelW) / float64(len(routers))
		barW := groupW * 0.84 / float64(len(httpVariants))
		for gi, router := range routers {
			run := byKey[fmt.Sprint(router, "/", c)]
			gx := x0 + float64(gi)*groupW + groupW*0.08
			for vi, v := range httpVariants {
				if run == nil {
					break
				}
				val, ok := run.value(v, "req/s")
				if !ok {
					continue
				}
				x := gx + float64(vi)*barW
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s, %s, c=%d: %s requests/s</title></rect>`+"\n",
					x+0.5, y(val), barW-1, y(0)-y(val), httpColors[v], html.EscapeString(httpName(router)), html.EscapeString(httpName(v)), c, fmtRate(val))
				fmt.Fprintf(&b, `<text transform="translate(%.1f %.1f) rotate(-90)" font-size="9" fill="#333">%s</text>`+"\n",
					x+barW/2+3, y(val)-3, fmtRate(val))
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="12" text-anchor="middle" fill="#222">%s</text>`+"\n",
				x0+(float64(gi)+0.5)*groupW, top0+panelH+18, html.EscapeString(httpName(router)))
		}
	}
	for vi, v := range httpVariants {
		lx := float64(left + vi*170)
		ly := top0 + panelH + 55
		fmt.Fprintf(&b, `<rect x="%.1f" y="%d" width="14" height="14" fill="%s"/>`+"\n", lx, ly-11, httpColors[v])
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="12" fill="#222">%s</text>`+"\n", lx+20, ly, html.EscapeString(httpName(v)))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
