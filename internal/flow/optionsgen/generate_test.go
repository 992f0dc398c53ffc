package main

import (
	"strings"
	"testing"
)

// TestGenerateRejects: what the adapters could not re-export as written is
// an error naming the declaration, not a file that fails to compile.
func TestGenerateRejects(t *testing.T) {
	for _, tc := range []struct{ name, src, want string }{
		{"flow-only parameter type", "func WithX(d DenyFunc) Option { return nil }", "WithX: parameter type DenyFunc"},
		{"other result", "func WithX() int { return 0 }", "WithX: an exported function"},
		{"no doc", "func WithX(n int) Option { return nil }", "WithX: no doc comment"},
		{"unnamed parameter", "func WithX(int) Option { return nil }", "WithX: every parameter needs a name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := "package flow\n\n"
			if tc.name != "no doc" {
				src += "// WithX does x.\n"
			}
			src += tc.src + "\n"
			_, err := generate("nethttp", []byte(src))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestGenerateKeepsDocs: docs are copied word for word, variadic parameters
// are passed on as such, and unexported declarations stay in flow.
func TestGenerateKeepsDocs(t *testing.T) {
	src := `package flow

import "github.com/sluicehq/sluice/core"

// Limit is a limit.
//
//   - indented
type Limit = core.Limit

var hidden = 1

// WithLimits passes limits.
func WithLimits(name string, ls ...Limit) Option { return nil }

func withHidden() Option { return nil }
`
	b, err := generate("chilimit", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	out := string(b)
	for _, want := range []string{
		"package chilimit\n",
		"// Limit is a limit.\n//\n//   - indented\ntype Limit = flow.Limit\n",
		"// WithLimits passes limits.\nfunc WithLimits(name string, ls ...Limit) Option { return flow.WithLimits(name, ls...) }\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, not := range []string{"hidden", "withHidden", `"github.com/sluicehq/sluice/core"`} {
		if strings.Contains(out, not) {
			t.Errorf("output has %q:\n%s", not, out)
		}
	}
}
