package main

import (
	"io"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// results is everything read from one benchmark run.
type results struct {
	env        map[string]string // from "bench-env:" lines
	benchmarks map[string]*bench // by full name without the GOMAXPROCS suffix
	order      []string          // names in order of first appearance
	memory     []memoryLine
	failures   []string
}

// bench is one benchmark's metrics; with -count N, every sample is kept.
type bench struct {
	name    string
	parts   []string // name split at '/'
	samples map[string][]float64
}

// metric returns the median of unit's samples, and whether there was one.
func (b *bench) metric(unit string) (float64, bool) {
	s := append([]float64(nil), b.samples[unit]...)
	if len(s) == 0 {
		return 0, false
	}
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

type memoryLine map[string]string

var (
	benchLine = regexp.MustCompile(`^Benchmark(\S+?)(?:-\d+)?\s+(\d+)\s+(.*)$`)
	failLine  = regexp.MustCompile(`--- FAIL: (\S+)`)
)

func parse(r io.Reader) (*results, error) {
	ls, err := lines(r)
	if err != nil {
		return nil, err
	}
	res := &results{env: map[string]string{}, benchmarks: map[string]*bench{}}
	for i, line := range ls {
		switch {
		case strings.HasPrefix(line, "bench-env:"):
			for k, v := range fields(strings.TrimPrefix(line, "bench-env:")) {
				res.env[k] = v
			}
		case strings.HasPrefix(line, "memory:"):
			res.memory = append(res.memory, fields(strings.TrimPrefix(line, "memory:")))
		case strings.HasPrefix(line, "cpu: ") && res.env["cpu"] == "":
			res.env["cpu"] = strings.TrimSpace(strings.TrimPrefix(line, "cpu: "))
		case failLine.MatchString(line):
			name := failLine.FindStringSubmatch(line)[1]
			why := ""
			if i+1 < len(ls) && strings.HasPrefix(ls[i+1], "    ") {
				why = ": " + strings.TrimSpace(ls[i+1])
			}
			res.failures = append(res.failures, name+why)
		case line == "FAIL" || strings.HasPrefix(line, "FAIL\t") || strings.HasPrefix(line, "panic:"):
			res.failures = append(res.failures, line)
		default:
			m := benchLine.FindStringSubmatch(line)
			if m == nil {
				continue
			}
			f := strings.Fields(m[3])
			if len(f) < 2 || len(f)%2 != 0 {
				continue // a benchmark that printed no metrics (failed or skipped)
			}
			b := res.benchmarks[m[1]]
			if b == nil {
				b = &bench{name: m[1], parts: strings.Split(m[1], "/"), samples: map[string][]float64{}}
				res.benchmarks[m[1]] = b
				res.order = append(res.order, m[1])
			}
			for j := 0; j+1 < len(f); j += 2 {
				v, err := strconv.ParseFloat(f[j], 64)
				if err != nil {
					continue
				}
				b.samples[f[j+1]] = append(b.samples[f[j+1]], v)
			}
		}
	}
	return res, nil
}

// fields parses `a=1 b="two words"` into a map.
func fields(s string) map[string]string {
	out := map[string]string{}
	s = strings.TrimSpace(s)
	for s != "" {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			break
		}
		key := strings.TrimSpace(s[:eq])
		s = s[eq+1:]
		var val string
		if strings.HasPrefix(s, `"`) {
			q, err := strconv.QuotedPrefix(s)
			if err != nil {
				break
			}
			val, _ = strconv.Unquote(q)
			s = s[len(q):]
		} else if sp := strings.IndexByte(s, ' '); sp >= 0 {
			val, s = s[:sp], s[sp:]
		} else {
			val, s = s, ""
		}
		out[key] = val
		s = strings.TrimSpace(s)
	}
	return out
}

// suite returns the benchmarks of one top-level benchmark ("Allow"), in
// order.
func (r *results) suite(name string) []*bench {
	var out []*bench
	for _, n := range r.order {
		if b := r.benchmarks[n]; b.parts[0] == name {
			out = append(out, b)
		}
	}
	return out
}

// concurrency returns N of a "c=N" part, or -1.
func concurrency(part string) int {
	v, ok := strings.CutPrefix(part, "c=")
	if !ok {
		return -1
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return -1
	}
	return n
}

// grid holds one suite's benchmarks by row (a library) and concurrency.
type grid struct {
	rows  []string
	concs []int
	cells map[string]map[int]*bench
}

// gridOf arranges benchmarks whose name is prefix/<row>/c=N.
func gridOf(bs []*bench, rowPart int) *grid {
	g := &grid{cells: map[string]map[int]*bench{}}
	seenC := map[int]bool{}
	for _, b := range bs {
		if len(b.parts) != rowPart+2 {
			continue
		}
		c := concurrency(b.parts[rowPart+1])
		if c < 0 {
			continue
		}
		row := b.parts[rowPart]
		if g.cells[row] == nil {
			g.cells[row] = map[int]*bench{}
			g.rows = append(g.rows, row)
		}
		g.cells[row][c] = b
		if !seenC[c] {
			seenC[c] = true
			g.concs = append(g.concs, c)
		}
	}
	sort.Ints(g.concs)
	return g
}

func (g *grid) value(row string, c int, unit string) (float64, bool) {
	b := g.cells[row][c]
	if b == nil {
		return 0, false
	}
	return b.metric(unit)
}
