package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"
)

// peers are the libraries sluice is compared with, in table order.
var peers = []string{"redis_rate", "ulule", "throttled", "redis_rate_two", "ulule_two"}

// goalPeers are the peers of the throughput goal; twoLimitPeers are the
// same libraries deciding sluice_policy's two limits (BenchmarkTurns only),
// with which the goal compares sluice_policy.
var (
	goalPeers     = []string{"redis_rate", "ulule"}
	twoLimitPeers = []string{"redis_rate_two", "ulule_two"}
)

// display names of the rows.
var display = map[string]string{
	"sluice_fixed_window":           "sluice FixedWindow",
	"sluice_sliding_window_log":     "sluice SlidingWindowLog",
	"sluice_sliding_window_counter": "sluice SlidingWindowCounter",
	"sluice_leaky_bucket":           "sluice LeakyBucket",
	"sluice_token_bucket":           "sluice TokenBucket",
	"sluice_gcra":                   "sluice GCRA",
	"sluice_policy":                 "sluice policy (GCRA + FixedWindow)",
	"sluice_gcra_ctxtimeout":        "sluice GCRA, ContextTimeoutEnabled client",
	"redis_rate":                    "redis_rate v10 (GCRA)",
	"ulule":                         "ulule/limiter v3 (fixed window)",
	"throttled":                     "throttled v2 (GCRA)",
	"redis_rate_two":                "redis_rate v10, two limits",
	"ulule_two":                     "ulule/limiter v3, two limits",
	"raw_incr":                      "raw INCR (reference)",
	"raw_evalsha":                   "raw EVALSHA (reference)",
}

func name(row string) string {
	if d, ok := display[row]; ok {
		return d
	}
	return row
}

func isSluice(row string) bool { return strings.HasPrefix(row, "sluice_") }

// writeMarkdown writes every table the results allow.
func writeMarkdown(w io.Writer, r *results, now time.Time) {
	writeEnv(w, r, now)
	allow := gridOf(r.suite("Allow"), 1)
	if len(allow.rows) > 0 {
		writeAllow(w, allow)
		writeRatios(w, allow)
	}
	lat := latencyOf(r.suite("Latency"))
	writeLatency(w, lat)
	turns := turnsOf(r.suite("Turns"))
	writeTurns(w, turns)
	if len(allow.rows) > 0 {
		writeGoals(w, allow, lat, turns)
	}
	writePipelined(w, r.suite("PipelinedEvalSha"))
	writeMiddleware(w, gridOf(r.suite("Middleware"), 0), allow)
	writeHTTP(w, httpOf(r.suite("HTTP")))
	writeCluster(w, r.suite("Cluster"))
	writeMemory(w, r.memory)
	if len(r.failures) > 0 {
		fmt.Fprintf(w, "\n**Failures in this run** (their numbers are missing above):\n\n")
		for _, f := range r.failures {
			fmt.Fprintf(w, "- `%s`\n", f)
		}
	}
}

func writeEnv(w io.Writer, r *results, now time.Time) {
	e := r.env
	var parts []string
	add := func(label, key string) {
		if v := e[key]; v != "" {
			parts = append(parts, label+v)
		}
	}
	date := e["date"] // when the benchmarks started; older outputs lack it
	if date == "" {
		date = now.UTC().Format("2006-01-02 15:04 UTC")
	}
	parts = append(parts, "measured "+date)
	add("CPU: ", "cpu")
	add("nproc ", "nproc")
	add("GOMAXPROCS ", "gomaxprocs")
	add("", "go")
	add("Redis ", "redis")
	add("load average at start ", "loadavg-start")
	add("at end ", "loadavg-end")
	add("clients: ", "client")
	fmt.Fprintf(w, "_%s._\n", strings.Join(parts, " · "))
}

