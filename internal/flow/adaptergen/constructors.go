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

// algorithmsSource declares the algorithms, one constructor each.
const algorithmsSource = "core/limit.go"

// constructorsTemplate is the one source of the adapters' constructors:
// one per constant of type core.Algorithm in core/limit.go, named after it
// and described by its line comment, then New. Pkg is the package name,
// Middleware what its hand-written middleware function returns.
var constructorsTemplate = template.Must(template.New("constructors").Parse(`
{{- range .Algorithms}}
// {{.Name}} limits with core.{{.Name}}:
// {{.What}}.{{if .Shapes}}
// The middleware holds an admitted request for its Delay, at most
// WithMaxHold and no longer than the request's context lives, before the
// next handler runs.{{end}}
//
// It panics at construction when limit is invalid, or an option cannot
// apply (see New), with a message naming the problem.
func {{.Name}}(client redis.UniversalClient, limit core.Limit, opts ...Option) {{$.Middleware}} {
	return middleware(flow.Must("{{$.Pkg}}.{{.Name}}", client, core.{{.Name}}, limit, opts))
}
{{end}}
// New limits with l, a limiter of one rule or a policy of several; l may be
// nil when WithLimiterFunc chooses the limiter. It panics at construction
// when it is given nothing to decide with (a nil l and no WithLimiterFunc),
// or an option that cannot apply, with a message naming it: one that only
// the limiter of an algorithm constructor takes (WithTimeout, WithPrefix,
// WithDenyCache, WithLimiterOptions, WithFailureMode(core.FailLocal)),
// WithMaxHold for a limiter without a LeakyBucket rule (and no
// WithLimiterFunc), a nil function, an unknown header or failure mode.
func New(l *core.Limiter, opts ...Option) {{.Middleware}} {
	return middleware(flow.MustNew("{{.Pkg}}.New", l, opts))
}
`))

// algorithm is one constant of type core.Algorithm: its name, and its line
// comment without the final period. Shapes is true when that comment says
// the algorithm delays what it admits (it names Result.Delay).
type algorithm struct {
	Name, What string
	Shapes     bool
}

// algorithms returns the constants of type Algorithm declared in src, the
// text of core/limit.go, in their order there.
func algorithms(src []byte) ([]algorithm, error) {
	file, err := parser.ParseFile(token.NewFileSet(), algorithmsSource, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	var out []algorithm
	for _, d := range file.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.CONST {
			continue
		}
		for _, spec := range gd.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Algorithm" {
				continue
			}
			what := strings.TrimSuffix(strings.TrimSpace(vs.Comment.Text()), ".")
			for _, n := range vs.Names {
				if what == "" {
					return nil, fmt.Errorf("%s: the algorithm %s has no line comment to describe its constructor", algorithmsSource, n.Name)
				}
				out = append(out, algorithm{n.Name, what, strings.Contains(what, "Result.Delay")})
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no constant of type Algorithm", algorithmsSource)
	}
	return out, nil
}

// generateConstructors returns the constructors.go of package pkg in dir:
// the template above for the algorithms declared in algSrc (the text of
// core/limit.go), returning the result type of the package's hand-written
// func middleware(*flow.Flow) T.
func generateConstructors(pkg, dir string, algSrc []byte) ([]byte, error) {
	algs, err := algorithms(algSrc)
	if err != nil {
		return nil, err
	}
	g := newGenerator(token.NewFileSet())
	mw, err := g.middlewareType(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", pkg, err)
	}
	g.imports["redis"] = "github.com/redis/go-redis/v9"
	g.imports["core"] = "github.com/sluicehq/sluice/core"
	g.used["redis"], g.used["core"] = true, true

	var b bytes.Buffer
	b.WriteString(header(constructorsSource + " and " + algorithmsSource))
	fmt.Fprintf(&b, "package %s\n\n", pkg)
	b.WriteString(g.importBlock())
	data := struct {
		Pkg, Middleware string
		Algorithms      []algorithm
	}{pkg, mw, algs}
	if err := constructorsTemplate.Execute(&b, data); err != nil {
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
