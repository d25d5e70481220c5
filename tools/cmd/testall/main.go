// Command testall runs `go test -json` in every module it is given, going on
// after a module fails, and ends with one summary: each failed test or
// package with its output, a table per module, and the closing line
// "N passed, N failed, N skipped". It exits 1 if anything failed.
//
//	go run ./tools/cmd/testall -flags "-count=1 -race" -events .test proto libs services/lifecycle
//
// `make test` runs it; the raw test2json events of each module are kept in
// the -events directory for a closer look at a failure.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// event is one line of `go test -json` (cmd/test2json).
type event struct {
	Action      string
	Package     string
	Test        string
	Elapsed     float64
	Output      string
	ImportPath  string // build-output and build-fail
	FailedBuild string // a package that failed because a build did
}

// failure is a failed test, or a package that failed on its own (a build
// error, a panic outside a test, a timeout, a go test error).
type failure struct {
	module, pkg, test string
	elapsed           float64
	output            []string
}

type tally struct {
	module                            string
	packages, passed, failed, skipped int
	elapsed                           time.Duration
}

// run follows one module's event stream.
type run struct {
	module  string
	tally   tally
	fails   []failure
	outputs map[string][]string // by package + "\x00" + test; dropped when a test passes
	open    map[string]bool     // tests started and not yet finished
	build   map[string][]string // build output by import path
	pkgFail map[string]bool     // packages with a failed test
}

func newRun(module string) *run {
	return &run{module: module, tally: tally{module: module}, outputs: map[string][]string{},
		open: map[string]bool{}, build: map[string][]string{}, pkgFail: map[string]bool{}}
}

func key(pkg, test string) string { return pkg + "\x00" + test }

func (r *run) handle(e event, console io.Writer) {
	k := key(e.Package, e.Test)
	switch e.Action {
	case "build-output":
		r.build[e.ImportPath] = append(r.build[e.ImportPath], e.Output)
	case "run":
		r.open[k] = true
	case "output":
		r.outputs[k] = append(r.outputs[k], e.Output)
	case "pass", "skip":
		delete(r.open, k)
		if e.Test == "" {
			r.endPackage(e, console)
			delete(r.outputs, k)
			return
		}
		if !strings.Contains(e.Test, "/") {
			if e.Action == "pass" {
				r.tally.passed++
			} else {
				r.tally.skipped++
			}
		}
		delete(r.outputs, k)
	case "fail":
		delete(r.open, k)
		if e.Test == "" {
			r.endPackage(e, console)
			return
		}
		if !strings.Contains(e.Test, "/") {
			r.tally.failed++
		}
		r.pkgFail[e.Package] = true
		r.fails = append(r.fails, failure{module: r.module, pkg: e.Package, test: e.Test, elapsed: e.Elapsed, output: r.outputs[k]})
		delete(r.outputs, k)
	}
}

// endPackage prints the package's line, as go test does, and records a
// package that failed without a failed test to blame (a build error, a
// panic or timeout that ended the binary, an error in TestMain).
func (r *run) endPackage(e event, console io.Writer) {
	pk := key(e.Package, "")
	out := r.outputs[pk]
	if e.Action == "skip" && len(out) > 0 && strings.Contains(strings.Join(out, ""), "[no test files]") {
		return
	}
	r.tally.packages++
	status := "ok  "
	if e.Action == "fail" {
		status = "FAIL"
	}
	fmt.Fprintf(console, "%s %-70s %6.1fs\n", status, e.Package, e.Elapsed)
	if e.Action != "fail" {
		return
	}
	// Tests still running when the binary died (a panic, the -timeout)
	// failed too.
	for k := range r.open {
		if pkg, test, _ := strings.Cut(k, "\x00"); pkg == e.Package && test != "" {
			if !strings.Contains(test, "/") {
				r.tally.failed++
			}
			r.pkgFail[pkg] = true
			r.fails = append(r.fails, failure{module: r.module, pkg: pkg, test: test + " (did not finish)", output: append(r.outputs[k], out...)})
			delete(r.open, k)
		}
	}
	if !r.pkgFail[e.Package] {
		if e.FailedBuild != "" {
			out = append(r.build[e.FailedBuild], out...)
		}
		r.tally.failed++
		r.fails = append(r.fails, failure{module: r.module, pkg: e.Package, test: "(package)", elapsed: e.Elapsed, output: out})
	}
}