// header writes a table header of a label column and one column per c.
func header(w io.Writer, label string, concs []int) {
	fmt.Fprintf(w, "\n| %s |", label)
	for _, c := range concs {
		fmt.Fprintf(w, " c=%d |", c)
	}
	fmt.Fprintf(w, "\n|---|")
	for range concs {
		fmt.Fprintf(w, "--:|")
	}
	fmt.Fprintln(w)
}

func writeAllow(w io.Writer, g *grid) {
	fmt.Fprintf(w, "\n#### Throughput: decisions per second (higher is better)\n")
	header(w, "library", g.concs)
	for _, row := range g.rows {
		fmt.Fprintf(w, "| %s |", name(row))
		for _, c := range g.concs {
			fmt.Fprintf(w, " %s |", cell(g, row, c, "decisions/s", fmtRate))
		}
		fmt.Fprintln(w)
	}

	fmt.Fprintf(w, "\n#### Latency of one call: p50 / p99, µs (lower is better)\n")
	header(w, "library", g.concs)
	for _, row := range g.rows {
		fmt.Fprintf(w, "| %s |", name(row))
		for _, c := range g.concs {
			fmt.Fprintf(w, " %s / %s |", cell(g, row, c, "p50-us", fmtUs), cell(g, row, c, "p99-us", fmtUs))
		}
		fmt.Fprintln(w)
	}

	fmt.Fprintf(w, "\n#### CPU per decision, µs: client · Redis server · of which the Lua script (lower is better)\n\n")
	fmt.Fprintf(w, "Client: this process's user + system CPU time over the run (the library, go-redis, the harness) divided by the decisions. "+
		"Server: the same for redis-server (INFO cpu), networking included; pipelining lowers it, and 1e6 ÷ it is the most decisions per second one Redis core can make. "+
		"Script: Redis's own account of each EVALSHA/EVAL (INFO commandstats), the Lua script alone, which pipelining cannot lower.\n")
	header(w, "library", g.concs)
	for _, row := range g.rows {
		fmt.Fprintf(w, "| %s |", name(row))
		for _, c := range g.concs {
			fmt.Fprintf(w, " %s · %s · %s |", cell(g, row, c, "cli-us/op", fmtSmall), cell(g, row, c, "srv-us/op", fmtSmall), cell(g, row, c, "script-us/call", fmtSmall))
		}
		fmt.Fprintln(w)
	}

	fmt.Fprintf(w, "\n#### Allocations per decision: allocs / bytes, everything in the process included (go-redis, pipelines, goroutines)\n")
	header(w, "library", g.concs)
	for _, row := range g.rows {
		fmt.Fprintf(w, "| %s |", name(row))
		for _, c := range g.concs {
			fmt.Fprintf(w, " %s / %s B |", cell(g, row, c, "allocs/op", fmtInt), cell(g, row, c, "B/op", fmtInt))
		}
		fmt.Fprintln(w)
	}
}

// writeRatios writes sluice ÷ peer, for every peer present.
func writeRatios(w io.Writer, g *grid) {
	for _, peer := range peers {
		if g.cells[peer] == nil {
			continue
		}
		fmt.Fprintf(w, "\n#### sluice ÷ %s: throughput ratio (higher is better) · p50 ratio (lower is better)\n", name(peer))
		header(w, "sluice", g.concs)
		for _, row := range g.rows {
			if !isSluice(row) {
				continue
			}
			fmt.Fprintf(w, "| %s |", name(row))
			for _, c := range g.concs {
				fmt.Fprintf(w, " %s · %s |", ratioCell(g, row, peer, c, "decisions/s"), ratioCell(g, row, peer, c, "p50-us"))
			}
			fmt.Fprintln(w)
		}
	}
}

func ratioCell(g *grid, row, peer string, c int, unit string) string {
	a, ok1 := g.value(row, c, unit)
	b, ok2 := g.value(peer, c, unit)
	if !ok1 || !ok2 || b == 0 {
		return "–"
	}
	return fmt.Sprintf("%.2f×", a/b)
}

