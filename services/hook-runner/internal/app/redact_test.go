package app_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/libs/logging/logtest"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/app"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/domain"
)

const joinToken = "abcdef.0123456789abcdef"

// A "bash -x" hook prints the command it runs, join token included, in
// chunks that cut the token: neither the logged lines nor the tail in the
// result hold it. Standard variables and short values are left alone.
func TestHandleRedactsTheOperatorsEnvFromLogsAndTail(t *testing.T) {
	h := newHarness(t, nil)
	h.exec.RunFunc = func(_ context.Context, cmd domain.Command, stdout, stderr io.Writer) domain.Execution {
		if cmd.Env["JOIN_TOKEN"] != joinToken {
			t.Errorf("the script was not given the real token: %q", cmd.Env["JOIN_TOKEN"])
		}
		line := "+ kubeadm join 10.0.0.1:6443 --node-name n1 --token " + joinToken + " --v 5\n"
		for i := 0; i < len(line); i += 7 { // the token arrives cut in pieces
			_, _ = io.WriteString(stderr, line[i:min(i+7, len(line))])
		}
		_, _ = io.WriteString(stdout, "token was "+joinToken[:10])
		_, _ = io.WriteString(stdout, joinToken[10:]+", verbosity 5\n")
		return domain.Execution{ExitCode: 0, Connected: true}
	}
	hk := hook()
	hk.Env = map[string]string{"NODE_NAME": "n1", "JOIN_TOKEN": joinToken, "VERBOSITY": "5"}
	hk.RedactedEnv = []string{"JOIN_TOKEN", "VERBOSITY"}
	if err := h.runner.Handle(context.Background(), hk); err != nil {
		t.Fatal(err)
	}
	r := onlyResult(t, h.pub)
	logs := h.logs.String()
	for what, text := range map[string]string{"output tail": r.OutputTail, "logs": logs} {
		if strings.Contains(text, joinToken) || strings.Contains(text, joinToken[7:]) {
			t.Errorf("the %s hold the token:\n%s", what, text)
		}
	}
	wantTail := "+ kubeadm join 10.0.0.1:6443 --node-name n1 --token [redacted] --v 5\n"
	if !strings.Contains(r.OutputTail, wantTail) || !strings.Contains(r.OutputTail, "token was [redacted], verbosity 5\n") {
		t.Errorf("output tail = %q", r.OutputTail)
	}
	if !strings.Contains(logs, `--token [redacted]`) || !strings.Contains(logs, "level=DEBUG") {
		t.Errorf("the output lines should be logged at debug, redacted:\n%s", logs)
	}
}

// At the default level (Info) a hook's output is not logged at all.
func TestHandleLogsOutputOnlyAtDebug(t *testing.T) {
	h := newHarness(t, nil)
	logs := &logtest.Buffer{}
	h.runner = app.NewRunner(h.exec, h.pub, app.Options{RunnerID: "runner-1", Logger: slog.New(slog.NewTextHandler(logs, nil))})
	h.exec.RunFunc = func(_ context.Context, _ domain.Command, stdout, _ io.Writer) domain.Execution {
		_, _ = io.WriteString(stdout, "joining the cluster\n")
		return domain.Execution{ExitCode: 0, Connected: true}
	}
	if err := h.runner.Handle(context.Background(), hook()); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "joining the cluster") || strings.Contains(logs.String(), "hook output") {
		t.Errorf("output logged at Info:\n%s", logs)
	}
	if !strings.Contains(onlyResult(t, h.pub).OutputTail, "joining the cluster") {
		t.Error("the output is missing from the tail")
	}
}
