package kubetest_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/nodesmith/nodesmith/tools/kube/kubetest"
)

// TestEnsureAPIServerBuildsOnce runs the real build path against a stand-in
// build module (a tiny main package at the path of kube-apiserver): the
// first callers build it once under the lock, everybody gets the same
// cached binary, and a changed build module gets a new one.
func TestEnsureAPIServerBuildsOnce(t *testing.T) {
	buildDir := t.TempDir()
	write := func(name, content string) {
		t.Helper()
		p := filepath.Join(buildDir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module k8s.io/kubernetes\n\ngo 1.26.0\n")
	write("go.sum", "")
	write("cmd/kube-apiserver/main.go", "package main\n\nimport \"fmt\"\n\nfunc main() { fmt.Println(\"stand-in\") }\n")
	isolateCache(t, buildDir)

	before, err := kubetest.LocateAPIServer()
	if err != nil {
		t.Fatal(err)
	}
	if before.Exists {
		t.Fatalf("a fresh cache already has %s", before.Path)
	}

	var builds atomic.Int32
	logf := func(format string, _ ...any) {
		if strings.HasPrefix(format, "building") {
			builds.Add(1)
		}
	}
	var wg sync.WaitGroup
	paths := make([]string, 3)
	errs := make([]error, 3)
	for i := range paths {
		wg.Go(func() { paths[i], errs[i] = kubetest.EnsureAPIServer(context.Background(), logf) })
	}
	wg.Wait()
	for i := range paths {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if paths[i] != before.Path {
			t.Fatalf("caller %d got %s, want %s", i, paths[i], before.Path)
		}
	}
	if n := builds.Load(); n != 1 {
		t.Fatalf("%d builds, want 1", n)
	}
	out, err := exec.Command(before.Path).Output()
	if err != nil || strings.TrimSpace(string(out)) != "stand-in" {
		t.Fatalf("built binary: %q, %v", out, err)
	}

	// The key covers the build module: new pins, new binary.
	write("go.mod", "module k8s.io/kubernetes\n\ngo 1.26.0\n\n// changed\n")
	after, err := kubetest.LocateAPIServer()
	if err != nil {
		t.Fatal(err)
	}
	if after.Path == before.Path || after.Exists {
		t.Fatalf("after changing go.mod: %+v (before %s)", after, before.Path)
	}
}

func TestEnsureAPIServerReportsBuildFailure(t *testing.T) {
	buildDir := t.TempDir()
	// A module without the kube-apiserver package.
	for name, content := range map[string]string{"go.mod": "module k8s.io/kubernetes\n\ngo 1.26.0\n", "go.sum": ""} {
		if err := os.WriteFile(filepath.Join(buildDir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	isolateCache(t, buildDir)
	_, err := kubetest.EnsureAPIServer(context.Background(), nil)
	if err == nil || !strings.Contains(err.Error(), "building kube-apiserver") {
		t.Fatalf("got %v, want a build error", err)
	}
	info, _ := kubetest.LocateAPIServer()
	if info.Exists {
		t.Fatal("a failed build left a binary behind")
	}
}

// isolateCache points the harness at buildDir and an empty cache
// directory, keeping the Go build cache (which also lives under the user
// cache directory by default) so the stand-in builds in seconds.
func isolateCache(t *testing.T, buildDir string) {
	t.Helper()
	gocache, err := exec.Command("go", "env", "GOCACHE").Output()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("GOCACHE", strings.TrimSpace(string(gocache)))
	t.Setenv("XDG_CACHE_HOME", t.TempDir())
	t.Setenv(kubetest.EnvBuildDir, buildDir)
	t.Setenv(kubetest.EnvAPIServer, "")
}