// The goals: at c=64 sluice makes goalRatio times the decisions of the
// better peer; one caller's p50 is at most goalLatency times redis_rate's
// (the median of the runs: make bench times BenchmarkLatency five times).
const (
	goalRatio   = 4.0
	goalLatency = 1.05
)

// writeGoals checks the goals against the run.
func writeGoals(w io.Writer, g *grid, lat latency, turns turnsRun) {
	fmt.Fprintf(w, "\n#### Goals\n\n")
	const goalC = 64
	if best, bestName := turns.best(goalPeers); best > 0 {
		two, twoName := turns.best(twoLimitPeers)
		fmt.Fprintf(w, "- **Throughput at c=%d**, libraries in turns, sluice ÷ the better of redis_rate and ulule (here %s, %s decisions/s)", goalC, name(bestName), fmtRate(best))
		if two > 0 {
			fmt.Fprintf(w, "; the policy ÷ the better of them deciding its two limits (%s, %s decisions/s)", name(twoName), fmtRate(two))
		}
		fmt.Fprintf(w, "; goal ≥ %g×:", goalRatio)
		fmt.Fprint(w, goalList(turns.rows(), func(row string) (float64, bool) {
			v, ok := turns[row]["decisions/s"]
			if row == "sluice_policy" && two > 0 {
				return v / two, ok
			}
			return v / best, ok
		}, func(x float64) bool { return x >= goalRatio }, func(row string) string { return notCompared(row, two > 0) }))
	}
	best, bestName := 0.0, ""
	for _, p := range goalPeers {
		if v, ok := g.value(p, goalC, "decisions/s"); ok && v > best {
			best, bestName = v, p
		}
	}
	if best > 0 {
		how := ""
		if len(turns) > 0 {
			how = ", run one after the other"
		}
		fmt.Fprintf(w, "- **Throughput at c=%d**%s, sluice ÷ the better of redis_rate and ulule (here %s, %s decisions/s); goal ≥ %g×:", goalC, how, name(bestName), fmtRate(best), goalRatio)
		fmt.Fprint(w, goalList(g.rows, func(row string) (float64, bool) {
			v, ok := g.value(row, goalC, "decisions/s")
			return v / best, ok
		}, func(x float64) bool { return x >= goalRatio }, func(row string) string { return notCompared(row, false) }))
	}
	if p50 := lat["redis_rate"]; p50 > 0 {
		fmt.Fprintf(w, "- **Latency of one caller**, sluice p50 ÷ redis_rate p50, in turns (%s µs); goal ≤ %g×:", fmtUs(p50), goalLatency)
		fmt.Fprint(w, goalList(lat.rows(), func(row string) (float64, bool) {
			v, ok := lat[row]
			return v / p50, ok
		}, func(x float64) bool { return x <= goalLatency }, nil))
	} else if p50, ok := g.value("redis_rate", 1, "p50-us"); ok && p50 > 0 {
		fmt.Fprintf(w, "- **Latency at c=1**, sluice p50 ÷ redis_rate p50 (%s µs), run one after the other; goal ≤ %g×:", fmtUs(p50), goalLatency)
		fmt.Fprint(w, goalList(g.rows, func(row string) (float64, bool) {
			v, ok := g.value(row, 1, "p50-us")
			return v / p50, ok
		}, func(x float64) bool { return x <= goalLatency }, nil))
	}
	if raw, ok := g.value("raw_evalsha", 1, "allocs/op"); ok {
		fmt.Fprintf(w, "- **Allocations at c=1** beyond go-redis's own for one EVALSHA (raw EVALSHA: %s allocs/op), which a lone sluice caller sends itself:", fmtInt(raw))
		var parts []string
		for _, row := range g.rows {
			if v, ok := g.value(row, 1, "allocs/op"); ok && isSluice(row) {
				parts = append(parts, fmt.Sprintf("%s %+.0f", short(row), v-raw))
			}
		}
		fmt.Fprintf(w, " %s.\n", strings.Join(parts, ", "))
	}
}

