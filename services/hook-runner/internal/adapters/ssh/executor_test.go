package ssh

import (
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/hook-runner/internal/domain"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/sshdtest"
)

func TestRunExitCodesAndOutput(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Options{})
	e := newExecutor(t, srv, nil)
	tests := []struct {
		name       string
		script     string
		wantCode   int
		wantFail   domain.Failure
		wantStdout string
		wantStderr string
	}{
		{"success", "echo out\necho err >&2", 0, domain.FailureNone, "out\n", "err\n"},
		{"exit 3", "echo before\nexit 3\necho after", 3, domain.FailureExit, "before\n", ""},
		{"last command fails", "false", 1, domain.FailureExit, "", ""},
		{"no trailing newline", "printf done", 0, domain.FailureNone, "done", ""},
		{"child killed by signal", "sh -c 'kill -TERM $$'", 143, domain.FailureExit, "", ""},
		{"syntax error runs nothing", "echo ran\nif then fi", 2, domain.FailureExit, "", "Syntax error"},
		{"stdin readers do not eat the script", "read line || echo eof\ncat\necho after", 0, domain.FailureNone, "eof\nafter\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex, out := run(t, e, local(tt.script), time.Minute)
			if ex.ExitCode != tt.wantCode || ex.Failure != tt.wantFail {
				t.Fatalf("exit %d failure %s (%v), want exit %d failure %s; stderr %q", ex.ExitCode, ex.Failure, ex.Err, tt.wantCode, tt.wantFail, out.Stderr())
			}
			if out.Stdout() != tt.wantStdout {
				t.Errorf("stdout = %q, want %q", out.Stdout(), tt.wantStdout)
			}
			if !strings.Contains(out.Stderr(), tt.wantStderr) {
				t.Errorf("stderr = %q, want it to contain %q", out.Stderr(), tt.wantStderr)
			}
			if !ex.Connected || ex.ConnectAttempts != 1 || ex.HostKey != "" {
				t.Errorf("connected %v after %d attempts, host key %q", ex.Connected, ex.ConnectAttempts, ex.HostKey)
			}
			if tt.wantFail == domain.FailureExit && !strings.Contains(ex.Err.Error(), "status") {
				t.Errorf("error %q does not give the status", ex.Err)
			}
		})
	}
}

func TestRunDeliversEnvironment(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Options{})
	e := newExecutor(t, srv, nil)
	env := map[string]string{
		"NODE_NAME":   "node-1",
		"NODE_IP":     "10.0.0.7",
		"PROVIDER_ID": "tencentcloud:///ap-guangzhou-3/ins-abc",
		"INSTANCE_ID": "ins-abc",
		"NODE_GROUP":  "workers",
		"QUOTES":      `it's "quoted" \back\slash`,
		"EXPANSIONS":  "$HOME `id` $(id) ${X:-y} *",
		"MULTILINE":   "line one\nline two\n",
		"UNICODE":     "节点 ✓",
		"EMPTY":       "",
		"JOIN_TOKEN":  "abcdef.0123456789abcdef",
	}
	var script strings.Builder
	names := []string{"NODE_NAME", "NODE_IP", "PROVIDER_ID", "INSTANCE_ID", "NODE_GROUP", "QUOTES", "EXPANSIONS", "MULTILINE", "UNICODE", "EMPTY", "JOIN_TOKEN"}
	var want strings.Builder
	for _, n := range names {
		// printf with NUL separators shows each value byte for byte; sh -c
		// shows the variable is exported, not just set in the script.
		script.WriteString("sh -c 'printf \"%s=%s\\0\" " + n + " \"$" + n + "\"'\n")
		want.WriteString(n + "=" + env[n] + "\x00")
	}
	cmd := local(script.String())
	cmd.Env = env
	ex, out := run(t, e, cmd, time.Minute)
	if ex.Failure != domain.FailureNone {
		t.Fatalf("run failed: %v; stderr %q", ex.Err, out.Stderr())
	}
	if out.Stdout() != want.String() {
		t.Fatalf("environment seen by the script:\n got %q\nwant %q", out.Stdout(), want.String())
	}
}

func TestRunInvalidEnvironmentNeverConnects(t *testing.T) {
	e, err := New(Options{TrustOnFirstUse: true, Password: []byte("x"), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	for _, env := range []map[string]string{
		{"BAD-NAME": "x"},
		{"X; touch /tmp/pwned; Y": "x"},
		{"NUL": "a\x00b"},
	} {
		cmd := domain.Command{Host: "127.0.0.1", Port: 1, Script: "true", Env: env}
		ex, _ := run(t, e, cmd, 10*time.Second)
		if ex.Failure != domain.FailureInvalid || ex.ConnectAttempts != 0 || ex.ExitCode != -1 {
			t.Errorf("env %q: failure %s after %d attempts (%v), want invalid without connecting", env, ex.Failure, ex.ConnectAttempts, ex.Err)
		}
	}
}

func TestRunEmptyHostNeverConnects(t *testing.T) {
	e, err := New(Options{TrustOnFirstUse: true, Password: []byte("x"), Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	ex, _ := run(t, e, domain.Command{Script: "true"}, 10*time.Second)
	if ex.Failure != domain.FailureInvalid || ex.Failure.Retryable() || ex.ConnectAttempts != 0 || ex.Connected {
		t.Fatalf("empty host: failure %s after %d attempts (%v), want invalid without connecting", ex.Failure, ex.ConnectAttempts, ex.Err)
	}
}

func TestRunInterpreterFromShebang(t *testing.T) {
	srv := sshdtest.Start(t, sshdtest.Options{})
	e := newExecutor(t, srv, nil)
	tests := []struct {
		name     string
		script   string
		wantOut  string
		wantCode int
	}{
		{"bash shebang runs bash", "#!/bin/bash\necho ${BASH_VERSION:+bash}", "bash\n", 0},
		{"env bash shebang runs bash", "#!/usr/bin/env bash\n[[ 1 == 1 ]] && echo bashism", "bashism\n", 0},
		{"sh shebang runs sh", "#!/bin/sh\necho ${BASH_VERSION:-sh}", "sh\n", 0},
		{"no shebang runs sh", "echo ${BASH_VERSION:-sh}", "sh\n", 0},
		{"shebang -e applies", "#!/bin/bash -e\necho one\nfalse\necho not reached", "one\n", 1},
		{"shebang -eu applies", "#!/bin/sh -eu\necho $UNSET_VARIABLE\necho not reached", "", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex, out := run(t, e, local(tt.script), time.Minute)
			if ex.ExitCode != tt.wantCode || out.Stdout() != tt.wantOut {
				t.Fatalf("exit %d stdout %q (stderr %q), want exit %d stdout %q", ex.ExitCode, out.Stdout(), out.Stderr(), tt.wantCode, tt.wantOut)
			}
		})
	}
	ex, _ := run(t, e, local("#!/usr/bin/env python3\nprint('hi')"), time.Minute)
	if ex.Failure != domain.FailureInvalid || ex.ConnectAttempts != 0 {
		t.Fatalf("python script: failure %s (%v) after %d attempts, want invalid without connecting", ex.Failure, ex.Err, ex.ConnectAttempts)
	}
}