// runModule runs go test in dir, streaming package lines to console and
// the raw events to eventsFile (if set).
func runModule(dir string, flags []string, eventsFile string, console io.Writer) *run {
	r := newRun(dir)
	start := time.Now()
	defer func() { r.tally.elapsed = time.Since(start) }()
	args := append([]string{"test", "-json"}, flags...)
	cmd := exec.Command("go", append(args, "./...")...)
	cmd.Dir = dir
	cmd.Stderr = console
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		r.fails = append(r.fails, failure{module: dir, test: "(go test)", output: []string{err.Error() + "\n"}})
		return r
	}
	raw := io.Discard
	if eventsFile != "" {
		if f, err := os.Create(eventsFile); err == nil {
			defer f.Close()
			raw = f
		}
	}
	if err := cmd.Start(); err != nil {
		r.fails = append(r.fails, failure{module: dir, test: "(go test)", output: []string{err.Error() + "\n"}})
		return r
	}
	sc := bufio.NewScanner(stdout)
	sc.Buffer(make([]byte, 0, 1<<20), 64<<20)
	for sc.Scan() {
		line := sc.Bytes()
		_, _ = raw.Write(append(line, '\n'))
		var e event
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &e) != nil {
			fmt.Fprintf(console, "%s\n", line)
			continue
		}
		r.handle(e, console)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if err != nil && len(r.fails) == 0 {
		// go test failed without a failed package: vet, a missing
		// module, a bad flag. Its stderr above says why.
		msg := err.Error()
		if errors.As(err, &exit) {
			msg = fmt.Sprintf("go test exited %d; see its output above", exit.ExitCode())
		}
		r.tally.failed++
		r.fails = append(r.fails, failure{module: dir, test: "(go test)", output: []string{msg + "\n"}})
	}
	return r
}

func main() {
	flagsArg := flag.String("flags", "", "flags for go test (space separated), before ./...")
	eventsDir := flag.String("events", "", "directory for each module's raw go test -json events")
	flag.Parse()
	modules := flag.Args()
	if len(modules) == 0 {
		fmt.Fprintln(os.Stderr, "usage: testall [-flags \"...\"] [-events DIR] MODULE...")
		os.Exit(2)
	}
	if *eventsDir != "" {
		if err := os.MkdirAll(*eventsDir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	var runs []*run
	for _, m := range modules {
		fmt.Printf("== %s\n", m)
		ev := ""
		if *eventsDir != "" {
			ev = filepath.Join(*eventsDir, strings.ReplaceAll(m, "/", "_")+".jsonl")
		}
		runs = append(runs, runModule(m, strings.Fields(*flagsArg), ev, os.Stdout))
	}
	os.Exit(summarize(os.Stdout, runs))
}

// summarize prints every failure with its output, a table per module and
// the closing count line; it returns the exit code.
func summarize(w io.Writer, runs []*run) int {
	var fails []failure
	total := tally{module: "total"}
	for _, r := range runs {
		fails = append(fails, r.fails...)
		total.packages += r.tally.packages
		total.passed += r.tally.passed
		total.failed += r.tally.failed
		total.skipped += r.tally.skipped
		total.elapsed += r.tally.elapsed
	}
	for _, f := range fails {
		fmt.Fprintf(w, "\n--- FAIL %s %s %s (%.1fs)\n", f.module, f.pkg, f.test, f.elapsed)
		for _, l := range f.output {
			fmt.Fprintf(w, "    %s", strings.TrimSuffix(l, "\n")+"\n")
		}
	}
	fmt.Fprintf(w, "\n== summary\n%-28s %8s %7s %7s %8s %9s\n", "module", "packages", "passed", "failed", "skipped", "time")
	rows := make([]tally, 0, len(runs)+1)
	for _, r := range runs {
		rows = append(rows, r.tally)
	}
	for _, t := range append(rows, total) {
		fmt.Fprintf(w, "%-28s %8d %7d %7d %8d %9s\n", t.module, t.packages, t.passed, t.failed, t.skipped, t.elapsed.Round(time.Second))
	}
	if len(fails) > 0 {
		fmt.Fprintf(w, "\nfailed:\n")
		for _, f := range fails {
			fmt.Fprintf(w, "  FAIL %-24s %-60s %s\n", f.module, f.pkg, f.test)
		}
	}
	fmt.Fprintf(w, "\n%d passed, %d failed, %d skipped\n", total.passed, total.failed, total.skipped)
	if len(fails) > 0 {
		return 1
	}
	return 0
}
