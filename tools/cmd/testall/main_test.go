package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// feed runs a synthetic test2json stream through a run.
func feed(t *testing.T, module string, events ...event) (*run, string) {
	t.Helper()
	r := newRun(module)
	var console bytes.Buffer
	for _, e := range events {
		// Through JSON, as go test delivers them.
		b, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		var back event
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		r.handle(back, &console)
	}
	return r, console.String()
}

func TestSummaryCountsAndBlames(t *testing.T) {
	ok, _ := feed(t, "libs",
		event{Action: "run", Package: "a", Test: "TestA"},
		event{Action: "output", Package: "a", Test: "TestA", Output: "noise\n"},
		event{Action: "pass", Package: "a", Test: "TestA"},
		event{Action: "run", Package: "a", Test: "TestA/sub"},
		event{Action: "pass", Package: "a", Test: "TestA/sub"},
		event{Action: "run", Package: "a", Test: "TestS"},
		event{Action: "skip", Package: "a", Test: "TestS"},
		event{Action: "pass", Package: "a"},
		event{Action: "output", Package: "empty", Output: "?   \tempty\t[no test files]\n"},
		event{Action: "skip", Package: "empty"},
	)
	bad, console := feed(t, "services/x",
		// A failed test with its output.
		event{Action: "run", Package: "b", Test: "TestB"},
		event{Action: "output", Package: "b", Test: "TestB", Output: "b_test.go:9: boom\n"},
		event{Action: "fail", Package: "b", Test: "TestB", Elapsed: 1.5},
		event{Action: "fail", Package: "b"},
		// A build failure: no test ran.
		event{Action: "build-output", ImportPath: "c [c.test]", Output: "c.go:3: undefined: x\n"},
		event{Action: "build-fail", ImportPath: "c [c.test]"},
		event{Action: "fail", Package: "c", FailedBuild: "c [c.test]"},
		// A timeout: the binary dies while TestD runs.
		event{Action: "run", Package: "d", Test: "TestD"},
		event{Action: "output", Package: "d", Test: "TestD", Output: "waiting\n"},
		event{Action: "output", Package: "d", Output: "panic: test timed out after 20m0s\n"},
		event{Action: "fail", Package: "d"},
	)
	if ok.tally.passed != 1 || ok.tally.skipped != 1 || ok.tally.failed != 0 || ok.tally.packages != 1 || len(ok.fails) != 0 {
		t.Fatalf("passing module: %+v, fails %v", ok.tally, ok.fails)
	}
	if bad.tally.failed != 3 || len(bad.fails) != 3 {
		t.Fatalf("failing module: %+v, fails %+v", bad.tally, bad.fails)
	}
	want := []struct{ pkg, test, output string }{
		{"b", "TestB", "boom"},
		{"c", "(package)", "undefined: x"},
		{"d", "TestD (did not finish)", "test timed out"},
	}
	for i, w := range want {
		f := bad.fails[i]
		if f.pkg != w.pkg || f.test != w.test || !strings.Contains(strings.Join(f.output, ""), w.output) {
			t.Errorf("failure %d: %s %s %q, want %s %s containing %q", i, f.pkg, f.test, f.output, w.pkg, w.test, w.output)
		}
	}
	if !strings.Contains(console, "FAIL b") || !strings.Contains(console, "FAIL d") {
		t.Errorf("console lacks the package lines:\n%s", console)
	}

	var out bytes.Buffer
	if code := summarize(&out, []*run{ok, bad}); code != 1 {
		t.Errorf("exit code %d with failures, want 1", code)
	}
	if !strings.HasSuffix(out.String(), "\n1 passed, 3 failed, 1 skipped\n") {
		t.Errorf("summary does not end with the count line:\n%s", out.String())
	}
	out.Reset()
	if code := summarize(&out, []*run{ok}); code != 0 {
		t.Errorf("exit code %d without failures, want 0:\n%s", code, out.String())
	}
}
