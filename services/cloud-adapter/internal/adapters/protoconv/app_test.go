package protoconv_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/fake"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/protoconv"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/app"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

const provider = "fakecloud"

// stepClock advances by step every time it is read, so time-based rules
// (grace periods, watch deadlines) play out in a few polls without sleeping.
type stepClock struct {
	mu   sync.Mutex
	now  time.Time
	step time.Duration
}

func (c *stepClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(c.step)
	return c.now
}

// The application's use cases, driven as the jetstream adapter drives
// them: commands in their wire shape converted by protoconv.Command, events
// checked in the wire shape protoconv.Event gives them, which is what
// lifecycle receives.
type harness struct {
	cloud  *fake.Cloud
	events wireEvents
	svc    wireService
	stop   chan struct{}
}

// published is one stored event in its wire shape.
type published struct {
	MsgID string
	Event *cloudv1.Event
}

type wireEvents struct{ *fake.Events }

func (e wireEvents) All() []published {
	var out []published
	for _, p := range e.Events.All() {
		out = append(out, published{MsgID: p.MsgID, Event: protoconv.Event(p.Event)})
	}
	return out
}

type wireService struct{ *app.Service }

func (s wireService) Handle(ctx context.Context, c *cloudv1.Command, d app.Delivery) error {
	return s.Service.Handle(ctx, protoconv.Command(c), d)
}

func (s wireService) Create(ctx context.Context, c *cloudv1.CreateInstances, d app.Delivery) error {
	return s.Handle(ctx, &cloudv1.Command{Body: &cloudv1.Command_Create{Create: c}}, d)
}

func (s wireService) Watch(ctx context.Context, c *cloudv1.WatchInstances, d app.Delivery) error {
	return s.Handle(ctx, &cloudv1.Command{Body: &cloudv1.Command_Watch{Watch: c}}, d)
}

func (s wireService) Terminate(ctx context.Context, c *cloudv1.TerminateInstances, d app.Delivery) error {
	return s.Handle(ctx, &cloudv1.Command{Body: &cloudv1.Command_Terminate{Terminate: c}}, d)
}

func (s wireService) ListInventory(ctx context.Context, c *cloudv1.ListInventory, d app.Delivery) error {
	return s.Handle(ctx, &cloudv1.Command{Body: &cloudv1.Command_ListInventory{ListInventory: c}}, d)
}

func (s wireService) TagInstances(ctx context.Context, c *cloudv1.TagInstances, d app.Delivery) error {
	return s.Handle(ctx, &cloudv1.Command{Body: &cloudv1.Command_Tag{Tag: c}}, d)
}

func newHarness(t *testing.T, tweak func(*app.Options)) *harness {
	t.Helper()
	h := &harness{cloud: fake.NewCloud(), events: wireEvents{fake.NewEvents()}, stop: make(chan struct{})}
	clock := &stepClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), step: time.Second}
	o := app.Options{
		PollInterval:  time.Millisecond,
		MaxWatch:      time.Hour,
		NotFoundGrace: 10 * time.Second,
		Stopping:      h.stop,
		Now:           clock.Now,
		Logger:        slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
	if tweak != nil {
		tweak(&o)
	}
	h.svc = wireService{app.New(map[string]ports.Cloud{provider: h.cloud}, h.events.Events, o)}
	return h
}

var first = app.Delivery{Attempt: 1}
var last = app.Delivery{Attempt: 20, Last: true}

func target() *cloudv1.Target {
	return &cloudv1.Target{Provider: provider, Account: "acct", Region: "ap-test"}
}

func refs(n int, withCloudIDs bool) []*cloudv1.InstanceRef {
	out := make([]*cloudv1.InstanceRef, n)
	for i := range out {
		out[i] = &cloudv1.InstanceRef{InstanceId: fmt.Sprintf("i%03d", i), Attempt: 1, Group: "g1"}
		if withCloudIDs {
			out[i].CloudId = fmt.Sprintf("ins-%03d", i)
		}
	}
	return out
}