// notCompared says why the throughput goal leaves a row's ratio out, or
// "" when it holds the row to it. No peer offers a sliding log, so its
// ratio to a fixed window or a GCRA is shown and not judged; and the
// policy is judged only against peers deciding both of its limits
// (twoPeers: they ran, in BenchmarkTurns), not against one limit.
func notCompared(row string, twoPeers bool) string {
	switch {
	case row == "sluice_sliding_window_log":
		return "no peer offers it: not compared"
	case row == "sluice_policy" && !twoPeers:
		return "two limits against one: compared in turns"
	}
	return ""
}

// goalList writes each sluice row's ratio and its verdict: met, not met,
// or, when note gives a reason (note may be nil), that reason instead.
func goalList(rows []string, ratio func(string) (float64, bool), met func(float64) bool, note func(string) string) string {
	var parts []string
	for _, row := range rows {
		if !isSluice(row) {
			continue
		}
		x, ok := ratio(row)
		if !ok {
			continue
		}
		verdict := "met"
		if !met(x) {
			verdict = "**not met**"
		}
		if note != nil {
			if why := note(row); why != "" {
				verdict = why
			}
		}
		parts = append(parts, fmt.Sprintf("%s %.2f× (%s)", short(row), x, verdict))
	}
	return " " + strings.Join(parts, ", ") + ".\n"
}

func short(row string) string {
	return strings.TrimPrefix(name(row), "sluice ")
}

// latency is BenchmarkLatency's p50 of each library, in µs.
type latency map[string]float64

// latencyOf reads the <library>-p50-us metrics of BenchmarkLatency.
func latencyOf(bs []*bench) latency {
	lat := latency{}
	for _, b := range bs {
		for unit := range b.samples {
			if lib, ok := strings.CutSuffix(unit, "-p50-us"); ok {
				lat[lib], _ = b.metric(unit)
			}
		}
	}
	return lat
}

// rows returns the libraries in table order (see tableRows).
func (l latency) rows() []string { return tableRows(l) }

// tableRows returns the libraries of m in table order: sluice's, as
// BenchmarkAllow lists them, then the peers.
func tableRows[V any](m map[string]V) []string {
	var rows []string
	for lib := range m {
		if isSluice(lib) {
			rows = append(rows, lib)
		}
	}
	sort.Slice(rows, func(i, j int) bool {
		if oi, oj := order(rows[i]), order(rows[j]); oi != oj {
			return oi < oj
		}
		return rows[i] < rows[j]
	})
	for _, p := range peers {
		if _, ok := m[p]; ok {
			rows = append(rows, p)
		}
	}
	return rows
}

// writeLatency writes BenchmarkLatency: one caller, libraries in turns.
func writeLatency(w io.Writer, lat latency) {
	p50 := lat["redis_rate"]
	if p50 == 0 {
		return
	}
	fmt.Fprintf(w, "\n#### One caller, libraries in turns: p50 µs and ÷ redis_rate (lower is better)\n\n")
	fmt.Fprintf(w, "Each library makes 100 decisions in a row, then the next one does, in an order that rotates: all meet the same moments of a shared machine, and each is timed after calls of its own.\n\n")
	fmt.Fprintf(w, "| library | p50 µs | ÷ redis_rate |\n|---|--:|--:|\n")
	for _, row := range lat.rows() {
		fmt.Fprintf(w, "| %s | %s | %.2f× |\n", name(row), fmtUs(lat[row]), lat[row]/p50)
	}
}

// turnsRun is BenchmarkTurns's metrics of each library: decisions/s,
// srv-us/op and cli-us/op.
type turnsRun map[string]map[string]float64

// turnsOf reads the <library>-<unit> metrics of BenchmarkTurns.
func turnsOf(bs []*bench) turnsRun {
	t := turnsRun{}
	for _, b := range bs {
		for unit := range b.samples {
			for _, m := range []string{"decisions/s", "srv-us/op", "cli-us/op"} {
				if lib, ok := strings.CutSuffix(unit, "-"+m); ok {
					if t[lib] == nil {
						t[lib] = map[string]float64{}
					}
					t[lib][m], _ = b.metric(unit)
				}
			}
		}
	}
	return t
}

