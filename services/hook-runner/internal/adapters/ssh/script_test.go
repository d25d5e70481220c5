package ssh

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

func TestInterpreter(t *testing.T) {
	tests := []struct {
		script    string
		wantBash  bool
		wantFlags string
		wantErr   bool
	}{
		{script: "echo hi"},
		{script: "#!/bin/sh\necho"},
		{script: "#!/bin/dash\necho"},
		{script: "#! /bin/sh -eu\necho", wantFlags: "-eu"},
		{script: "#!/bin/bash\necho", wantBash: true},
		{script: "#!/usr/bin/bash -ex\necho", wantBash: true, wantFlags: "-ex"},
		{script: "#!/usr/bin/env bash\necho", wantBash: true},
		{script: "#!/usr/bin/env -S bash -e\necho", wantBash: true, wantFlags: "-e"},
		{script: "#!\necho"},
		{script: "#!/usr/bin/env python3\nprint()", wantErr: true},
		{script: "#!/usr/bin/perl\n", wantErr: true},
		{script: "#!/usr/bin/env\n", wantErr: true},
		{script: "#!/bin/bash --login\necho", wantErr: true},
		{script: "#!/bin/sh -c\necho", wantErr: true},
	}
	for _, tt := range tests {
		bash, flags, err := interpreter(tt.script)
		if tt.wantErr {
			if !errors.Is(err, errUnsupportedInterpreter) {
				t.Errorf("%q: err = %v, want unsupported interpreter", tt.script, err)
			}
			continue
		}
		if err != nil || bash != tt.wantBash || flags != tt.wantFlags {
			t.Errorf("%q: bash=%v flags=%q err=%v, want bash=%v flags=%q", tt.script, bash, flags, err, tt.wantBash, tt.wantFlags)
		}
	}
}

// TestShellQuoteRoundTrip feeds quoted values through a real sh.
func TestShellQuoteRoundTrip(t *testing.T) {
	for _, v := range []string{"", "plain", "it's", "'", "''", `"$HOME" $(id) ` + "`id`", "a\nb\n", "back\\slash", "*?[]{};&|<>", "节点 ✓"} {
		out, err := exec.Command("/bin/sh", "-c", "printf %s "+shellQuote(v)).Output()
		if err != nil {
			t.Fatalf("sh: %v", err)
		}
		if string(out) != v {
			t.Errorf("value %q came back as %q", v, out)
		}
	}
}

func TestPrepareScript(t *testing.T) {
	sc, err := prepareScript("#!/bin/bash -x\necho $B", map[string]string{"B": "b'x", "A": "a"})
	if err != nil {
		t.Fatal(err)
	}
	if sc.command != remoteBash {
		t.Errorf("command = %q", sc.command)
	}
	// Variables are exported in name order before "set -x", so tracing
	// does not print them, and the script follows.
	a := strings.Index(sc.payload, "export A='a'\n")
	b := strings.Index(sc.payload, "export B='b'\\''x'\n")
	set := strings.Index(sc.payload, "set -x\n")
	body := strings.Index(sc.payload, "#!/bin/bash -x\necho $B\n")
	if a < 0 || b < a || set < b || body < set {
		t.Errorf("payload order wrong:\n%s", sc.payload)
	}
	if !strings.HasPrefix(sc.payload, "{\n") || !strings.HasSuffix(sc.payload, "}\n") {
		t.Errorf("payload is not one brace group:\n%s", sc.payload)
	}
	if sc, _ := prepareScript("echo", nil); sc.command != remoteSh {
		t.Errorf("command without shebang = %q", sc.command)
	}
}
