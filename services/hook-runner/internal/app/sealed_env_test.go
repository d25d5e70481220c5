package app_test

import (
	"bytes"
	"context"
	"io"
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/libs/sealed"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/app"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/domain"
)

// Sealed hook env values are opened just before the run, and only the
// executor sees the plaintext.
func TestHandleOpensSealedEnv(t *testing.T) {
	key, err := sealed.NewKey(bytes.Repeat([]byte{4}, sealed.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := key.SealString(sealed.PurposeHookEnv, "JOIN_TOKEN", "join-secret-value")
	if err != nil {
		t.Fatal(err)
	}
	open := func(env map[string]string) (map[string]string, error) { return key.OpenMap(sealed.PurposeHookEnv, env) }
	hk := hook()
	hk.Env = map[string]string{"NODE_NAME": "n1", "JOIN_TOKEN": tok}

	h := newHarness(t, func(o *app.Options) { o.OpenEnv = open })
	if err := h.runner.Handle(context.Background(), hk); err != nil {
		t.Fatal(err)
	}
	calls := h.exec.Calls()
	if len(calls) != 1 || calls[0].Env["JOIN_TOKEN"] != "join-secret-value" || calls[0].Env["NODE_NAME"] != "n1" {
		t.Fatalf("executor env = %+v", calls)
	}
	if strings.Contains(h.logs.String(), "join-secret-value") {
		t.Fatal("the opened value is logged")
	}

	// The opened value is what the output redaction looks for, whether
	// lifecycle listed the variable or not (a lifecycle of an older release
	// during a rolling upgrade lists nothing): it arrived sealed.
	for _, listed := range [][]string{{"JOIN_TOKEN"}, nil} {
		h = newHarness(t, func(o *app.Options) { o.OpenEnv = open })
		h.exec.RunFunc = func(_ context.Context, c domain.Command, stdout, _ io.Writer) domain.Execution {
			_, _ = io.WriteString(stdout, "+ kubeadm join --token "+c.Env["JOIN_TOKEN"]+"\n")
			return domain.Execution{ExitCode: 0, Connected: true}
		}
		hk.RedactedEnv = listed
		if err := h.runner.Handle(context.Background(), hk); err != nil {
			t.Fatal(err)
		}
		if r := onlyResult(t, h.pub); strings.Contains(r.OutputTail, "join-secret-value") || !strings.Contains(r.OutputTail, "kubeadm join") {
			t.Fatalf("listed %v: output tail = %q", listed, r.OutputTail)
		}
		if strings.Contains(h.logs.String(), "join-secret-value") {
			t.Fatalf("listed %v: the opened value is logged", listed)
		}
	}

	// A token moved to another variable does not open; no key fails too.
	for name, tc := range map[string]struct {
		open func(map[string]string) (map[string]string, error)
		env  map[string]string
	}{
		"moved":  {open, map[string]string{"OTHER": tok}},
		"no key": {nil, map[string]string{"JOIN_TOKEN": tok}},
	} {
		t.Run(name, func(t *testing.T) {
			h := newHarness(t, func(o *app.Options) { o.OpenEnv = tc.open })
			hk := hook()
			hk.Env = tc.env
			if err := h.runner.Handle(context.Background(), hk); err != nil {
				t.Fatal(err)
			}
			if len(h.exec.Calls()) != 0 {
				t.Fatal("the hook ran with an env it could not open")
			}
			r := onlyResult(t, h.pub)
			if r.Succeeded || r.Failure != domain.FailureInvalid || strings.Contains(r.Error, "join-secret") {
				t.Fatalf("result = %+v", r)
			}
		})
	}
}