func createCmd(n int) *cloudv1.CreateInstances {
	return &cloudv1.CreateInstances{
		BatchId: "b1", ClientToken: "tok", Target: target(), TemplateName: "small",
		ParametersJson: `{"InstanceType":"S5.SMALL1"}`, Instances: refs(n, false), ClusterId: "c1", Group: "g1",
	}
}

func kinds(evs []published) []string {
	var out []string
	for _, p := range evs {
		switch p.Event.GetBody().(type) {
		case *cloudv1.Event_Created:
			out = append(out, "created")
		case *cloudv1.Event_CreateFailed:
			out = append(out, "create_failed")
		case *cloudv1.Event_Observed:
			out = append(out, "observed")
		case *cloudv1.Event_Terminated:
			out = append(out, "terminated")
		case *cloudv1.Event_TerminateFailed:
			out = append(out, "terminate_failed")
		case *cloudv1.Event_Inventory:
			out = append(out, "inventory")
		}
	}
	return out
}

// results is kinds without the observations of the create's watch.
func results(evs []published) []string {
	var out []string
	for _, k := range kinds(evs) {
		if k != "observed" {
			out = append(out, k)
		}
	}
	return out
}

func equal[T comparable](t *testing.T, what string, got, want T) {
	t.Helper()
	if got != want {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func TestCreateMapsCloudIDsInOrderAndTags(t *testing.T) {
	for _, tc := range []struct {
		name        string
		n           int
		instanceTag string
	}{
		{name: "several instances carry no instance tag", n: 3},
		{name: "a single instance is tagged with its id", n: 1, instanceTag: "i000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			if err := h.svc.Create(context.Background(), createCmd(tc.n), first); err != nil {
				t.Fatalf("Create: %v", err)
			}
			calls := h.cloud.Calls().Create
			equal(t, "create calls", len(calls), 1)
			req := calls[0]
			equal(t, "count", req.Count, tc.n)
			equal(t, "token", req.ClientToken, "tok")
			equal(t, "parameters", req.Parameters, `{"InstanceType":"S5.SMALL1"}`)
			equal(t, "target", req.Target, ports.Target{Account: "acct", Region: "ap-test"})
			want := domain.CreationTags("c1", "g1", "b1", tc.instanceTag)
			equal(t, "tags", fmt.Sprint(req.Tags), fmt.Sprint(want))

			evs := h.events.All()
			equal(t, "events", fmt.Sprint(results(evs)), "[created]")
			equal(t, "first event", kinds(evs)[0], "created")
			equal(t, "msg id", evs[0].MsgID, "created.b1.1")
			created := evs[0].Event.GetCreated()
			vms := h.cloud.VMs()
			equal(t, "created instances", len(created.GetInstances()), tc.n)
			for i, r := range created.GetInstances() {
				equal(t, "instance order", r.GetInstanceId(), fmt.Sprintf("i%03d", i))
				equal(t, "cloud id", r.GetCloudId(), vms[i].CloudID)
				equal(t, "group", r.GetGroup(), "g1")
			}
		})
	}
}

func TestCreateSplitsBigBatchesWithDerivedTokens(t *testing.T) {
	h := newHarness(t, nil)
	if err := h.svc.Create(context.Background(), createCmd(250), first); err != nil {
		t.Fatalf("Create: %v", err)
	}
	calls := h.cloud.Calls().Create
	equal(t, "calls", len(calls), 3)
	for i, want := range []struct {
		count int
		token string
	}{{100, "tok-0"}, {100, "tok-1"}, {50, "tok-2"}} {
		equal(t, "count", calls[i].Count, want.count)
		equal(t, "token", calls[i].ClientToken, want.token)
	}
	evs := h.events.All()[:3]
	equal(t, "events", fmt.Sprint(kinds(evs)), "[created created created]")
	equal(t, "events after the watch", fmt.Sprint(results(h.events.All())), "[created created created]")
	vms := h.cloud.VMs()
	n := 0
	for i, p := range evs {
		equal(t, "msg id", p.MsgID, fmt.Sprintf("created.b1.1.%d", i))
		for _, r := range p.Event.GetCreated().GetInstances() {
			equal(t, "instance", r.GetInstanceId(), fmt.Sprintf("i%03d", n))
			equal(t, "cloud id", r.GetCloudId(), vms[n].CloudID)
			n++
		}
	}
	equal(t, "mapped", n, 250)
}

