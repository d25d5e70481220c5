package kubetest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// KubernetesVersion is the release of kube-apiserver the harness runs. It
// must match the k8s.io/kubernetes requirement of the build module
// (tools/kube-apiserver-build) and the client-go/apimachinery minor version
// (v0.34.x) that nodesmith's Kubernetes adapters use.
const KubernetesVersion = "v1.34.2"

// EnvAPIServer names a kube-apiserver binary to use instead of the cached
// build (for example one installed by a package manager or CI cache).
const EnvAPIServer = "NODESMITH_KUBE_APISERVER"

// EnvBuildDir names the build module directory when it cannot be found
// from this source file's location (a test binary built with -trimpath).
const EnvBuildDir = "NODESMITH_KUBE_APISERVER_BUILD_DIR"

const (
	apiServerPackage = "k8s.io/kubernetes/cmd/kube-apiserver"
	buildModuleName  = "kube-apiserver-build"
	versionPackage   = "k8s.io/component-base/version"
)

// BinaryInfo says where the kube-apiserver binary for KubernetesVersion
// lives (or will live once built).
type BinaryInfo struct {
	// Path of the binary.
	Path string
	// BuildDir is the module that builds it (empty when Path came from
	// EnvAPIServer).
	BuildDir string
	// Exists reports whether Path is already there.
	Exists bool
}

// LocateAPIServer returns where the kube-apiserver binary is or would be
// built, without building it. The cache path is keyed by the build
// module's go.mod and go.sum and the build flags, so changing the pinned
// version yields a new binary instead of a stale one.
func LocateAPIServer() (BinaryInfo, error) {
	if p := os.Getenv(EnvAPIServer); p != "" {
		if _, err := os.Stat(p); err != nil {
			return BinaryInfo{}, fmt.Errorf("%s=%s: %w", EnvAPIServer, p, err)
		}
		return BinaryInfo{Path: p, Exists: true}, nil
	}
	dir, err := buildModuleDir()
	if err != nil {
		return BinaryInfo{}, err
	}
	key, err := buildKey(dir)
	if err != nil {
		return BinaryInfo{}, err
	}
	cache, err := cacheRoot()
	if err != nil {
		return BinaryInfo{}, err
	}
	p := filepath.Join(cache, "kube-apiserver-"+KubernetesVersion+"-"+key, "kube-apiserver")
	_, statErr := os.Stat(p)
	return BinaryInfo{Path: p, BuildDir: dir, Exists: statErr == nil}, nil
}

// EnsureAPIServer returns the path of a kube-apiserver binary for
// KubernetesVersion, building it from the Go module proxy into the user's
// cache directory when it is missing (about 5 minutes on two cores).
// Concurrent callers (parallel test binaries, `make kube-apiserver`) are
// serialised with a file lock, so the build happens once. logf, when not
// nil, is told that a build starts.
func EnsureAPIServer(ctx context.Context, logf func(format string, args ...any)) (string, error) {
	info, err := LocateAPIServer()
	if err != nil {
		return "", err
	}
	if info.Exists {
		return info.Path, nil
	}
	dir := filepath.Dir(info.Path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating kube-apiserver cache directory: %w", err)
	}
	unlock, err := lockFile(filepath.Join(dir, "build.lock"))
	if err != nil {
		return "", fmt.Errorf("locking kube-apiserver build: %w", err)
	}
	defer unlock()
	// Another process may have finished the build while we waited.
	if _, err := os.Stat(info.Path); err == nil {
		return info.Path, nil
	}
	if logf != nil {
		logf("building kube-apiserver %s into %s (once; about 5 minutes)", KubernetesVersion, info.Path)
	}
	tmp := info.Path + ".tmp"
	args := append([]string{"build"}, buildFlags()...)
	args = append(args, "-o", tmp, apiServerPackage)
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = info.BuildDir
	// GOWORK=off: the build module is deliberately outside go.work (its
	// dependency graph is Kubernetes', not nodesmith's). CGO_ENABLED=0:
	// a static binary that does not depend on the host's libc.
	cmd.Env = append(os.Environ(), "GOWORK=off", "CGO_ENABLED=0")
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		_ = os.Remove(tmp)
		return "", fmt.Errorf("building kube-apiserver (go %s in %s): %w\n%s", strings.Join(args, " "), info.BuildDir, err, tail(out.String(), 4000))
	}
	if err := os.Rename(tmp, info.Path); err != nil {
		return "", fmt.Errorf("installing kube-apiserver: %w", err)
	}
	return info.Path, nil
}

// buildFlags are the go build flags of the binary. The -X flags give the
// binary its release version (GET /version, and the version
// client-go's discovery sees) instead of v0.0.0-master.
func buildFlags() []string {
	major, minor, _ := strings.Cut(strings.TrimPrefix(KubernetesVersion, "v"), ".")
	minor, _, _ = strings.Cut(minor, ".")
	ld := []string{
		"-s", "-w",
		"-X", versionPackage + ".gitVersion=" + KubernetesVersion,
		"-X", versionPackage + ".gitMajor=" + major,
		"-X", versionPackage + ".gitMinor=" + minor,
		"-X", versionPackage + ".gitTreeState=clean",
	}
	return []string{"-trimpath", "-ldflags=" + strings.Join(ld, " ")}
}

// buildKey hashes what determines the binary: the build module's
// dependency pins, the flags and the target platform.
func buildKey(dir string) (string, error) {
	h := sha256.New()
	for _, name := range []string{"go.mod", "go.sum"} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return "", fmt.Errorf("reading the kube-apiserver build module: %w", err)
		}
		h.Write(b)
	}
	fmt.Fprintln(h, strings.Join(buildFlags(), " "), runtime.GOOS, runtime.GOARCH)
	return hex.EncodeToString(h.Sum(nil))[:12], nil
}

func cacheRoot() (string, error) {
	base, err := os.UserCacheDir()
	if err != nil {
		// No HOME (some CI sandboxes): the temp dir still shares the
		// build between test binaries of one machine.
		base = os.TempDir()
	}
	return filepath.Join(base, "nodesmith"), nil
}

// buildModuleDir finds tools/kube-apiserver-build: next to this package's
// module in the source tree, else by walking up from the working
// directory (a -trimpath test binary has no source paths).
func buildModuleDir() (string, error) {
	if d := os.Getenv(EnvBuildDir); d != "" {
		return checkBuildDir(d)
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		// file is <repo>/tools/kube/kubetest/binary.go.
		d := filepath.Join(filepath.Dir(file), "..", "..", buildModuleName)
		if dir, err := checkBuildDir(d); err == nil {
			return dir, nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if dir, err := checkBuildDir(filepath.Join(d, "tools", buildModuleName)); err == nil {
			return dir, nil
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	return "", fmt.Errorf("cannot find the kube-apiserver build module tools/%s from %s; set %s (or %s to a binary)", buildModuleName, wd, EnvBuildDir, EnvAPIServer)
}

func checkBuildDir(d string) (string, error) {
	d = filepath.Clean(d)
	if _, err := os.Stat(filepath.Join(d, "go.mod")); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%s is not the kube-apiserver build module: no go.mod", d)
		}
		return "", err
	}
	return d, nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}
