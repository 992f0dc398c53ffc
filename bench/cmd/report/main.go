// Command report turns the output of the bench benchmarks into Markdown
// tables, the ratios of sluice to each peer, and an SVG chart.
//
//	cd bench
//	go test -run '^TestMemoryPerKey$' -bench . -benchtime 2s . | tee results.txt
//	go run ./cmd/report -svg chart.svg -httpsvg chart-http.svg -md ../BENCHMARKS.md < results.txt
//
// It reads plain "go test -bench" output (run with -count N, it takes the
// median of each metric), the "bench-env:" and "memory:" lines the tests
// print, and exits with status 1 when a benchmark or test failed or the
// input holds no benchmark at all, after printing what it has.
//
// -md replaces the part of a Markdown file between the lines
// "<!-- bench:results:begin -->" and "<!-- bench:results:end -->" with the
// tables; -svg writes a grouped bar chart of decisions/s by concurrency;
// -httpsvg one of BenchmarkHTTP's requests/s by router, a panel per
// concurrency.
package main

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

func main() {
	in := flag.String("in", "", "read the benchmark output from this file (default: standard input)")
	svg := flag.String("svg", "", "write the throughput chart to this SVG file")
	httpSVG := flag.String("httpsvg", "", "write the HTTP throughput chart to this SVG file")
	md := flag.String("md", "", "replace the results section of this Markdown file")
	flag.Parse()
	if err := run(*in, *svg, *httpSVG, *md, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

func run(in, svgPath, httpSVGPath, mdPath string, stdout io.Writer) error {
	r := io.Reader(os.Stdin)
	if in != "" {
		f, err := os.Open(in)
		if err != nil {
			return err
		}
		defer f.Close()
		r = f
	}
	res, err := parse(r)
	if err != nil {
		return err
	}
	if len(res.benchmarks) == 0 {
		return errors.New("no benchmark results in the input")
	}
	var out bytes.Buffer
	writeMarkdown(&out, res, time.Now())
	if _, err := stdout.Write(out.Bytes()); err != nil {
		return err
	}
	if svgPath != "" {
		var svg bytes.Buffer
		if err := writeChart(&svg, res); err != nil {
			return err
		}
		if err := os.WriteFile(svgPath, svg.Bytes(), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "\nreport: wrote %s\n", svgPath)
	}
	if httpSVGPath != "" {
		var svg bytes.Buffer
		if err := writeHTTPChart(&svg, res); err != nil {
			return err
		}
		if err := os.WriteFile(httpSVGPath, svg.Bytes(), 0o644); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "report: wrote %s\n", httpSVGPath)
	}
	if mdPath != "" {
		if err := replaceSection(mdPath, out.Bytes()); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "report: updated the results section of %s\n", mdPath)
	}
	if len(res.failures) > 0 {
		return fmt.Errorf("failures in the input:\n  %s", strings.Join(res.failures, "\n  "))
	}
	return nil
}

const (
	beginMarker = "<!-- bench:results:begin -->"
	endMarker   = "<!-- bench:results:end -->"
)

// replaceSection puts section between the markers of the file at path.
func replaceSection(path string, section []byte) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	text := string(data)
	i := strings.Index(text, beginMarker)
	j := strings.Index(text, endMarker)
	if i < 0 || j < i {
		return fmt.Errorf("%s: no %q ... %q section to replace", path, beginMarker, endMarker)
	}
	var b strings.Builder
	b.WriteString(text[:i+len(beginMarker)])
	b.WriteString("\n")
	b.Write(section)
	if !bytes.HasSuffix(section, []byte("\n")) {
		b.WriteString("\n")
	}
	b.WriteString(text[j:])
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// lines splits r into lines, for the parser.
func lines(r io.Reader) ([]string, error) {
	var out []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		out = append(out, sc.Text())
	}
	return out, sc.Err()
}
