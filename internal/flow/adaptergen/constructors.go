package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"text/template"
)

// constructorsSource names the template below in the generated header.
const constructorsSource = "internal/flow/adaptergen/constructors.go"

// constructorsTemplate is the one source of the adapters' constructors.
// Pkg is the package name, Middleware what its hand-written middleware
// function returns.
var constructorsTemplate = template.Must(template.New("constructors").Parse(`
// FixedWindow limits with the fixed-window algorithm. It panics when limit
// is invalid, with a message naming the problem.
func FixedWindow(client redis.UniversalClient, limit core.Limit, opts ...Option) {{.Middleware}} {
	return middleware(flow.Must("{{.Pkg}}.FixedWindow", client, core.FixedWindow, limit, opts))
}

// SlidingWindowLog limits with the exact sliding-window log. It panics when
// limit is invalid.
func SlidingWindowLog(client redis.UniversalClient, limit core.Limit, opts ...Option) {{.Middleware}} {
	return middleware(flow.Must("{{.Pkg}}.SlidingWindowLog", client, core.SlidingWindowLog, limit, opts))
}

// SlidingWindowCounter limits with the sliding-window counter. It panics
// when limit is invalid.
func SlidingWindowCounter(client redis.UniversalClient, limit core.Limit, opts ...Option) {{.Middleware}} {
	return middleware(flow.Must("{{.Pkg}}.SlidingWindowCounter", client, core.SlidingWindowCounter, limit, opts))
}

// LeakyBucket shapes with the leaky bucket: an admitted request is held for
// its Delay (at most WithMaxDelay, and no longer than the request context
// lives) before the next handler runs. It panics when limit is invalid.
func LeakyBucket(client redis.UniversalClient, limit core.Limit, opts ...Option) {{.Middleware}} {
	return middleware(flow.Must("{{.Pkg}}.LeakyBucket", client, core.LeakyBucket, limit, opts))
}

// TokenBucket limits with the token bucket. It panics when limit is invalid.
func TokenBucket(client redis.UniversalClient, limit core.Limit, opts ...Option) {{.Middleware}} {
	return middleware(flow.Must("{{.Pkg}}.TokenBucket", client, core.TokenBucket, limit, opts))
}

// GCRA limits with the generic cell rate algorithm. It panics when limit is
// invalid.
func GCRA(client redis.UniversalClient, limit core.Limit, opts ...Option) {{.Middleware}} {
	return middleware(flow.Must("{{.Pkg}}.GCRA", client, core.GCRA, limit, opts))
}

// New limits with l, a limiter of one rule or a policy of several; l may be
// nil when WithLimiterFunc chooses the limiter. It panics only when it is
// given nothing to decide with: a nil l and no WithLimiterFunc.
func New(l *core.Limiter, opts ...Option) {{.Middleware}} {
	return middleware(flow.MustNew("{{.Pkg}}.New", l, opts))
}
`))

// generateConstructors returns the constructors.go of package pkg in dir:
// the template above, returning the result type of the package's
// hand-written func middleware(*flow.Flow) T.
func generateConstructors(pkg, dir string) ([]byte, error) {
	g := newGenerator(token.NewFileSet())
	mw, err := g.middlewareType(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pkg, err)
	}
	g.imports["redis"] = "github.com/redis/go-redis/v9"
	g.imports["core"] = "github.com/sluicehq/sluice/core"
	g.used["redis"], g.used["core"] = true, true

	var b bytes.Buffer
	b.WriteString(header(constructorsSource))
	fmt.Fprintf(&b, "package %s\n\n", pkg)
	b.WriteString(g.importBlock())
	if err := constructorsTemplate.Execute(&b, struct{ Pkg, Middleware string }{pkg, mw}); err != nil {
		return nil, err
	}
	out, err := format.Source(b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("formatting the output: %w", err)
	}
	return out, nil
}

// middlewareType returns the result type of the function middleware in the
// hand-written files of dir, and records the imports it needs.
func (g *generator) middlewareType(dir string) (string, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return "", err
	}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			return "", err
		}
		if bytes.HasPrefix(src, []byte("// Code generated ")) {
			continue
		}
		file, err := parser.ParseFile(g.fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			return "", err
		}
		for _, d := range file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Name.Name != "middleware" {
				continue
			}
			res := fd.Type.Results
			if res == nil || len(res.List) != 1 || len(res.List[0].Names) > 1 {
				return "", fmt.Errorf("%s: middleware must return one value", name)
			}
			g.addImports(file)
			return g.typeString("middleware", res.List[0].Type)
		}
	}
	return "", fmt.Errorf("no func middleware(*flow.Flow) in the hand-written files of %s", dir)
}
