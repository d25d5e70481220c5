package jetstream

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	hookv1 "github.com/nodesmith/nodesmith/proto/nodesmith/hook/v1"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/domain"
)

func TestDecodeRunHook(t *testing.T) {
	full := &hookv1.RunHook{
		InstanceId: "ins-1", Attempt: 4, Hook: hookv1.HookKind_HOOK_KIND_BEFORE_DELETE, Group: "g",
		Host: "10.0.0.2", Port: 2222, Script: "echo", Env: map[string]string{"A": "b"},
		Timeout: durationpb.New(90 * time.Second), PinnedHostKey: "ssh-ed25519 AAAA", HookName: "drain",
		RedactedEnv: []string{"A"},
	}
	tests := []struct {
		name    string
		data    []byte
		want    domain.Hook
		wantErr string
	}{
		{name: "all fields", data: mustMarshal(t, full), want: domain.Hook{
			InstanceID: "ins-1", Attempt: 4, Kind: domain.KindBeforeDelete, Name: "drain", Group: "g",
			Host: "10.0.0.2", Port: 2222, Script: "echo", Env: map[string]string{"A": "b"},
			Timeout: 90 * time.Second, PinnedHostKey: "ssh-ed25519 AAAA", RedactedEnv: []string{"A"},
		}},
		{name: "defaults", data: mustMarshal(t, &hookv1.RunHook{InstanceId: "ins-2"}), want: domain.Hook{InstanceID: "ins-2"}},
		{name: "invalid timeout becomes negative", data: mustMarshal(t, &hookv1.RunHook{InstanceId: "i", Timeout: &durationpb.Duration{Seconds: 1, Nanos: -5}}), want: domain.Hook{InstanceID: "i", Timeout: -1}},
		{name: "garbage", data: []byte{0xff, 0xff, 0xff}, wantErr: "decoding"},
		{name: "no instance", data: mustMarshal(t, &hookv1.RunHook{Host: "h"}), wantErr: "instance_id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := decodeRunHook(tt.data)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.InstanceID != tt.want.InstanceID || got.Attempt != tt.want.Attempt || got.Kind != tt.want.Kind ||
				got.Name != tt.want.Name || got.Group != tt.want.Group || got.Host != tt.want.Host || got.Port != tt.want.Port ||
				got.Script != tt.want.Script || got.Timeout != tt.want.Timeout || got.PinnedHostKey != tt.want.PinnedHostKey ||
				len(got.Env) != len(tt.want.Env) || got.Env["A"] != tt.want.Env["A"] || !slices.Equal(got.RedactedEnv, tt.want.RedactedEnv) {
				t.Fatalf("decoded %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestPublishResultIsDeduplicatedPerAttempt(t *testing.T) {
	env := natstest.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, hrjs := env.ConnectAs(t, natsauth.HookRunner)
	pub := NewResultPublisher(hrjs)
	started := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	r := domain.Result{
		InstanceID: "ins-9", Attempt: 2, Kind: domain.KindAfterCreated, Succeeded: false, ExitCode: 7,
		OutputTail: "boom\n", Error: "script exited with status 7", Retryable: true, HostKey: "ssh-ed25519 AAAA",
		StartedAt: started, FinishedAt: started.Add(time.Second), Runner: "r1",
	}
	for range 2 { // a re-run publishes the same attempt again
		if err := pub.Publish(ctx, r); err != nil {
			t.Fatal(err)
		}
	}
	next := r
	next.Attempt = 3
	if err := pub.Publish(ctx, next); err != nil {
		t.Fatal(err)
	}

	_, observer := env.ConnectAdmin(t) // reads the events no service but lifecycle may
	cons, err := observer.OrderedConsumer(ctx, messaging.EventStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{ResultSubject}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.FetchNoWait(10)
	if err != nil {
		t.Fatal(err)
	}
	var got []*hookv1.HookResult
	for m := range batch.Messages() {
		var hr hookv1.HookResult
		if err := proto.Unmarshal(m.Data(), &hr); err != nil {
			t.Fatal(err)
		}
		if id := m.Headers().Get("Nats-Msg-Id"); id != fmt.Sprintf("hookresult.ins-9.after_created.%d", hr.GetAttempt()) {
			t.Errorf("message id %q", id)
		}
		got = append(got, &hr)
	}
	if len(got) != 2 || got[0].GetAttempt() != 2 || got[1].GetAttempt() != 3 {
		t.Fatalf("stored results %v, want attempts 2 and 3 once each", got)
	}
	g := got[0]
	if g.GetInstanceId() != "ins-9" || g.GetHook() != hookv1.HookKind_HOOK_KIND_AFTER_CREATED || g.GetSucceeded() ||
		g.GetExitCode() != 7 || g.GetOutputTail() != "boom\n" || !g.GetRetryable() || g.GetHostKey() != "ssh-ed25519 AAAA" ||
		!g.GetStartedAt().AsTime().Equal(started) || !g.GetFinishedAt().AsTime().Equal(started.Add(time.Second)) || g.GetRunner() != "r1" {
		t.Fatalf("result fields: %v", g)
	}
}

func mustMarshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
