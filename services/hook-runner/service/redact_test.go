package service_test

import (
	"io"
	"log/slog"
	"strings"
	"testing"

	hookv1 "github.com/nodesmith/nodesmith/proto/nodesmith/hook/v1"

	"github.com/nodesmith/nodesmith/libs/logging/logtest"
	"github.com/nodesmith/nodesmith/libs/natstest"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/sshdtest"
	"github.com/nodesmith/nodesmith/services/hook-runner/service"
)

// A "bash -x" hook run over SSH on OpenSSH's sshd traces every command
// with the join token expanded and echoes it: the runner's logs (at debug,
// where hook output goes) and the output tail of the published result
// hold "[redacted]" where the token was. The standard variables are not
// redacted.
func TestBashXHookDoesNotLeakItsJoinToken(t *testing.T) {
	if testing.Short() {
		t.Skip("component test: NATS and sshd")
	}
	const token = "abcdef.0123456789abcdef"
	env := natstest.Start(t)
	_, observer := env.ConnectAdmin(t) // reads the results no service but lifecycle may
	srv := sshdtest.Start(t, sshdtest.Options{})
	logs := &logtest.Buffer{}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(logs, testWriter{t}), &slog.HandlerOptions{Level: slog.LevelDebug}))
	startReplicaLogging(t, env, srv, "runner-1", func(c *service.Config) { c.SSH.TrustOnFirstUse = true; c.SSH.KnownHostsFiles = nil }, log)

	script := `#!/bin/bash -x
echo "joining as $NODE_NAME with token $JOIN_TOKEN"
join() { :; }
join --node-name "$NODE_NAME" --token "$JOIN_TOKEN" --discovery-token-unsafe-skip-ca-verification
[ "${#JOIN_TOKEN}" -eq 23 ] && echo token-received
`
	publishHook(t, env.JS, &hookv1.RunHook{InstanceId: "ins-join", Attempt: 1, Hook: hookv1.HookKind_HOOK_KIND_AFTER_CREATED,
		Host: "127.0.0.1", Script: script,
		Env:         map[string]string{"NODE_NAME": "node-join-1", "JOIN_TOKEN": token},
		RedactedEnv: []string{"JOIN_TOKEN"}})

	waitFor(t, "the hook's result", func() bool { return len(results(t, observer)) == 1 })
	r := results(t, observer)[0]
	tail := r.GetOutputTail()
	if !r.GetSucceeded() || !strings.Contains(tail, "token-received") {
		t.Fatalf("the hook did not run with its token: %v", r)
	}
	for _, want := range []string{
		"joining as node-join-1 with token [redacted]\n",                // stdout
		"+ join --node-name node-join-1 --token [redacted] --discovery", // bash -x trace on stderr
	} {
		if !strings.Contains(tail, want) {
			t.Errorf("the output tail lacks %q:\n%s", want, tail)
		}
	}
	if !strings.Contains(logs.String(), "--token [redacted]") {
		t.Errorf("the trace line is not in the debug logs:\n%s", logs)
	}
	for what, text := range map[string]string{"output tail": tail, "logs": logs.String()} {
		if strings.Contains(text, token) || strings.Contains(text, token[:12]) || strings.Contains(text, token[11:]) {
			t.Errorf("the %s hold the join token:\n%s", what, text)
		}
	}
}