// rows returns the libraries in table order (see tableRows).
func (t turnsRun) rows() []string { return tableRows(t) }

// order ranks sluice's rows as BenchmarkAllow lists them.
func order(row string) int {
	for i, r := range []string{"sluice_fixed_window", "sluice_sliding_window_log", "sluice_sliding_window_counter",
		"sluice_leaky_bucket", "sluice_token_bucket", "sluice_gcra", "sluice_policy", "sluice_gcra_ctxtimeout"} {
		if r == row {
			return i
		}
	}
	return 100
}

// best returns the decisions/s of the better of the libraries of, and
// which it is.
func (t turnsRun) best(of []string) (float64, string) {
	best, bestName := 0.0, ""
	for _, p := range of {
		if v := t[p]["decisions/s"]; v > best {
			best, bestName = v, p
		}
	}
	return best, bestName
}

// writeTurns writes BenchmarkTurns: throughput at c=64, libraries in turns.
func writeTurns(w io.Writer, t turnsRun) {
	best, bestName := t.best(goalPeers)
	if best == 0 {
		return
	}
	fmt.Fprintf(w, "\n#### Throughput at c=64, libraries in turns (higher is better)\n\n")
	fmt.Fprintf(w, "Each library runs its 64 callers for half a second, then the next one does, in an order that rotates, six rounds: all meet the same moments of a shared machine. CPU per decision as above.\n\n")
	fmt.Fprintf(w, "| library | decisions/s | ÷ %s | CPU µs per decision: client · Redis server |\n|---|--:|--:|--:|\n", name(bestName))
	cpu := func(m map[string]float64, unit string) string {
		if v, ok := m[unit]; ok {
			return fmtSmall(v)
		}
		return "–"
	}
	for _, row := range t.rows() {
		m := t[row]
		fmt.Fprintf(w, "| %s | %s | %.2f× | %s · %s |\n", name(row), fmtRate(m["decisions/s"]), m["decisions/s"]/best, cpu(m, "cli-us/op"), cpu(m, "srv-us/op"))
	}
	if two, twoName := t.best(twoLimitPeers); two > 0 && t["sluice_policy"] != nil {
		fmt.Fprintf(w, "\nThe policy decides two limits; the peers decide them with two limiters, two round trips per decision. sluice's policy ÷ the better of those (%s): %.2f×.\n",
			name(twoName), t["sluice_policy"]["decisions/s"]/two)
	}
}

// writePipelined writes the pipelining ceiling: trivial scripts, pipelined.
func writePipelined(w io.Writer, bs []*bench) {
	if len(bs) == 0 {
		return
	}
	fmt.Fprintf(w, "\n#### Reference: pipelined EVALSHA of a one-line script (what batching can reach when the script costs nothing)\n\n")
	fmt.Fprintf(w, "| pipeline | decisions/s | CPU µs per decision: client · server · script | allocs / bytes |\n|---|--:|--:|--:|\n")
	for _, b := range bs {
		if len(b.parts) != 2 {
			continue
		}
		f := func(unit string, format func(float64) string) string {
			if v, ok := b.metric(unit); ok {
				return format(v)
			}
			return "–"
		}
		fmt.Fprintf(w, "| %s | %s | %s · %s · %s | %s / %s B |\n", strings.ReplaceAll(b.parts[1], "=", " "),
			f("decisions/s", fmtRate), f("cli-us/op", fmtSmall), f("srv-us/op", fmtSmall), f("script-us/call", fmtSmall),
			f("allocs/op", fmtInt), f("B/op", fmtInt))
	}
}