func TestCreateRedeliveredCreatesOnce(t *testing.T) {
	h := newHarness(t, nil)
	cmd := createCmd(150)
	for i := range 3 {
		if err := h.svc.Create(context.Background(), cmd, app.Delivery{Attempt: uint64(i + 1)}); err != nil {
			t.Fatalf("delivery %d: %v", i+1, err)
		}
	}
	equal(t, "VMs", len(h.cloud.VMs()), 150)
	// Two created events and each VM's PENDING and RUNNING observations.
	equal(t, "stored events", len(h.events.All()), 2+2*150)
	// Each redelivery re-publishes both created events and, as its watch
	// starts afresh, each VM's RUNNING observation.
	equal(t, "duplicates dropped", h.events.Duplicates(), 2*(2+150))
}

func TestCreateFailures(t *testing.T) {
	capacity := ports.NewCapacityError("ResourceInsufficient.SpecifiedInstanceType", "sold out")
	throttled := ports.NewThrottledError("RequestLimitExceeded", "slow down")
	for _, tc := range []struct {
		name       string
		cmd        func() *cloudv1.CreateInstances
		errs       []error
		delivery   app.Delivery
		wantErr    bool
		wantKinds  string
		wantFailed int
		wantCode   string
		wantKind   cloudv1.ErrorKind
	}{
		{
			name: "capacity is reported, not retried", cmd: func() *cloudv1.CreateInstances { return createCmd(3) },
			errs: []error{capacity}, delivery: first, wantKinds: "[create_failed]", wantFailed: 3,
			wantCode: "ResourceInsufficient.SpecifiedInstanceType", wantKind: cloudv1.ErrorKind_ERROR_KIND_CAPACITY,
		},
		{
			name: "throttled is retried through redelivery", cmd: func() *cloudv1.CreateInstances { return createCmd(3) },
			errs: []error{throttled}, delivery: first, wantErr: true, wantKinds: "[]",
		},
		{
			name: "throttled on the last delivery is reported", cmd: func() *cloudv1.CreateInstances { return createCmd(3) },
			errs: []error{throttled}, delivery: last, wantKinds: "[create_failed]", wantFailed: 3,
			wantCode: "RequestLimitExceeded", wantKind: cloudv1.ErrorKind_ERROR_KIND_THROTTLED,
		},
		{
			name: "created chunks are published before a later chunk's failure", cmd: func() *cloudv1.CreateInstances { return createCmd(250) },
			errs: []error{nil, capacity}, delivery: first, wantKinds: "[created create_failed]", wantFailed: 150,
			wantCode: "ResourceInsufficient.SpecifiedInstanceType", wantKind: cloudv1.ErrorKind_ERROR_KIND_CAPACITY,
		},
		{
			name: "unknown provider", delivery: first, wantKinds: "[create_failed]", wantFailed: 3,
			cmd: func() *cloudv1.CreateInstances {
				c := createCmd(3)
				c.Target.Provider = "nocloud"
				return c
			},
			wantCode: "UnknownProvider", wantKind: cloudv1.ErrorKind_ERROR_KIND_INVALID_PARAMETERS,
		},
		{
			name: "never creates without a client token", delivery: first, wantKinds: "[create_failed]", wantFailed: 3,
			cmd: func() *cloudv1.CreateInstances {
				c := createCmd(3)
				c.ClientToken = ""
				return c
			},
			wantCode: "MissingClientToken", wantKind: cloudv1.ErrorKind_ERROR_KIND_INVALID_PARAMETERS,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			h.cloud.FailNext(fake.OpCreate, tc.errs...)
			err := h.svc.Create(context.Background(), tc.cmd(), tc.delivery)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Create error = %v, want error %v", err, tc.wantErr)
			}
			evs := h.events.All()
			equal(t, "events", fmt.Sprint(results(evs)), tc.wantKinds)
			if tc.wantFailed == 0 {
				return
			}
			var f *cloudv1.CreateFailed
			for _, p := range evs {
				if p.Event.GetCreateFailed() != nil {
					f = p.Event.GetCreateFailed()
				}
			}
			equal(t, "failed instances", len(f.GetInstances()), tc.wantFailed)
			equal(t, "code", f.GetError().GetCode(), tc.wantCode)
			equal(t, "kind", f.GetError().GetKind(), tc.wantKind)
			equal(t, "batch", f.GetBatchId(), "b1")
		})
	}
}

