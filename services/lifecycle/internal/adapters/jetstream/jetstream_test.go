package jetstream_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natstest"
	"github.com/nodesmith/nodesmith/libs/worker"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	hookv1 "github.com/nodesmith/nodesmith/proto/nodesmith/hook/v1"
	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
	jsadapter "github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/jetstream"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// Re-publishing a command with the same (batch or instance, attempt) is
// stored once; a new attempt is a new command.
func TestCommandsAreDeduplicatedByAttempt(t *testing.T) {
	env := natstest.Start(t)
	ctx := context.Background()
	c := jsadapter.NewCommands(jsadapter.MessagingPublisher{P: messaging.NewPublisher(env.JS)})
	create := ports.CreateCommand{
		BatchID: "b-1", ClientToken: "nodesmith-b-1", Attempt: 1, Group: "g", ClusterID: "c",
		Template:  domain.InstanceTemplate{Name: "t", Provider: "tencentcloud", Account: "dev", Region: "r", ParametersJSON: `{"A":1}`},
		Instances: []ports.InstanceRef{{InstanceID: "g-1", Group: "g", Attempt: 1}},
	}
	hook := ports.HookCommand{InstanceID: "g-1", Group: "g", Attempt: 3, Kind: domain.HookAfterCreated, Host: "10.0.0.1", Script: "x", Timeout: time.Minute,
		Env: map[string]string{"NODE_NAME": "g-1", "JOIN_TOKEN": "abcdef.0123456789abcdef"}, RedactedEnv: []string{"JOIN_TOKEN"}}
	for range 2 {
		if err := c.Create(ctx, create); err != nil {
			t.Fatal(err)
		}
		if err := c.RunHook(ctx, hook); err != nil {
			t.Fatal(err)
		}
		if err := c.Terminate(ctx, ports.TerminateCommand{ClusterID: "c", Instances: []ports.InstanceRef{{InstanceID: "g-1", Attempt: 5, CloudID: "ins-1"}, {InstanceID: "g-2", Attempt: 2, CloudID: "ins-2", Adopted: true}}}); err != nil {
			t.Fatal(err)
		}
	}
	create.Attempt = 2
	if err := c.Create(ctx, create); err != nil {
		t.Fatal(err)
	}
	_, admin := env.ConnectAdmin(t) // reads commands as no service does
	info, err := admin.Stream(ctx, messaging.CommandStream)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := info.Info(ctx)
	if st.State.Msgs != 4 {
		t.Errorf("stream holds %d commands, want 4 (create x2 attempts, hook, terminate)", st.State.Msgs)
	}
	// The create carries what the cloud adapter needs.
	msg, err := info.GetLastMsgForSubject(ctx, messaging.SubjectCloudCreate)
	if err != nil {
		t.Fatal(err)
	}
	var cmd cloudv1.Command
	if err := proto.Unmarshal(msg.Data, &cmd); err != nil {
		t.Fatal(err)
	}
	cr := cmd.GetCreate()
	if cr.GetClientToken() != "nodesmith-b-1" || cr.GetTarget().GetAccount() != "dev" || cr.GetParametersJson() != `{"A":1}` ||
		cr.GetClusterId() != "c" || len(cr.GetInstances()) != 1 || cr.GetInstances()[0].GetAttempt() != 1 {
		t.Errorf("create command %v", cr)
	}
	if msg.Header.Get("Nats-Msg-Id") != "create.b-1.2" {
		t.Errorf("msg id %q", msg.Header.Get("Nats-Msg-Id"))
	}
	// The hook names the operator's env entries for the runner to redact.
	msg, err = info.GetLastMsgForSubject(ctx, messaging.SubjectHookRun)
	if err != nil {
		t.Fatal(err)
	}
	var rh hookv1.RunHook
	if err := proto.Unmarshal(msg.Data, &rh); err != nil {
		t.Fatal(err)
	}
	if got := rh.GetRedactedEnv(); len(got) != 1 || got[0] != "JOIN_TOKEN" || rh.GetEnv()["JOIN_TOKEN"] == "" {
		t.Errorf("hook command env %v, redacted %v", rh.GetEnv(), got)
	}
	// The terminate names the cluster whose VMs it may delete, and which
	// instances adopted a VM (untagged).
	msg, err = info.GetLastMsgForSubject(ctx, messaging.SubjectCloudTerminate)
	if err != nil {
		t.Fatal(err)
	}
	if err := proto.Unmarshal(msg.Data, &cmd); err != nil {
		t.Fatal(err)
	}
	term := cmd.GetTerminate()
	if term.GetClusterId() != "c" || len(term.GetInstances()) != 2 || term.GetInstances()[0].GetAdopted() || !term.GetInstances()[1].GetAdopted() {
		t.Errorf("terminate command %v", term)
	}
}