func writeMiddleware(w io.Writer, g *grid, allow *grid) {
	if len(g.concs) == 0 {
		return
	}
	fmt.Fprintf(w, "\n#### Middleware path: nethttp around sluice GCRA, key from a header\n\n")
	fmt.Fprintf(w, "| callers | decisions/s | p50 / p99 µs | allocs / bytes per request | beyond core GCRA Allow |\n|---|--:|--:|--:|--:|\n")
	row := g.rows[0]
	for _, c := range g.concs {
		extra := "–"
		a, ok1 := g.value(row, c, "allocs/op")
		b, ok2 := allow.value("sluice_gcra", c, "allocs/op")
		ab, ok3 := g.value(row, c, "B/op")
		bb, ok4 := allow.value("sluice_gcra", c, "B/op")
		if ok1 && ok2 && ok3 && ok4 {
			extra = fmt.Sprintf("%+.0f allocs / %+.0f B", a-b, ab-bb)
		}
		fmt.Fprintf(w, "| c=%d | %s | %s / %s | %s / %s B | %s |\n", c,
			cell(g, row, c, "decisions/s", fmtRate), cell(g, row, c, "p50-us", fmtUs), cell(g, row, c, "p99-us", fmtUs),
			cell(g, row, c, "allocs/op", fmtInt), cell(g, row, c, "B/op", fmtInt), extra)
	}
}

// writeCluster writes Cluster/<server>/c=N, where server is server=single
// or masters=M, and the libraries took turns: each library's decisions per
// second (<lib>-decisions/s) and script calls per decision
// (<lib>-calls/op), then sluice ÷ redis_rate on each server, and each
// cluster ÷ the single server for sluice.
func writeCluster(w io.Writer, bs []*bench) {
	type key struct {
		server, lib string
		c           int
	}
	rates, calls := map[key]float64{}, map[key]float64{}
	var servers, libs []string
	var concs []int
	seen := map[string]bool{}
	add := func(kind, v string) bool {
		if seen[kind+v] {
			return false
		}
		seen[kind+v] = true
		return true
	}
	for _, b := range bs {
		if len(b.parts) != 3 {
			continue
		}
		c := concurrency(b.parts[2])
		if c < 0 {
			continue
		}
		for unit := range b.samples {
			lib, ok := strings.CutSuffix(unit, "-decisions/s")
			if !ok {
				continue
			}
			k := key{b.parts[1], lib, c}
			rates[k], _ = b.metric(unit)
			if n, ok := b.metric(lib + "-calls/op"); ok {
				calls[k] = n
			}
			if add("s", k.server) {
				servers = append(servers, k.server)
			}
			if add("l", k.lib) {
				libs = append(libs, k.lib)
			}
			if add("c", fmt.Sprint(c)) {
				concs = append(concs, c)
			}
		}
	}
	// sluice first, then the peers by name, whatever order the metrics came in
	sort.Slice(libs, func(i, j int) bool {
		if a, b := isSluice(libs[i]), isSluice(libs[j]); a != b {
			return a
		}
		return libs[i] < libs[j]
	})
	sort.Ints(concs)
	if len(rates) == 0 {
		return
	}
	label := func(server string) string {
		switch {
		case server == "server=single":
			return "single server"
		case server == "masters=1":
			return "cluster, 1 master"
		case strings.HasPrefix(server, "masters="):
			return "cluster, " + strings.TrimPrefix(server, "masters=") + " masters"
		}
		return server
	}
	fmt.Fprintf(w, "\n#### Redis Cluster on loopback: decisions per second (script calls per decision)\n")
	fmt.Fprintf(w, "\n| server | library |")
	for _, c := range concs {
		fmt.Fprintf(w, " c=%d |", c)
	}
	fmt.Fprintf(w, "\n|---|---|%s\n", strings.Repeat("--:|", len(concs)))
	for _, srv := range servers {
		for _, l := range libs {
			fmt.Fprintf(w, "| %s | %s |", label(srv), name(l))
			for _, c := range concs {
				k := key{srv, l, c}
				v, ok := rates[k]
				switch n, has := calls[k]; {
				case !ok:
					fmt.Fprintf(w, " – |")
				case has:
					fmt.Fprintf(w, " %s (%.3f) |", fmtRate(v), n)
				default:
					fmt.Fprintf(w, " %s |", fmtRate(v))
				}
			}
			fmt.Fprintln(w)
		}
	}
	ratio := func(a, b key) string {
		x, ok1 := rates[a]
		y, ok2 := rates[b]
		if !ok1 || !ok2 || y <= 0 {
			return " – |"
		}
		return fmt.Sprintf(" %.2f× |", x/y)
	}
	var sluice, peer string
	for _, l := range libs {
		if isSluice(l) && sluice == "" {
			sluice = l
		} else if !isSluice(l) && peer == "" {
			peer = l
		}
	}
	if sluice == "" {
		return
	}
	if peer != "" {
		for _, srv := range servers {
			fmt.Fprintf(w, "| %s | %s ÷ %s |", label(srv), name(sluice), name(peer))
			for _, c := range concs {
				fmt.Fprint(w, ratio(key{srv, sluice, c}, key{srv, peer, c}))
			}
			fmt.Fprintln(w)
		}
	}
	if seen["sserver=single"] {
		for _, srv := range servers {
			if srv == "server=single" {
				continue
			}
			fmt.Fprintf(w, "| %s ÷ single server | %s |", label(srv), name(sluice))
			for _, c := range concs {
				fmt.Fprint(w, ratio(key{srv, sluice, c}, key{"server=single", sluice, c}))
			}
			fmt.Fprintln(w)
		}
	}
}

