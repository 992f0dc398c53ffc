package main

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/printer"
	"go/token"
	"go/types"
	"strings"
)

// optionDoc is the doc of each adapter's Option type.
const optionDoc = `// Option configures a middleware. The options have the same names and
// meaning in nethttp, chilimit, ginlimit and echolimit.
`

// generateOptions returns the options.go of package pkg for src, the text of
// internal/flow/options.go, gofmt-formatted.
func generateOptions(pkg string, src []byte) ([]byte, error) {
	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, source, src, parser.ParseComments)
	if err != nil {
		return nil, err
	}
	g := newGenerator(fset)
	g.addImports(file)
	for _, d := range file.Decls {
		if gd, ok := d.(*ast.GenDecl); ok && gd.Tok == token.TYPE {
			for _, s := range gd.Specs {
				if ts := s.(*ast.TypeSpec); ts.Name.IsExported() {
					g.types[ts.Name.Name] = true
				}
			}
		}
	}
	var body bytes.Buffer
	for _, d := range file.Decls {
		switch d := d.(type) {
		case *ast.GenDecl:
			g.genDecl(&body, d)
		case *ast.FuncDecl:
			if err := g.funcDecl(&body, d); err != nil {
				return nil, err
			}
		}
	}

	var b bytes.Buffer
	b.WriteString(header(source))
	fmt.Fprintf(&b, "package %s\n\n", pkg)
	b.WriteString(g.importBlock())
	b.WriteString("\n" + optionDoc + "type Option func(*flow.Config)\n")
	b.Write(body.Bytes())
	out, err := format.Source(b.Bytes())
	if err != nil {
		return nil, fmt.Errorf("formatting the output: %w", err)
	}
	return out, nil
}

// doc writes the comment group c as it stands in the source.
func doc(b *bytes.Buffer, c *ast.CommentGroup, indent string) {
	if c == nil {
		return
	}
	for _, l := range c.List {
		b.WriteString(indent + l.Text + "\n")
	}
}

// genDecl re-exports the exported constants, variables and types of d as
// aliases of flow's, each with its doc.
func (g *generator) genDecl(b *bytes.Buffer, d *ast.GenDecl) {
	if d.Tok == token.IMPORT {
		return
	}
	var specs bytes.Buffer
	n := 0
	for _, s := range d.Specs {
		var names []*ast.Ident
		var sdoc *ast.CommentGroup
		switch s := s.(type) {
		case *ast.ValueSpec:
			names, sdoc = s.Names, s.Doc
		case *ast.TypeSpec:
			names, sdoc = []*ast.Ident{s.Name}, s.Doc
		}
		var lhs, rhs []string
		for _, id := range names {
			if id.IsExported() {
				lhs = append(lhs, id.Name)
				rhs = append(rhs, "flow."+id.Name)
			}
		}
		if len(lhs) == 0 {
			continue
		}
		n++
		doc(&specs, sdoc, "\t")
		if d.Tok == token.TYPE {
			fmt.Fprintf(&specs, "\t%s = %s\n", lhs[0], rhs[0])
		} else {
			fmt.Fprintf(&specs, "\t%s = %s\n", strings.Join(lhs, ", "), strings.Join(rhs, ", "))
		}
	}
	if n == 0 {
		return
	}
	b.WriteString("\n")
	doc(b, d.Doc, "")
	if d.Lparen.IsValid() {
		fmt.Fprintf(b, "%s (\n%s)\n", d.Tok, specs.Bytes())
	} else {
		fmt.Fprintf(b, "%s %s", d.Tok, bytes.TrimPrefix(specs.Bytes(), []byte("\t")))
	}
}

// funcDecl re-exports the exported function d, which must return flow's
// Option, as a function of the same signature returning the package's.
func (g *generator) funcDecl(b *bytes.Buffer, d *ast.FuncDecl) error {
	name := d.Name.Name
	if !d.Name.IsExported() || d.Recv != nil {
		return nil
	}
	res := d.Type.Results
	if res == nil || len(res.List) != 1 || len(res.List[0].Names) != 0 || !isIdent(res.List[0].Type, "Option") {
		return fmt.Errorf("%s: an exported function of %s must return Option and nothing else", name, source)
	}
	if d.Doc == nil {
		return fmt.Errorf("%s: no doc comment", name)
	}
	var params, args []string
	for _, p := range d.Type.Params.List {
		if len(p.Names) == 0 {
			return fmt.Errorf("%s: every parameter needs a name", name)
		}
		typ, err := g.typeString(name, p.Type)
		if err != nil {
			return err
		}
		var names []string
		for _, id := range p.Names {
			names = append(names, id.Name)
			arg := id.Name
			if _, ok := p.Type.(*ast.Ellipsis); ok {
				arg += "..."
			}
			args = append(args, arg)
		}
		params = append(params, strings.Join(names, ", ")+" "+typ)
	}
	b.WriteString("\n")
	doc(b, d.Doc, "")
	fmt.Fprintf(b, "func %s(%s) Option { return flow.%s(%s) }\n", name, strings.Join(params, ", "), name, strings.Join(args, ", "))
	return nil
}

// typeString prints the parameter type t of function fn, as it must read
// in the adapter: every name in it must be predeclared, qualified by an
// imported package, or a type the adapters re-export.
func (g *generator) typeString(fn string, t ast.Expr) (string, error) {
	var err error
	var check func(n ast.Node) bool
	check = func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.Field: // a parameter of a func type: its names are free
			ast.Inspect(n.Type, check)
			return false
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok {
				if _, ok := g.imports[x.Name]; ok {
					g.used[x.Name] = true
					return false
				}
			}
			err = fmt.Errorf("%s: cannot re-export the parameter type %s", fn, g.print(n))
		case *ast.Ident:
			if types.Universe.Lookup(n.Name) == nil && !g.types[n.Name] {
				err = fmt.Errorf("%s: parameter type %s is package flow's own and not re-exported: use one the adapters can name", fn, n.Name)
			}
		}
		return err == nil
	}
	ast.Inspect(t, check)
	if err != nil {
		return "", err
	}
	return g.print(t), nil
}

func (g *generator) print(n ast.Node) string {
	var b bytes.Buffer
	_ = printer.Fprint(&b, g.fset, n)
	return b.String()
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}