type fakeOps struct {
	err   error
	revs  app.Revisions
	calls []string
	nodes []app.NodeRef
	put   app.PutGroupRequest
	cput  app.PutCatalogRequest
	cdel  domain.CatalogRef
	adopt app.AdoptRequest
	// once records the request ids and fingerprints Handle passed.
	once [][2]string
}

func (f *fakeOps) Once(ctx context.Context, id, fp string, op func(context.Context) (app.Revisions, error)) (app.Revisions, error) {
	f.once = append(f.once, [2]string{id, fp})
	return op(ctx)
}

func (f *fakeOps) rec(name string) (app.Revisions, error) {
	f.calls = append(f.calls, name)
	return f.revs, f.err
}
func (f *fakeOps) IncreaseSize(_ context.Context, g string, d int) (app.Revisions, error) {
	return f.rec("IncreaseSize")
}
func (f *fakeOps) DecreaseTargetSize(context.Context, string, int) (app.Revisions, error) {
	return f.rec("DecreaseTargetSize")
}
func (f *fakeOps) DeleteNodes(_ context.Context, _ string, n []app.NodeRef) (app.Revisions, error) {
	f.nodes = n
	return f.rec("DeleteNodes")
}
func (f *fakeOps) PutGroup(_ context.Context, r app.PutGroupRequest) (app.Revisions, error) {
	f.put = r
	return f.rec("PutGroup")
}
func (f *fakeOps) DeleteGroup(context.Context, string, uint64) (app.Revisions, error) {
	return f.rec("DeleteGroup")
}
func (f *fakeOps) SetTargetSize(context.Context, string, int) (app.Revisions, error) {
	return f.rec("SetTargetSize")
}
func (f *fakeOps) ActOnInstance(context.Context, string, app.InstanceAction) (app.Revisions, error) {
	return f.rec("InstanceAction")
}

func (f *fakeOps) PutCatalogEntry(_ context.Context, r app.PutCatalogRequest) (app.Revisions, error) {
	f.cput = r
	return f.rec("PutCatalogEntry")
}
func (f *fakeOps) DeleteCatalogEntry(_ context.Context, ref domain.CatalogRef, _ uint64) (app.Revisions, error) {
	f.cdel = ref
	return f.rec("DeleteCatalogEntry")
}

func (f *fakeOps) ReleaseOrphans(context.Context) (app.Revisions, error) {
	return f.rec("ReleaseOrphans")
}

func (f *fakeOps) AdoptVMs(_ context.Context, req app.AdoptRequest) ([]app.AdoptOutcome, app.Revisions, error) {
	f.calls = append(f.calls, "AdoptVMs")
	f.adopt = req
	var out []app.AdoptOutcome
	for _, vm := range req.VMs {
		out = append(out, app.AdoptOutcome{VM: vm, Result: app.AdoptAlready, InstanceID: "g1-x", Message: "m"})
	}
	return out, f.revs, f.err
}