func TestCreateWithoutBatchIsInvalid(t *testing.T) {
	h := newHarness(t, nil)
	c := createCmd(1)
	c.BatchId = ""
	if err := h.svc.Create(context.Background(), c, first); !errors.Is(err, app.ErrInvalidCommand) {
		t.Fatalf("Create = %v, want ErrInvalidCommand", err)
	}
	if err := h.svc.Handle(context.Background(), &cloudv1.Command{}, first); !errors.Is(err, app.ErrInvalidCommand) {
		t.Fatalf("Handle(empty) = %v, want ErrInvalidCommand", err)
	}
	equal(t, "cloud calls", len(h.cloud.Calls().Create), 0)
}

func TestCreatePublishFailureRetriesWithoutDuplicates(t *testing.T) {
	h := newHarness(t, nil)
	h.events.FailNext(errors.New("nats down"))
	if err := h.svc.Create(context.Background(), createCmd(2), first); err == nil {
		t.Fatal("Create succeeded although the event could not be published")
	}
	if err := h.svc.Create(context.Background(), createCmd(2), app.Delivery{Attempt: 2}); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	equal(t, "VMs", len(h.cloud.VMs()), 2)
	equal(t, "events", fmt.Sprint(results(h.events.All())), "[created]")
}

// createVMs makes n fake VMs of cluster c1 and returns refs to them.
func createVMs(t *testing.T, h *harness, n int) []*cloudv1.InstanceRef {
	t.Helper()
	out := refs(n, false)
	for start := 0; start < n; start += ports.MaxBatch {
		count := min(ports.MaxBatch, n-start)
		ids, err := h.cloud.CreateBatch(context.Background(), ports.CreateRequest{
			Target: ports.Target{Account: "acct", Region: "ap-test"}, ClientToken: fmt.Sprint("setup", start), Count: count,
			Tags: domain.CreationTags("c1", "g1", fmt.Sprint("setup", start), ""),
		})
		if err != nil {
			t.Fatal(err)
		}
		for i, id := range ids {
			out[start+i].CloudId = id
		}
	}
	return out
}

func observed(evs []published) []string {
	var out []string
	for _, p := range evs {
		if o := p.Event.GetObserved(); o != nil {
			out = append(out, o.GetInstance().GetInstanceId()+"="+o.GetState().String())
		}
	}
	return out
}

func TestWatchReportsEachChangeUntilRunning(t *testing.T) {
	h := newHarness(t, nil)
	w := &cloudv1.WatchInstances{Target: target(), Instances: createVMs(t, h, 2)}
	if err := h.svc.Watch(context.Background(), w, first); err != nil {
		t.Fatalf("Watch: %v", err)
	}
	got := fmt.Sprint(observed(h.events.All()))
	want := "[i000=CLOUD_STATE_PENDING i001=CLOUD_STATE_PENDING i000=CLOUD_STATE_RUNNING i001=CLOUD_STATE_RUNNING]"
	equal(t, "observations", got, want)
	evs := h.events.All()
	equal(t, "msg id", evs[2].MsgID, "observed.i000.1.RUNNING")
	run := evs[2].Event.GetObserved()
	if run.GetPrivateIp() == "" || run.GetZone() != "fake-zone-1" || run.GetObservedAt() == nil {
		t.Fatalf("RUNNING observation lacks ip, zone or time: %v", run)
	}
	equal(t, "describe rounds", len(h.cloud.Calls().Describe), 2)
}