func writeMemory(w io.Writer, mem []memoryLine) {
	if len(mem) == 0 {
		return
	}
	var rates, names []string
	byKey := map[[2]string]memoryLine{}
	seen := map[string]bool{}
	for _, m := range mem {
		n, r := m["name"], m["rate"]
		if !seen["r"+r] {
			seen["r"+r] = true
			rates = append(rates, r)
		}
		if !seen["n"+n] {
			seen["n"+n] = true
			names = append(names, n)
		}
		byKey[[2]string{n, r}] = m
	}
	fmt.Fprintf(w, "\n#### Redis memory per limited key (MEMORY USAGE after a whole burst, key name included)\n\n| library |")
	for _, r := range rates {
		fmt.Fprintf(w, " Rate %s |", r)
	}
	fmt.Fprintf(w, " keys | encoding | TTL |\n|---|%s--:|---|---|\n", strings.Repeat("--:|", len(rates)))
	for _, n := range names {
		fmt.Fprintf(w, "| %s |", name(n))
		var last memoryLine
		for _, r := range rates {
			m := byKey[[2]string{n, r}]
			if m == nil {
				fmt.Fprintf(w, " – |")
				continue
			}
			last = m
			fmt.Fprintf(w, " %s B |", m["bytes"])
		}
		if last == nil {
			last = memoryLine{}
		}
		fmt.Fprintf(w, " %s | %s | %s |\n", last["keys"], last["encoding"], last["ttl"])
	}
}

func cell(g *grid, row string, c int, unit string, f func(float64) string) string {
	v, ok := g.value(row, c, unit)
	if !ok {
		return "–"
	}
	return f(v)
}

// fmtRate writes a rate with three significant digits: 9.71k, 312k, 1.05M.
func fmtRate(v float64) string {
	switch {
	case v >= 1e6:
		return sig3(v/1e6) + "M"
	case v >= 1e3:
		return sig3(v/1e3) + "k"
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

func sig3(v float64) string {
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func fmtUs(v float64) string {
	if v < 100 {
		return fmt.Sprintf("%.1f", v)
	}
	return fmt.Sprintf("%.0f", v)
}

func fmtSmall(v float64) string {
	if v < 10 {
		return fmt.Sprintf("%.2f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

func fmtInt(v float64) string { return fmt.Sprintf("%.0f", math.Round(v)) }