// AdoptVMs is not run through Once (its reply carries the outcome per
// VM) and its outcomes and errors travel in the reply.
func TestHandleMapsAdoptVMs(t *testing.T) {
	ops := &fakeOps{revs: app.Revisions{Groups: 4, Instances: 9}}
	data, _ := proto.Marshal(&lifecyclev1.Request{RequestId: "r1", Op: &lifecyclev1.Request_AdoptVms{AdoptVms: &lifecyclev1.AdoptVMs{
		Group: "g1", DryRun: true, Vms: []*lifecyclev1.AdoptVM{{CloudId: "ins-1", NodeName: "n1", ProviderId: "p1", PrivateIp: "10.0.0.1"}},
	}}})
	r := jsadapter.Handle(context.Background(), ops, data)
	if r.GetError() != nil || r.GetGroupsRevision() != 4 || r.GetInstancesRevision() != 9 || len(r.GetAdopted()) != 1 {
		t.Fatalf("reply %v", r)
	}
	if o := r.GetAdopted()[0]; o.GetResult() != lifecyclev1.AdoptOutcome_RESULT_ALREADY_ADOPTED || o.GetVm().GetCloudId() != "ins-1" || o.GetInstanceId() != "g1-x" {
		t.Errorf("outcome %v", o)
	}
	if len(ops.once) != 0 || ops.adopt.Group != "g1" || !ops.adopt.DryRun || ops.adopt.VMs[0] != (app.AdoptVM{CloudID: "ins-1", NodeName: "n1", ProviderID: "p1", PrivateIP: "10.0.0.1"}) {
		t.Errorf("once %v, request %+v", ops.once, ops.adopt)
	}
	ops.err = domain.Errorf(contract.CodeOutOfRange, "beyond max")
	if r := jsadapter.Handle(context.Background(), ops, data); r.GetError().GetCode() != int32(codes.OutOfRange) {
		t.Errorf("error reply %v", r)
	}
}

func TestHandleMapsReleaseOrphans(t *testing.T) {
	ops := &fakeOps{}
	data, _ := proto.Marshal(&lifecyclev1.Request{RequestId: "r1", Op: &lifecyclev1.Request_ReleaseOrphans{ReleaseOrphans: &lifecyclev1.ReleaseOrphans{}}})
	if r := jsadapter.Handle(context.Background(), ops, data); r.GetError() != nil {
		t.Fatalf("reply %v", r)
	}
	if fmt.Sprint(ops.calls) != "[ReleaseOrphans]" {
		t.Errorf("calls %v", ops.calls)
	}
}

func TestHandleMapsCatalogRequests(t *testing.T) {
	ctx := context.Background()
	enc := func(r *lifecyclev1.Request) []byte { b, _ := proto.Marshal(r); return b }
	ops := &fakeOps{revs: app.Revisions{Groups: 3, Catalog: 11}}
	reply := jsadapter.Handle(ctx, ops, enc(&lifecyclev1.Request{Op: &lifecyclev1.Request_PutCatalogEntry{PutCatalogEntry: &lifecyclev1.PutCatalogEntry{
		Entry: &statev1.CatalogEntry{Entry: &statev1.CatalogEntry_Account{Account: &statev1.CloudAccount{
			Name: "team", Provider: "tencentcloud", Regions: []string{"ap-guangzhou"}, SealedCredentials: []byte{1, 2}, KeyId: "k1",
		}}},
		ExpectedRevision: 5, Upsert: true,
	}}}))
	if reply.GetError() != nil || reply.GetCatalogRevision() != 11 || reply.GetGroupsRevision() != 3 {
		t.Errorf("reply %v", reply)
	}
	a := ops.cput.Entry.Account
	if a == nil || a.Name != "team" || a.KeyID != "k1" || len(a.SealedCredentials) != 2 || ops.cput.ExpectedRevision != 5 || !ops.cput.Upsert {
		t.Errorf("put %+v", ops.cput)
	}
	jsadapter.Handle(ctx, ops, enc(&lifecyclev1.Request{Op: &lifecyclev1.Request_DeleteCatalogEntry{DeleteCatalogEntry: &lifecyclev1.DeleteCatalogEntry{
		Kind: lifecyclev1.CatalogKind_CATALOG_KIND_HOOK, Name: "join",
	}}}))
	if ops.cdel != (domain.CatalogRef{Kind: domain.KindHook, Name: "join"}) {
		t.Errorf("delete %+v", ops.cdel)
	}
	for name, req := range map[string]*lifecyclev1.Request{
		"put without entry":   {Op: &lifecyclev1.Request_PutCatalogEntry{PutCatalogEntry: &lifecyclev1.PutCatalogEntry{}}},
		"delete without kind": {Op: &lifecyclev1.Request_DeleteCatalogEntry{DeleteCatalogEntry: &lifecyclev1.DeleteCatalogEntry{Name: "x"}}},
	} {
		if r := jsadapter.Handle(ctx, ops, enc(req)); codes.Code(r.GetError().GetCode()) != codes.InvalidArgument {
			t.Errorf("%s: %v", name, r)
		}
	}
}