func TestWatchSettles(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(h *harness, ids []*cloudv1.InstanceRef)
		want  string
	}{
		{
			name: "launch failure",
			setup: func(h *harness, r []*cloudv1.InstanceRef) {
				h.cloud.SetState(r[0].CloudId, domain.StateLaunchFailed, "")
			},
			want: "[i000=CLOUD_STATE_LAUNCH_FAILED]",
		},
		{
			name:  "vanished VM after the grace period",
			setup: func(h *harness, r []*cloudv1.InstanceRef) { h.cloud.Remove(r[0].CloudId) },
			want:  "[i000=CLOUD_STATE_NOT_FOUND]",
		},
		{
			name: "terminating VM",
			setup: func(h *harness, r []*cloudv1.InstanceRef) {
				h.cloud.SetState(r[0].CloudId, domain.StateTerminating, "")
			},
			want: "[i000=CLOUD_STATE_TERMINATING]",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			r := createVMs(t, h, 1)
			tc.setup(h, r)
			if err := h.svc.Watch(context.Background(), &cloudv1.WatchInstances{Target: target(), Instances: r}, first); err != nil {
				t.Fatalf("Watch: %v", err)
			}
			equal(t, "observations", fmt.Sprint(observed(h.events.All())), tc.want)
		})
	}
}

// A VM the cloud accepted and then failed to launch for want of stock is
// observed LAUNCH_FAILED with the cloud's reason as a capacity error, so
// lifecycle can report it to CA as OutOfResources; a launch failure
// without a reason carries none.
func TestWatchReportsWhyALaunchFailed(t *testing.T) {
	h := newHarness(t, nil)
	h.cloud.FailLaunches(&domain.LaunchError{Kind: ports.ErrorKindCapacity, Code: "ResourceInsufficient.SpecifiedInstanceType",
		Message: "launch failed in zone fake-zone-1, instance type S5.MEDIUM2: sold out"})
	r := createVMs(t, h, 1)
	if err := h.svc.Watch(context.Background(), &cloudv1.WatchInstances{Target: target(), Instances: r}, first); err != nil {
		t.Fatalf("Watch: %v", err)
	}
	evs := h.events.All()
	last := evs[len(evs)-1].Event.GetObserved()
	equal(t, "state", last.GetState().String(), "CLOUD_STATE_LAUNCH_FAILED")
	le := last.GetLaunchError()
	equal(t, "kind", le.GetKind().String(), "ERROR_KIND_CAPACITY")
	equal(t, "code", le.GetCode(), "ResourceInsufficient.SpecifiedInstanceType")
	equal(t, "message", le.GetMessage(), "launch failed in zone fake-zone-1, instance type S5.MEDIUM2: sold out")
	for _, e := range evs[:len(evs)-1] {
		if e.Event.GetObserved().GetLaunchError() != nil {
			t.Fatalf("an observation before the launch failure carries a launch error: %v", e.Event)
		}
	}

	h = newHarness(t, nil)
	r = createVMs(t, h, 1)
	h.cloud.SetState(r[0].CloudId, domain.StateLaunchFailed, "")
	if err := h.svc.Watch(context.Background(), &cloudv1.WatchInstances{Target: target(), Instances: r}, first); err != nil {
		t.Fatalf("Watch: %v", err)
	}
	evs = h.events.All()
	if le := evs[len(evs)-1].Event.GetObserved().GetLaunchError(); le != nil {
		t.Fatalf("a launch failure without a reason carries launch error %v", le)
	}
}

