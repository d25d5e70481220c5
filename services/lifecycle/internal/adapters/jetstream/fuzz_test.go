package jetstream_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/worker"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	hookv1 "github.com/nodesmith/nodesmith/proto/nodesmith/hook/v1"
	jsadapter "github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/jetstream"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/memory"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// eventSubjects are the subjects the lifecycle consumer receives, and one
// it must refuse.
var eventSubjects = []string{
	messaging.SubjectCloudCreated, messaging.SubjectCloudCreateFailed, messaging.SubjectCloudObserved,
	messaging.SubjectCloudTerminated, messaging.SubjectCloudTerminateFailed, messaging.SubjectCloudInventoryResult,
	messaging.SubjectHookEvents + ".result", "nodesmith.evt.other",
}

// fakeMsg is a delivered message; the handler reads its subject and data
// (and, for its span, headers and metadata, which a fake lacks).
type fakeMsg struct {
	jetstream.Msg
	subject string
	data    []byte
}

func (m fakeMsg) Subject() string { return m.subject }
func (m fakeMsg) Data() []byte    { return m.data }

func (fakeMsg) Headers() nats.Header { return nil }

func (fakeMsg) Metadata() (*jetstream.MsgMetadata, error) { return nil, jetstream.ErrNotJSMessage }

// fuzzApp is a leading App whose store holds one instance in every state,
// named after it ("g-pending", "g-running", ...).
func fuzzApp(t *testing.T) (*app.App, *memory.Store) {
	ctx := context.Background()
	store := memory.NewStore()
	clock := memory.NewClock(time.Date(2025, 6, 1, 10, 0, 0, 0, time.UTC))
	g := domain.NodeGroup{ID: "g", MaxSize: 20, TargetSize: 5,
		Template: domain.InstanceTemplate{Name: "t", Provider: "tencentcloud", Account: "dev", Region: "r"},
		Hooks: domain.Hooks{AfterCreated: &domain.HookSpec{Name: "join", Script: "join"},
			BeforeDelete: &domain.HookSpec{Name: "drain", Script: "drain"}}}
	if _, err := store.CreateGroup(ctx, g); err != nil {
		t.Fatal(err)
	}
	now := clock.Now()
	for _, st := range domain.States {
		in := domain.NewInstance("g-"+st.String(), "g", now)
		in.State = st
		if st >= domain.StateCreating {
			in.Attempt, in.BatchID, in.ClientToken, in.InFlight = 1, "b1", "nodesmith-b1", true
			in.Deadline = now.Add(10 * time.Minute)
		}
		if st >= domain.StateCreated {
			in.CloudID, in.PrivateIP, in.Attempt = "ins-"+st.String(), "10.0.0.1", 3
			in.ProviderID = "externalgrpc://tencentcloud/dev/r/" + in.CloudID
		}
		if st == domain.StateJoined || st == domain.StateRunning || st == domain.StateDeleted {
			in.InFlight = false
		}
		if st >= domain.StatePendingDeletion {
			in.Released, in.Attempt = true, 5
		}
		if _, err := store.CreateInstance(ctx, in); err != nil {
			t.Fatal(err)
		}
	}
	a := app.New(app.DefaultOptions(), app.Deps{Store: store, Commands: &memory.Commands{}, Clock: clock,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err := a.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return a, store
}

// FuzzEventHandler: whatever arrives on the event stream, the lifecycle
// consumer's handler never panics; an undecodable message or one on an
// unexpected subject is terminated (worker.Permanent, never redelivered);
// a decodable one is applied to the App, which refuses nonsense without
// an error (nothing to redeliver) and keeps every record valid. `go test`
// runs the seeds; `go test -fuzz=FuzzEventHandler` explores.
func FuzzEventHandler(f *testing.F) {
	ref := func(id string, attempt uint32) *cloudv1.InstanceRef {
		return &cloudv1.InstanceRef{InstanceId: id, Attempt: attempt, CloudId: "ins-9"}
	}
	seeds := []struct {
		subject int
		msg     proto.Message
	}{
		{0, &cloudv1.Event{Body: &cloudv1.Event_Created{Created: &cloudv1.InstancesCreated{BatchId: "b1", Instances: []*cloudv1.InstanceRef{ref("g-Creating", 1), ref("g-Deleting", 5)}}}}},
		{1, &cloudv1.Event{Body: &cloudv1.Event_CreateFailed{CreateFailed: &cloudv1.CreateFailed{BatchId: "b1", Instances: []*cloudv1.InstanceRef{ref("g-Creating", 1)},
			Error: &cloudv1.CloudError{Kind: cloudv1.ErrorKind_ERROR_KIND_CAPACITY, Code: "NoStock"}}}}},
		{2, &cloudv1.Event{Body: &cloudv1.Event_Observed{Observed: &cloudv1.InstanceObserved{Instance: ref("g-Creating", 1), State: cloudv1.CloudState_CLOUD_STATE_RUNNING, PrivateIp: "10.0.0.2"}}}},
		{3, &cloudv1.Event{Body: &cloudv1.Event_Terminated{Terminated: &cloudv1.InstancesTerminated{Instances: []*cloudv1.InstanceRef{ref("g-Deleting", 5), ref("", 0)}}}}},
		{4, &cloudv1.Event{Body: &cloudv1.Event_TerminateFailed{TerminateFailed: &cloudv1.TerminateFailed{Instances: []*cloudv1.InstanceRef{ref("g-Deleting", 5)},
			Error: &cloudv1.CloudError{Kind: cloudv1.ErrorKind_ERROR_KIND_NOT_FOUND}}}}},
		{5, &cloudv1.Event{Body: &cloudv1.Event_Inventory{Inventory: &cloudv1.Inventory{RequestId: "inv-1", Items: []*cloudv1.InventoryItem{{CloudId: "ins-x"}}}}}},
		{6, &hookv1.HookResult{InstanceId: "g-Created", Attempt: 3, Hook: hookv1.HookKind_HOOK_KIND_AFTER_CREATED, Succeeded: true}},
		{6, &hookv1.HookResult{InstanceId: "g-PendingDeletion", Attempt: 5, Hook: hookv1.HookKind(7), ExitCode: -4}},
		{7, &cloudv1.Event{}},
	}
	for _, s := range seeds {
		data, err := proto.Marshal(s.msg)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(uint8(s.subject), data)
	}
	f.Add(uint8(0), []byte{0xff, 0x01})
	f.Add(uint8(6), []byte{})
	f.Fuzz(func(t *testing.T, subject uint8, data []byte) {
		a, store := fuzzApp(t)
		subj := eventSubjects[int(subject)%len(eventSubjects)]
		ctx := context.Background()
		err := jsadapter.EventHandler(a)(ctx, fakeMsg{subject: subj, data: data})
		if err != nil && !worker.IsPermanent(err) {
			t.Fatalf("%s: a redeliverable error without storage trouble: %v", subj, err)
		}
		is, lerr := store.ListInstances(ctx)
		if lerr != nil {
			t.Fatal(lerr)
		}
		for _, v := range is {
			in := v.Instance
			if !in.State.Valid() || in.ProviderID == "" || in.Group != "g" {
				t.Fatalf("record broken by %s: %+v", subj, in)
			}
			if c, ok := domain.PendingCommand(in); ok && in.Deadline.IsZero() {
				t.Fatalf("in-flight %s without a deadline after %s: %+v", c.Kind, subj, in)
			}
		}
	})
}