func TestHandleMapsRequestsAndErrors(t *testing.T) {
	ctx := context.Background()
	enc := func(r *lifecyclev1.Request) []byte { b, _ := proto.Marshal(r); return b }
	ops := &fakeOps{revs: app.Revisions{Groups: 7, Instances: 9}}
	reply := jsadapter.Handle(ctx, ops, enc(&lifecyclev1.Request{Op: &lifecyclev1.Request_DeleteNodes{DeleteNodes: &lifecyclev1.DeleteNodes{
		Group: "g", Nodes: []*lifecyclev1.NodeRef{{ProviderId: "p", Name: "n"}},
	}}}))
	if reply.GetError() != nil || reply.GetGroupsRevision() != 7 || reply.GetInstancesRevision() != 9 {
		t.Errorf("reply %v", reply)
	}
	if len(ops.nodes) != 1 || ops.nodes[0] != (app.NodeRef{ProviderID: "p", Name: "n"}) {
		t.Errorf("nodes %v", ops.nodes)
	}
	jsadapter.Handle(ctx, ops, enc(&lifecyclev1.Request{Op: &lifecyclev1.Request_PutGroup{PutGroup: &lifecyclev1.PutGroup{
		Group: &statev1.NodeGroup{Id: "api", MaxSize: 3}, ExpectedRevision: 4, Upsert: true,
	}}}))
	if ops.put.Group.ID != "api" || ops.put.Group.MaxSize != 3 || ops.put.ExpectedRevision != 4 || !ops.put.Upsert {
		t.Errorf("put %+v", ops.put)
	}
	if r := jsadapter.Handle(ctx, ops, []byte{0xff, 0xff}); codes.Code(r.GetError().GetCode()) != codes.InvalidArgument {
		t.Errorf("garbage: %v", r)
	}
	if r := jsadapter.Handle(ctx, ops, enc(&lifecyclev1.Request{})); codes.Code(r.GetError().GetCode()) != codes.InvalidArgument {
		t.Errorf("empty: %v", r)
	}
	for c, want := range map[domain.Code]codes.Code{
		contract.CodeInvalidArgument:    codes.InvalidArgument,
		contract.CodeNotFound:           codes.NotFound,
		contract.CodeAlreadyExists:      codes.AlreadyExists,
		contract.CodeFailedPrecondition: codes.FailedPrecondition,
		contract.CodeOutOfRange:         codes.OutOfRange,
		contract.CodeAborted:            codes.Aborted,
		contract.CodeUnavailable:        codes.Unavailable,
	} {
		ops.err = domain.Errorf(c, "boom")
		r := jsadapter.Handle(ctx, ops, enc(&lifecyclev1.Request{Op: &lifecyclev1.Request_IncreaseSize{IncreaseSize: &lifecyclev1.IncreaseSize{Group: "g", Delta: 1}}}))
		if got := codes.Code(r.GetError().GetCode()); got != want || r.GetError().GetMessage() != "boom" {
			t.Errorf("%s -> %s %q, want %s", c, got, r.GetError().GetMessage(), want)
		}
	}
	if jsadapter.Code(errors.New("x")) != codes.Internal {
		t.Errorf("unclassified error not Internal")
	}
}