func TestWatchDescribesInSetsOfAtMost100(t *testing.T) {
	h := newHarness(t, nil)
	h.cloud.BootAfter = 0
	w := &cloudv1.WatchInstances{Target: target(), Instances: createVMs(t, h, 230)}
	if err := h.svc.Watch(context.Background(), w, first); err != nil {
		t.Fatalf("Watch: %v", err)
	}
	var sizes []int
	for _, c := range h.cloud.Calls().Describe {
		sizes = append(sizes, len(c))
	}
	equal(t, "describe sizes", fmt.Sprint(sizes), "[100 100 30]")
	equal(t, "observations", len(observed(h.events.All())), 230)
}

func TestWatchRetriesRetryableDescribeErrors(t *testing.T) {
	h := newHarness(t, nil)
	h.cloud.FailNext(fake.OpDescribe, ports.NewThrottledError("RequestLimitExceeded", ""), ports.NewTransientError("InternalError", ""))
	w := &cloudv1.WatchInstances{Target: target(), Instances: createVMs(t, h, 1)}
	if err := h.svc.Watch(context.Background(), w, first); err != nil {
		t.Fatalf("Watch: %v", err)
	}
	equal(t, "observations", fmt.Sprint(observed(h.events.All())), "[i000=CLOUD_STATE_PENDING i000=CLOUD_STATE_RUNNING]")
}

func TestWatchFailsOnDefinitiveDescribeErrors(t *testing.T) {
	h := newHarness(t, nil)
	h.cloud.FailNext(fake.OpDescribe, ports.NewAuthError("AuthFailure.SecretIdNotFound", ""))
	w := &cloudv1.WatchInstances{Target: target(), Instances: createVMs(t, h, 1)}
	err := h.svc.Watch(context.Background(), w, first)
	if !ports.IsAuthError(err) {
		t.Fatalf("Watch = %v, want the auth error", err)
	}
}

func TestWatchWithMalformedIDsIsInvalid(t *testing.T) {
	h := newHarness(t, nil)
	h.cloud.FailNext(fake.OpDescribe, ports.NewInvalidParametersError("InvalidInstanceId.Malformed", ""))
	w := &cloudv1.WatchInstances{Target: target(), Instances: refs(1, true)}
	if err := h.svc.Watch(context.Background(), w, first); !errors.Is(err, app.ErrInvalidCommand) {
		t.Fatalf("Watch = %v, want ErrInvalidCommand", err)
	}
}

func TestWatchGivesUpAfterMaxWatch(t *testing.T) {
	h := newHarness(t, func(o *app.Options) { o.MaxWatch = 30 * time.Second })
	h.cloud.BootAfter = 1_000_000
	w := &cloudv1.WatchInstances{Target: target(), Instances: createVMs(t, h, 1)}
	if err := h.svc.Watch(context.Background(), w, first); err != nil {
		t.Fatalf("Watch: %v", err)
	}
	equal(t, "observations", fmt.Sprint(observed(h.events.All())), "[i000=CLOUD_STATE_PENDING]")
	if n := len(h.cloud.Calls().Describe); n < 2 || n > 31 {
		t.Fatalf("describe rounds = %d, want a bounded number (2..31)", n)
	}
}

func TestWatchHandsBackOnShutdown(t *testing.T) {
	h := newHarness(t, nil)
	h.cloud.BootAfter = 1_000_000
	close(h.stop)
	w := &cloudv1.WatchInstances{Target: target(), Instances: createVMs(t, h, 1)}
	if err := h.svc.Watch(context.Background(), w, first); !errors.Is(err, app.ErrHandedBack) {
		t.Fatalf("Watch = %v, want ErrHandedBack", err)
	}
}

func TestWatchWithoutCloudIDsIsInvalid(t *testing.T) {
	h := newHarness(t, nil)
	w := &cloudv1.WatchInstances{Target: target(), Instances: refs(2, false)}
	if err := h.svc.Watch(context.Background(), w, first); !errors.Is(err, app.ErrInvalidCommand) {
		t.Fatalf("Watch = %v, want ErrInvalidCommand", err)
	}
}

