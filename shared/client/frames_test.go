package client

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 13: the protocol is spelt once. The client encodes every frame with
// the wire types the server decodes (wire.Send, wire.Ack, wire.Group, …), so
// a misspelt key does not compile; no frame is built as a map.
func TestTheClientBuildsNoFrameAsAMap(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.CompositeLit)
			if !ok {
				return true
			}
			if m, ok := lit.Type.(*ast.MapType); ok {
				if k, ok := m.Key.(*ast.Ident); ok && k.Name == "string" && isAny(m.Value) {
					t.Errorf("%s: a map[string]any literal: build frames with the wire types", fset.Position(lit.Pos()))
				}
			}
			return true
		})
	}
}

func isAny(e ast.Expr) bool {
	switch v := e.(type) {
	case *ast.Ident:
		return v.Name == "any"
	case *ast.InterfaceType:
		return len(v.Methods.List) == 0
	}
	return false
}