// Handle hands the request id and a fingerprint of the operation (its
// arguments, not its id) to Once.
func TestHandlePassesRequestIDAndFingerprint(t *testing.T) {
	ctx := context.Background()
	enc := func(id string, delta int32) []byte {
		b, _ := proto.Marshal(&lifecyclev1.Request{RequestId: id, Op: &lifecyclev1.Request_IncreaseSize{IncreaseSize: &lifecyclev1.IncreaseSize{Group: "g", Delta: delta}}})
		return b
	}
	ops := &fakeOps{}
	jsadapter.Handle(ctx, ops, enc("r1", 1))
	jsadapter.Handle(ctx, ops, enc("r2", 1))
	jsadapter.Handle(ctx, ops, enc("r1", 2))
	if len(ops.once) != 3 {
		t.Fatalf("Once calls %v", ops.once)
	}
	if ops.once[0][0] != "r1" || ops.once[1][0] != "r2" || ops.once[0][1] == "" {
		t.Errorf("ids %v", ops.once)
	}
	if ops.once[0][1] != ops.once[1][1] {
		t.Errorf("the same operation under two ids has two fingerprints")
	}
	if ops.once[0][1] == ops.once[2][1] {
		t.Errorf("different operations share a fingerprint")
	}
}

type sink struct {
	events []domain.Event
	ids    []string
	inv    []app.Inventory
	tagged []app.TagResult
}

func (s *sink) HandleTagged(_ context.Context, r app.TagResult) error {
	s.tagged = append(s.tagged, r)
	return nil
}

func TestHandleCloudEventTagged(t *testing.T) {
	s := &sink{}
	ev := &cloudv1.Event{Body: &cloudv1.Event_Tagged{Tagged: &cloudv1.InstancesTagged{RequestId: "adopt-1", Results: []*cloudv1.TagResult{
		{Instance: &cloudv1.InstanceRef{CloudId: "ins-1"}, State: cloudv1.CloudState_CLOUD_STATE_RUNNING, PrivateIp: "10.0.0.2"},
		{Instance: &cloudv1.InstanceRef{CloudId: "ins-2"}, State: cloudv1.CloudState_CLOUD_STATE_NOT_FOUND,
			Error: &cloudv1.CloudError{Kind: cloudv1.ErrorKind_ERROR_KIND_NOT_FOUND, Code: "InstanceNotFound"}},
	}}}}
	if err := jsadapter.HandleCloudEvent(context.Background(), s, ev); err != nil {
		t.Fatal(err)
	}
	if len(s.tagged) != 1 || s.tagged[0].RequestID != "adopt-1" || len(s.tagged[0].Results) != 2 {
		t.Fatalf("tagged %+v", s.tagged)
	}
	r0, r1 := s.tagged[0].Results[0], s.tagged[0].Results[1]
	if r0.CloudID != "ins-1" || r0.State != domain.CloudRunning || r0.PrivateIP != "10.0.0.2" || r0.Err != nil {
		t.Errorf("result 0 %+v", r0)
	}
	if r1.Err == nil || r1.Err.Kind != contract.ErrorKindNotFound || r1.State != domain.CloudNotFound {
		t.Errorf("result 1 %+v", r1)
	}
}

func (s *sink) HandleEvent(_ context.Context, id string, ev domain.Event) error {
	s.ids = append(s.ids, id)
	s.events = append(s.events, ev)
	return nil
}

func (s *sink) HandleInventory(_ context.Context, inv app.Inventory) error {
	s.inv = append(s.inv, inv)
	return nil
}