func TestTerminate(t *testing.T) {
	throttled := ports.NewThrottledError("RequestLimitExceeded", "")
	auth := ports.NewAuthError("AuthFailure.UnauthorizedOperation", "")
	for _, tc := range []struct {
		name      string
		n         int
		errs      []error
		delivery  app.Delivery
		wantErr   bool
		wantSizes string
		wantKinds string
	}{
		{name: "sets of at most 100", n: 250, delivery: first, wantSizes: "[100 100 50]", wantKinds: "[terminated terminated terminated]"},
		{name: "definitive failure of one set", n: 150, errs: []error{nil, auth}, delivery: first, wantSizes: "[100 50]", wantKinds: "[terminated terminate_failed]"},
		{name: "retryable failure is redelivered", n: 3, errs: []error{throttled}, delivery: first, wantErr: true, wantSizes: "[3]", wantKinds: "[]"},
		{name: "retryable failure on the last delivery", n: 3, errs: []error{throttled}, delivery: last, wantSizes: "[3]", wantKinds: "[terminate_failed]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, nil)
			vms := createVMs(t, h, tc.n)
			h.cloud.FailNext(fake.OpTerminate, tc.errs...)
			err := h.svc.Terminate(context.Background(), &cloudv1.TerminateInstances{Target: target(), ClusterId: "c1", Instances: vms}, tc.delivery)
			if (err != nil) != tc.wantErr {
				t.Fatalf("Terminate = %v, want error %v", err, tc.wantErr)
			}
			var sizes []int
			for _, c := range h.cloud.Calls().Terminate {
				sizes = append(sizes, len(c))
			}
			equal(t, "terminate sizes", fmt.Sprint(sizes), tc.wantSizes)
			equal(t, "events", fmt.Sprint(kinds(h.events.All())), tc.wantKinds)
		})
	}
}

func TestTerminateWithoutCloudIDAndDuplicates(t *testing.T) {
	h := newHarness(t, nil)
	r := createVMs(t, h, 3)
	r[1].CloudId = ""                                                                          // never got a VM
	r = append(r, &cloudv1.InstanceRef{InstanceId: "i000", Attempt: 2, CloudId: r[0].CloudId}) // same VM twice
	cmd := &cloudv1.TerminateInstances{Target: target(), ClusterId: "c1", Instances: r}
	for range 2 {
		if err := h.svc.Terminate(context.Background(), cmd, first); err != nil {
			t.Fatalf("Terminate: %v", err)
		}
	}
	calls := h.cloud.Calls().Terminate
	equal(t, "ids terminated", fmt.Sprint(calls), "[[ins-fake00001 ins-fake00003]]")
	evs := h.events.All()
	equal(t, "events", fmt.Sprint(kinds(evs)), "[terminated]")
	equal(t, "reported", len(evs[0].Event.GetTerminated().GetInstances()), 4)
	equal(t, "duplicate dropped", h.events.Duplicates(), 1)
}

func TestListInventory(t *testing.T) {
	h := newHarness(t, nil)
	if err := h.svc.Create(context.Background(), createCmd(1), first); err != nil {
		t.Fatal(err)
	}
	other := createCmd(2)
	other.BatchId, other.ClientToken, other.ClusterId = "b2", "tok2", "another-cluster"
	if err := h.svc.Create(context.Background(), other, first); err != nil {
		t.Fatal(err)
	}
	h.events.Reset()
	l := &cloudv1.ListInventory{Target: target(), ClusterId: "c1", RequestId: "r1"}
	if err := h.svc.ListInventory(context.Background(), l, first); err != nil {
		t.Fatalf("ListInventory: %v", err)
	}
	evs := h.events.All()
	equal(t, "events", fmt.Sprint(kinds(evs)), "[inventory]")
	equal(t, "msg id", evs[0].MsgID, "inventory.r1")
	inv := evs[0].Event.GetInventory()
	equal(t, "request", inv.GetRequestId(), "r1")
	equal(t, "items", len(inv.GetItems()), 1)
	item := inv.GetItems()[0]
	equal(t, "instance", item.GetInstanceId(), "i000")
	equal(t, "group", item.GetGroup(), "g1")
	// Lifecycle maps a VM of a batch whose create result is outstanding
	// back to its records by the batch tag: without it, such a VM is an
	// orphan.
	equal(t, "batch", item.GetBatchId(), "b1")
	equal(t, "zone", item.GetZone(), "fake-zone-1")
	// The create watched its VM until it ran.
	equal(t, "state", item.GetState(), cloudv1.CloudState_CLOUD_STATE_RUNNING)
	if item.GetCloudId() == "" || item.GetCreatedAt() == nil {
		t.Fatalf("item lacks cloud id or creation time: %v", item)
	}
}

