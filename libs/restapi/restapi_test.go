package restapi

import (
	"fmt"
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// nodesmithctl compiles this package into its static binary: it must
// import the standard library only (no NATS, gRPC, Kubernetes, protobuf),
// and libs/contract (the shared vocabulary, itself standard library only).
func TestImportsStandardLibraryOnly(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		ast, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range ast.Imports {
			path, _ := strconv.Unquote(imp.Path.Value)
			if first, _, _ := strings.Cut(path, "/"); strings.Contains(first, ".") && path != "github.com/nodesmith/nodesmith/libs/contract" {
				t.Errorf("%s imports %s: restapi takes the standard library only", f, path)
			}
		}
		checked++
	}
	if checked == 0 {
		t.Fatal("no source files found")
	}
}

// A credentials spec printed by mistake shows the key id only.
func TestCredentialsSpecStringRedacts(t *testing.T) {
	c := CredentialsSpec{SecretID: "AKID1", SecretKey: "s3cr3t-key", Token: "sts-t0ken"}
	for _, s := range []string{c.String(), fmt.Sprint(c), fmt.Sprintf("%v %+v", c, &c)} {
		if strings.Contains(s, "s3cr3t-key") || strings.Contains(s, "sts-t0ken") {
			t.Errorf("%q shows the secret", s)
		}
		if !strings.Contains(s, "AKID1") {
			t.Errorf("%q does not name the key id", s)
		}
	}
}