func TestEventsAreDecodedPerInstance(t *testing.T) {
	ctx := context.Background()
	s := &sink{}
	err := jsadapter.HandleCloudEvent(ctx, s, &cloudv1.Event{Body: &cloudv1.Event_Created{Created: &cloudv1.InstancesCreated{
		BatchId: "b", Instances: []*cloudv1.InstanceRef{{InstanceId: "a", Attempt: 1, CloudId: "ins-a"}, {InstanceId: "b", Attempt: 1, CloudId: "ins-b"}},
	}}})
	if err != nil || len(s.events) != 2 || s.events[1] != (domain.CloudCreated{Attempt: 1, BatchID: "b", CloudID: "ins-b"}) {
		t.Errorf("created: %v %v", err, s.events)
	}
	err = jsadapter.HandleCloudEvent(ctx, s, &cloudv1.Event{Body: &cloudv1.Event_CreateFailed{CreateFailed: &cloudv1.CreateFailed{
		BatchId: "b", Instances: []*cloudv1.InstanceRef{{InstanceId: "a", Attempt: 1}},
		Error: &cloudv1.CloudError{Kind: cloudv1.ErrorKind_ERROR_KIND_CAPACITY, Code: "NoStock"},
	}}})
	if err != nil || s.events[2] != (domain.CloudCreateFailed{Attempt: 1, BatchID: "b", Err: domain.CloudError{Kind: contract.ErrorKindCapacity, Code: "NoStock"}}) {
		t.Errorf("create failed: %v %v", err, s.events[2])
	}
	// A LAUNCH_FAILED observation carries the cloud's reason; others none.
	for _, le := range []*cloudv1.CloudError{
		{Kind: cloudv1.ErrorKind_ERROR_KIND_CAPACITY, Code: "ResourceInsufficient.SpecifiedInstanceType", Message: "launch failed in zone z1, instance type S5.MEDIUM4: sold out"},
		nil,
	} {
		err = jsadapter.HandleCloudEvent(ctx, s, &cloudv1.Event{Body: &cloudv1.Event_Observed{Observed: &cloudv1.InstanceObserved{
			Instance: &cloudv1.InstanceRef{InstanceId: "a", Attempt: 2, CloudId: "ins-a"}, State: cloudv1.CloudState_CLOUD_STATE_LAUNCH_FAILED, LaunchError: le,
		}}})
		// The observation follows the cloud id it records first
		// (TestObservationRecordsItsCloudIDFirst).
		last := s.events[len(s.events)-1]
		o, ok := last.(domain.CloudObserved)
		if err != nil || !ok || o.Attempt != 2 || o.State != domain.CloudLaunchFailed {
			t.Fatalf("observed: %v %+v", err, last)
		}
		switch {
		case le == nil && o.LaunchError != nil:
			t.Errorf("observation without a launch error decoded with %+v", o.LaunchError)
		case le != nil && (o.LaunchError == nil || *o.LaunchError != domain.CloudError{Kind: contract.ErrorKindCapacity, Code: le.Code, Message: le.Message}):
			t.Errorf("launch error decoded as %+v, want %v", o.LaunchError, le)
		}
	}
	s.events = s.events[:3]
	if err := jsadapter.HandleHookResult(ctx, s, &hookv1.HookResult{InstanceId: "a", Attempt: 3, Hook: hookv1.HookKind_HOOK_KIND_BEFORE_DELETE, ExitCode: 2, Retryable: true}); err != nil {
		t.Fatal(err)
	}
	if h := s.events[3].(domain.HookFinished); h.Kind != domain.HookBeforeDelete || h.Attempt != 3 || !h.Retryable || h.ExitCode != 2 {
		t.Errorf("hook %+v", h)
	}
	if err := jsadapter.HandleCloudEvent(ctx, s, &cloudv1.Event{}); !worker.IsPermanent(err) {
		t.Errorf("empty event: %v", err)
	}
	if err := jsadapter.HandleHookResult(ctx, s, &hookv1.HookResult{}); !worker.IsPermanent(err) {
		t.Errorf("hook result without instance: %v", err)
	}
}

// An observation can overtake the create result naming its VM (the create
// command watches, events are handled concurrently): it records the cloud
// id it carries before the observation itself.
func TestObservationRecordsItsCloudIDFirst(t *testing.T) {
	s := &sink{}
	err := jsadapter.HandleCloudEvent(context.Background(), s, &cloudv1.Event{Body: &cloudv1.Event_Observed{Observed: &cloudv1.InstanceObserved{
		Instance: &cloudv1.InstanceRef{InstanceId: "a", Attempt: 2, CloudId: "ins-a"}, State: cloudv1.CloudState_CLOUD_STATE_RUNNING, PrivateIp: "10.0.0.2",
	}}})
	want := []domain.Event{
		domain.CloudCreated{Attempt: 2, CloudID: "ins-a"},
		domain.CloudObserved{Attempt: 2, CloudID: "ins-a", State: domain.CloudRunning, PrivateIP: "10.0.0.2"},
	}
	if err != nil || fmt.Sprint(s.events) != fmt.Sprint(want) || fmt.Sprint(s.ids) != "[a a]" {
		t.Fatalf("observed: %v %v %v, want %v", err, s.ids, s.events, want)
	}
}