func TestListInventoryFailures(t *testing.T) {
	h := newHarness(t, nil)
	l := &cloudv1.ListInventory{Target: target(), ClusterId: "c1", RequestId: "r1"}
	h.cloud.FailNext(fake.OpList, ports.NewTransientError("InternalError", "boom"), ports.NewTransientError("InternalError", "boom"))
	if err := h.svc.ListInventory(context.Background(), l, first); err == nil {
		t.Fatal("transient failure on the first delivery was not left to a redelivery")
	}
	if err := h.svc.ListInventory(context.Background(), l, last); err != nil {
		t.Fatalf("last delivery: %v", err)
	}
	evs := h.events.All()
	equal(t, "events", fmt.Sprint(kinds(evs)), "[inventory]")
	equal(t, "error kind", evs[0].Event.GetInventory().GetError().GetKind(), cloudv1.ErrorKind_ERROR_KIND_TRANSIENT)
}

func TestWatchPollsFastWhileVMsAreLikelyToChange(t *testing.T) {
	o := app.Options{PollInterval: 3 * time.Second, FastPollInterval: time.Second, FastPollFor: time.Minute}
	capped := app.Options{PollInterval: 500 * time.Millisecond, FastPollInterval: time.Second, FastPollFor: time.Minute}
	never := app.Options{PollInterval: 3 * time.Second, FastPollInterval: time.Second}
	for _, tc := range []struct {
		name        string
		o           app.Options
		sinceChange time.Duration
		want        time.Duration
	}{
		{"new watch", o, 0, time.Second},
		{"booting", o, 59 * time.Second, time.Second},
		{"quiet for the fast window", o, time.Minute, 3 * time.Second},
		{"quiet for long", o, time.Hour, 3 * time.Second},
		{"fast never slower than the interval", capped, 0, 500 * time.Millisecond},
		{"no fast window", never, 0, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.o.PollAfter(tc.sinceChange); got != tc.want {
				t.Errorf("PollAfter(%s) = %s, want %s", tc.sinceChange, got, tc.want)
			}
		})
	}
}

// Watches started apart poll at the same instants: rounds fall on
// multiples of the pause on the wall clock.
func TestWatchRoundsAreAlignedToTheClock(t *testing.T) {
	o := app.Options{PollInterval: 3 * time.Second, FastPollInterval: time.Second, FastPollFor: time.Minute}
	base := time.Date(2030, 1, 1, 0, 0, 10, 0, time.UTC)
	for _, tc := range []struct {
		name            string
		now, lastChange time.Time
		want            time.Duration
	}{
		{"fast, just after a round", base.Add(300 * time.Millisecond), base, 700 * time.Millisecond},
		{"fast, on a round", base.Add(time.Second), base, time.Second},
		{"slow: 130.5 s past the minute, next multiple of 3 s at 132 s", base.Add(2*time.Minute + 500*time.Millisecond), base, 1500 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := o.UntilNextRound(tc.now, tc.lastChange); got != tc.want {
				t.Errorf("UntilNextRound = %s, want %s", got, tc.want)
			}
		})
	}
}
