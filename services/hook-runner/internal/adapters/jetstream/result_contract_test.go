package jetstream

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
	hookv1 "github.com/nodesmith/nodesmith/proto/nodesmith/hook/v1"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/adapters/resulttest"
	"github.com/nodesmith/nodesmith/services/hook-runner/internal/domain"
)

// The ports.ResultPublisher contract on one real server: the runner
// publishes as hook-runner, a test-only observer reads the event stream.
func TestResultPublisherContract(t *testing.T) {
	env := natstest.Start(t)
	_, hrjs := env.ConnectAs(t, natsauth.HookRunner)
	_, observer := env.ConnectAdmin(t)
	resulttest.Run(t, func(*testing.T) resulttest.Harness {
		return resulttest.Harness{
			Publisher: NewResultPublisher(hrjs),
			Stored:    func(t *testing.T, instance string) []domain.Result { return storedResults(t, observer, instance) },
		}
	})
}

// storedResults reads the results of instance the event stream holds, as
// lifecycle would decode them.
func storedResults(t *testing.T, js jetstream.JetStream, instance string) []domain.Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := js.OrderedConsumer(ctx, messaging.EventStream, jetstream.OrderedConsumerConfig{FilterSubjects: []string{ResultSubject}})
	if err != nil {
		t.Fatal(err)
	}
	var out []domain.Result
	for {
		batch, err := cons.FetchNoWait(100)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			var hr hookv1.HookResult
			if err := proto.Unmarshal(m.Data(), &hr); err != nil {
				t.Fatal(err)
			}
			if hr.GetInstanceId() != instance {
				continue
			}
			r := domain.Result{
				InstanceID: hr.GetInstanceId(), Attempt: hr.GetAttempt(), Kind: kindFromProto(hr.GetHook()),
				Succeeded: hr.GetSucceeded(), Skipped: hr.GetSkipped(), ExitCode: int(hr.GetExitCode()), OutputTail: hr.GetOutputTail(),
				Error: hr.GetError(), Retryable: hr.GetRetryable(), HostKey: hr.GetHostKey(), Runner: hr.GetRunner(),
			}
			if hr.GetStartedAt() != nil {
				r.StartedAt = hr.GetStartedAt().AsTime()
			}
			if hr.GetFinishedAt() != nil {
				r.FinishedAt = hr.GetFinishedAt().AsTime()
			}
			out = append(out, r)
		}
		if n == 0 {
			return out
		}
	}
}
