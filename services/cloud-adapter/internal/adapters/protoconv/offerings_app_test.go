package protoconv_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/fake"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/protoconv"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/app"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// Offerings are written into the parameters by the provider's rules
// (cloudspec), so these tests drive the fake cloud as a Tencent account:
// the fake reads Placement.Zone and InstanceType back out of them.
var (
	offA = &cloudv1.Offering{Zone: "ap-test-1", SubnetId: "subnet-a", InstanceType: "S5.MEDIUM2", CapacityType: cloudspec.CapacityOnDemand}
	offB = &cloudv1.Offering{Zone: "ap-test-2", SubnetId: "subnet-b", InstanceType: "S5.MEDIUM2", CapacityType: cloudspec.CapacityOnDemand}
	offC = &cloudv1.Offering{Zone: "ap-test-2", SubnetId: "subnet-b", InstanceType: "SA2.MEDIUM2", CapacityType: cloudspec.CapacityOnDemand}

	soldOut     = ports.NewCapacityError("ResourceInsufficient.SpecifiedInstanceType", "sold out")
	launchStock = &domain.LaunchError{Kind: ports.ErrorKindCapacity, Code: "ResourceInsufficient.SpecifiedInstanceType",
		Message: "The specified type of instance is sold out"}
)

// offeringMetrics records what the application counted.
type offeringMetrics struct {
	mu                          sync.Mutex
	marked                      []string
	fallbacks, exhausted, relau int
}

func (m *offeringMetrics) OfferingMarked(provider string, o domain.Offering) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.marked = append(m.marked, provider+"/"+o.Zone+"/"+o.InstanceType+"/"+o.CapacityType)
}

func (m *offeringMetrics) OfferingFallback(_ string, relaunch bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.fallbacks++
	if relaunch {
		m.relau++
	}
}

func (m *offeringMetrics) OfferingsExhausted(string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.exhausted++
}

type offeringHarness struct {
	*harness
	marks   *fake.Marks
	metrics *offeringMetrics
	clock   *stepClock
}

const offeringTTL = 3 * time.Minute

func newOfferingHarness(t *testing.T) *offeringHarness {
	t.Helper()
	h := &offeringHarness{
		harness: &harness{cloud: fake.NewCloud(), events: wireEvents{fake.NewEvents()}, stop: make(chan struct{})},
		marks:   fake.NewMarks(),
		metrics: &offeringMetrics{},
		clock:   &stepClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC), step: time.Second},
	}
	h.svc = wireService{app.New(map[string]ports.Cloud{cloudspec.Tencent: h.cloud}, h.events.Events, app.Options{
		PollInterval:           time.Millisecond,
		MaxWatch:               time.Hour,
		NotFoundGrace:          10 * time.Second,
		Stopping:               h.stop,
		Now:                    h.clock.Now,
		Logger:                 slog.New(slog.NewTextHandler(io.Discard, nil)),
		Marks:                  h.marks,
		OfferingUnavailableTTL: offeringTTL,
		Metrics:                h.metrics,
	})}
	return h
}

func tencentTarget() *cloudv1.Target {
	return &cloudv1.Target{Provider: cloudspec.Tencent, Account: "acct", Region: "ap-test"}
}

func offeringCmd(n int, offs ...*cloudv1.Offering) *cloudv1.CreateInstances {
	return &cloudv1.CreateInstances{
		BatchId: "b1", ClientToken: "tok", Target: tencentTarget(), TemplateName: "small",
		ParametersJson: `{"InstanceType":"S5.MEDIUM2","Placement":{"Zone":"ap-test-1"},"VirtualPrivateCloud":{"VpcId":"vpc-1","SubnetId":"subnet-a"}}`,
		Instances:      refs(n, false), ClusterId: "c1", Group: "g1", Zone: "ap-test-1", InstanceType: "S5.MEDIUM2",
		Offerings: offs,
	}
}

func dom(o *cloudv1.Offering) domain.Offering { return protoconv.Offering(o) }

func place(o *cloudv1.Offering) fake.Place {
	return fake.Place{Zone: o.GetZone(), InstanceType: o.GetInstanceType()}
}

// createdEvents are the InstancesCreated events stored, in order.
func createdEvents(evs []published) []published {
	var out []published
	for _, p := range evs {
		if p.Event.GetCreated() != nil {
			out = append(out, p)
		}
	}
	return out
}

func vmsIn(h *offeringHarness, zone string) []fake.VM {
	var out []fake.VM
	for _, v := range h.cloud.VMs() {
		if v.Zone == zone {
			out = append(out, v)
		}
	}
	return out
}

func TestOfferingsZoneSoldOutLandsOnTheNext(t *testing.T) {
	h := newOfferingHarness(t)
	h.cloud.SoldOut(offA.Zone, offA.InstanceType, soldOut)
	if err := h.svc.Create(context.Background(), offeringCmd(3, offA, offB), first); err != nil {
		t.Fatalf("Create: %v", err)
	}
	calls := h.cloud.Calls().Create
	equal(t, "create calls", len(calls), 2)
	for i, o := range []*cloudv1.Offering{offA, offB} {
		equal(t, "place of call", fake.PlaceOf(calls[i].Parameters), place(o))
		equal(t, "token of call", calls[i].ClientToken, domain.OfferingToken("tok", dom(o), ""))
		equal(t, "count of call", calls[i].Count, 3)
	}
	equal(t, "events", fmt.Sprint(results(h.events.All())), "[created]")
	created := createdEvents(h.events.All())[0]
	equal(t, "msg id", created.MsgID, "created.b1.1.o1")
	equal(t, "offering", created.Event.GetCreated().GetOffering().String(), offB.String())
	equal(t, "VMs in zone B", len(vmsIn(h, offB.Zone)), 3)
	equal(t, "VMs", len(h.cloud.VMs()), 3)

	marks := h.marks.All()
	equal(t, "marks", len(marks), 1)
	m := marks[0]
	want := dom(offA)
	want.SubnetID = ""
	equal(t, "marked offering", m.Offering, want)
	equal(t, "marked target", m.Target, domain.Target{Provider: cloudspec.Tencent, Account: "acct", Region: "ap-test"})
	equal(t, "mark ttl", m.Until.Sub(m.At), offeringTTL)
	equal(t, "mark reason", m.Reason.Code, soldOut.Code)
	equal(t, "metrics", fmt.Sprint(h.metrics.marked, h.metrics.fallbacks, h.metrics.exhausted),
		"["+cloudspec.Tencent+"/ap-test-1/S5.MEDIUM2/on-demand] 1 0")
}

func TestOfferingsParametersCarryTheOffering(t *testing.T) {
	h := newOfferingHarness(t)
	spot := &cloudv1.Offering{Zone: "ap-test-3", SubnetId: "subnet-c", InstanceType: "S5.MEDIUM2", CapacityType: cloudspec.CapacitySpot}
	cmd := offeringCmd(1, spot)
	cmd.MaxPrice = "0.5"
	if err := h.svc.Create(context.Background(), cmd, first); err != nil {
		t.Fatalf("Create: %v", err)
	}
	p, ferrs := mustTencent(t).ApplyOffering(cmd.ParametersJson, "0.5", cloudspec.Offering{
		Zone: spot.Zone, SubnetID: spot.SubnetId, InstanceType: spot.InstanceType, CapacityType: spot.CapacityType,
	})
	if ferrs != nil {
		t.Fatal(ferrs)
	}
	equal(t, "parameters", h.cloud.Calls().Create[0].Parameters, p)
}

func mustTencent(t *testing.T) cloudspec.Provider {
	t.Helper()
	p, ok := cloudspec.Lookup(cloudspec.Tencent)
	if !ok {
		t.Fatal("no tencent provider")
	}
	return p
}

func TestOfferingsLaterChunksSkipTheMarkedOffering(t *testing.T) {
	h := newOfferingHarness(t)
	h.cloud.SoldOut(offA.Zone, offA.InstanceType, soldOut)
	if err := h.svc.Create(context.Background(), offeringCmd(150, offA, offB), first); err != nil {
		t.Fatalf("Create: %v", err)
	}
	var places []string
	for _, c := range h.cloud.Calls().Create {
		places = append(places, fake.PlaceOf(c.Parameters).Zone)
	}
	// Chunk 0 tries A then B; chunk 1 skips A, marked by chunk 0.
	equal(t, "calls", fmt.Sprint(places), "[ap-test-1 ap-test-2 ap-test-2]")
	var ids []string
	for _, p := range createdEvents(h.events.All()) {
		ids = append(ids, p.MsgID)
	}
	equal(t, "created ids", fmt.Sprint(ids), "[created.b1.1.0.o1 created.b1.1.1.o1]")
	equal(t, "VMs in zone B", len(vmsIn(h, offB.Zone)), 150)
}

func TestOfferingsRedeliveryAfterACrashCreatesNoSecondVM(t *testing.T) {
	lost := errors.New("nats: connection lost")
	t.Run("first offering sold out, crash after the fallback's call", func(t *testing.T) {
		h := newOfferingHarness(t)
		h.cloud.SoldOut(offA.Zone, offA.InstanceType, soldOut)
		h.events.FailNext(lost)
		cmd := offeringCmd(3, offA, offB)
		if err := h.svc.Create(context.Background(), cmd, first); err == nil {
			t.Fatal("Create succeeded although its InstancesCreated was not published")
		}
		equal(t, "VMs after the crash", len(h.cloud.VMs()), 3)
		if err := h.svc.Create(context.Background(), cmd, app.Delivery{Attempt: 2}); err != nil {
			t.Fatalf("redelivery: %v", err)
		}
		equal(t, "VMs", len(h.cloud.VMs()), 3)
		equal(t, "VMs in zone B", len(vmsIn(h, offB.Zone)), 3)
		equal(t, "events", fmt.Sprint(results(h.events.All())), "[created]")
	})
	t.Run("created on the first offering, marked by someone else before the redelivery", func(t *testing.T) {
		h := newOfferingHarness(t)
		h.events.FailNext(lost)
		cmd := offeringCmd(3, offA, offB)
		if err := h.svc.Create(context.Background(), cmd, first); err == nil {
			t.Fatal("Create succeeded although its InstancesCreated was not published")
		}
		// Zone A runs out meanwhile and another command marks it.
		h.cloud.SoldOut(offA.Zone, offA.InstanceType, soldOut)
		now := h.clock.Now()
		if err := h.marks.Mark(context.Background(), domain.OfferingMark{Target: protoconv.Target(tencentTarget()),
			Offering: dom(offA), At: now, Until: now.Add(time.Hour)}); err != nil {
			t.Fatal(err)
		}
		if err := h.svc.Create(context.Background(), cmd, app.Delivery{Attempt: 2}); err != nil {
			t.Fatalf("redelivery: %v", err)
		}
		equal(t, "VMs", len(h.cloud.VMs()), 3)
		equal(t, "VMs in zone A", len(vmsIn(h, offA.Zone)), 3)
		created := createdEvents(h.events.All())
		equal(t, "created events", len(created), 1)
		equal(t, "offering", created[0].Event.GetCreated().GetOffering().GetZone(), offA.Zone)
	})
}

func TestOfferingsAllSoldOutFailOnceWithCapacity(t *testing.T) {
	h := newOfferingHarness(t)
	for _, o := range []*cloudv1.Offering{offA, offB, offC} {
		h.cloud.SoldOut(o.Zone, o.InstanceType, soldOut)
	}
	if err := h.svc.Create(context.Background(), offeringCmd(150, offA, offB, offC), first); err != nil {
		t.Fatalf("Create: %v", err)
	}
	equal(t, "create calls", len(h.cloud.Calls().Create), 3)
	evs := h.events.All()
	equal(t, "events", fmt.Sprint(kinds(evs)), "[create_failed]")
	equal(t, "msg id", evs[0].MsgID, "create_failed.b1.1.0")
	f := evs[0].Event.GetCreateFailed()
	equal(t, "failed instances", len(f.GetInstances()), 150)
	equal(t, "kind", f.GetError().GetKind(), cloudv1.ErrorKind_ERROR_KIND_CAPACITY)
	equal(t, "code", f.GetError().GetCode(), "OfferingsExhausted")
	for _, o := range []*cloudv1.Offering{offA, offB, offC} {
		if want := o.Zone + "/" + o.InstanceType + "/on-demand " + soldOut.Code; !strings.Contains(f.GetError().GetMessage(), want) {
			t.Errorf("message %q does not name %q", f.GetError().GetMessage(), want)
		}
	}
	equal(t, "marks", len(h.marks.All()), 3)
	equal(t, "VMs", len(h.cloud.VMs()), 0)
	equal(t, "exhausted", h.metrics.exhausted, 1)
}

func TestOfferingsLiveMarkIsSkippedWithoutACloudCall(t *testing.T) {
	h := newOfferingHarness(t)
	now := h.clock.Now()
	if err := h.marks.Mark(context.Background(), domain.OfferingMark{Target: protoconv.Target(tencentTarget()),
		Offering: dom(offA), At: now, Until: now.Add(time.Hour), Reason: soldOut}); err != nil {
		t.Fatal(err)
	}
	puts := h.marks.Puts()
	if err := h.svc.Create(context.Background(), offeringCmd(2, offA, offB), first); err != nil {
		t.Fatalf("Create: %v", err)
	}
	calls := h.cloud.Calls().Create
	equal(t, "create calls", len(calls), 1)
	equal(t, "place", fake.PlaceOf(calls[0].Parameters), place(offB))
	equal(t, "marks put", h.marks.Puts(), puts)
	equal(t, "fallbacks", h.metrics.fallbacks, 1)

	t.Run("an expired mark is not", func(t *testing.T) {
		h := newOfferingHarness(t)
		now := h.clock.Now()
		if err := h.marks.Mark(context.Background(), domain.OfferingMark{Target: protoconv.Target(tencentTarget()),
			Offering: dom(offA), At: now.Add(-time.Hour), Until: now}); err != nil {
			t.Fatal(err)
		}
		if err := h.svc.Create(context.Background(), offeringCmd(2, offA, offB), first); err != nil {
			t.Fatalf("Create: %v", err)
		}
		calls := h.cloud.Calls().Create
		equal(t, "create calls", len(calls), 1)
		equal(t, "place", fake.PlaceOf(calls[0].Parameters), place(offA))
	})
	t.Run("every offering marked: capacity without a cloud call", func(t *testing.T) {
		h := newOfferingHarness(t)
		now := h.clock.Now()
		for _, o := range []*cloudv1.Offering{offA, offB} {
			if err := h.marks.Mark(context.Background(), domain.OfferingMark{Target: protoconv.Target(tencentTarget()),
				Offering: dom(o), At: now, Until: now.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := h.svc.Create(context.Background(), offeringCmd(2, offA, offB), first); err != nil {
			t.Fatalf("Create: %v", err)
		}
		equal(t, "create calls", len(h.cloud.Calls().Create), 0)
		equal(t, "events", fmt.Sprint(kinds(h.events.All())), "[create_failed]")
		equal(t, "kind", h.events.All()[0].Event.GetCreateFailed().GetError().GetKind(), cloudv1.ErrorKind_ERROR_KIND_CAPACITY)
	})
}

func TestOfferingsMarkWriteFailureRedelivers(t *testing.T) {
	h := newOfferingHarness(t)
	h.cloud.SoldOut(offA.Zone, offA.InstanceType, soldOut)
	h.marks.FailNext(errors.New("nats: timeout"))
	if err := h.svc.Create(context.Background(), offeringCmd(2, offA, offB), first); err == nil {
		t.Fatal("Create succeeded although the mark was not stored")
	}
	equal(t, "create calls", len(h.cloud.Calls().Create), 1)
	equal(t, "events", len(h.events.All()), 0)
	if err := h.svc.Create(context.Background(), offeringCmd(2, offA, offB), app.Delivery{Attempt: 2}); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	equal(t, "VMs in zone B", len(vmsIn(h, offB.Zone)), 2)
	equal(t, "marks", len(h.marks.All()), 1)
}

func TestOfferingsNonCapacityFailureIsNotAFallback(t *testing.T) {
	h := newOfferingHarness(t)
	h.cloud.FailNext(fake.OpCreate, ports.NewInvalidParametersError("InvalidParameterValue", "bad image"))
	if err := h.svc.Create(context.Background(), offeringCmd(2, offA, offB), first); err != nil {
		t.Fatalf("Create: %v", err)
	}
	equal(t, "create calls", len(h.cloud.Calls().Create), 1)
	equal(t, "events", fmt.Sprint(kinds(h.events.All())), "[create_failed]")
	equal(t, "code", h.events.All()[0].Event.GetCreateFailed().GetError().GetCode(), "InvalidParameterValue")
	equal(t, "marks", len(h.marks.All()), 0)
}

func TestOfferingsLaunchFailedForCapacityIsRelaunchedElsewhere(t *testing.T) {
	h := newOfferingHarness(t)
	h.cloud.FailLaunchesIn(offA.Zone, offA.InstanceType, launchStock)
	if err := h.svc.Create(context.Background(), offeringCmd(2, offA, offB), first); err != nil {
		t.Fatalf("Create: %v", err)
	}
	evs := h.events.All()
	created := createdEvents(evs)
	equal(t, "created events", len(created), 3)
	equal(t, "first on", created[0].Event.GetCreated().GetOffering().GetZone(), offA.Zone)
	var relaunched []string
	newIDs := map[string]string{}
	for _, p := range created[1:] {
		c := p.Event.GetCreated()
		equal(t, "relaunch offering", c.GetOffering().GetZone(), offB.Zone)
		equal(t, "relaunch instances", len(c.GetInstances()), 1)
		r := c.GetInstances()[0]
		relaunched = append(relaunched, r.GetInstanceId())
		newIDs[r.GetInstanceId()] = r.GetCloudId()
		equal(t, "msg id", p.MsgID, "created.b1.1.relaunch."+r.GetInstanceId()+".o1")
	}
	slices.Sort(relaunched)
	equal(t, "relaunched", fmt.Sprint(relaunched), "[i000 i001]")

	// The VMs of zone A are terminated, the new ones run; no LAUNCH_FAILED
	// reaches lifecycle.
	for _, v := range vmsIn(h, offA.Zone) {
		equal(t, "state of the failed VM "+v.CloudID, v.State, domain.StateTerminating)
	}
	terms := h.cloud.Calls().Terminate
	equal(t, "terminate calls (one at the end of the watch)", len(terms), 1)
	equal(t, "terminated", len(terms[0]), 2)
	running := map[string]string{}
	for _, p := range evs {
		o := p.Event.GetObserved()
		if o == nil {
			continue
		}
		if o.GetState() == cloudv1.CloudState_CLOUD_STATE_LAUNCH_FAILED {
			t.Errorf("a LAUNCH_FAILED was published: %v", o)
		}
		if o.GetState() == cloudv1.CloudState_CLOUD_STATE_RUNNING {
			running[o.GetInstance().GetInstanceId()] = o.GetInstance().GetCloudId()
		}
	}
	equal(t, "running", fmt.Sprint(running), fmt.Sprint(newIDs))
	equal(t, "VMs in zone B", len(vmsIn(h, offB.Zone)), 2)
	equal(t, "marks", len(h.marks.All()), 1)
	equal(t, "relaunch fallbacks", h.metrics.relau, 2)

	// Each relaunch was created with its own token, one VM, tagged with its instance.
	for _, c := range h.cloud.Calls().Create[1:] {
		equal(t, "relaunch count", c.Count, 1)
		var inst string
		for _, tag := range c.Tags {
			if tag.Key == domain.TagInstance {
				inst = tag.Value
			}
		}
		equal(t, "relaunch token", c.ClientToken, domain.OfferingToken("tok", dom(offB), inst))
	}
}

func TestOfferingsLaunchFailedWithNoOfferingLeftIsReported(t *testing.T) {
	h := newOfferingHarness(t)
	h.cloud.FailLaunchesIn(offA.Zone, offA.InstanceType, launchStock)
	h.cloud.FailLaunchesIn(offB.Zone, offB.InstanceType, launchStock)
	if err := h.svc.Create(context.Background(), offeringCmd(1, offA, offB), first); err != nil {
		t.Fatalf("Create: %v", err)
	}
	var failed []*cloudv1.InstanceObserved
	for _, p := range h.events.All() {
		if o := p.Event.GetObserved(); o.GetState() == cloudv1.CloudState_CLOUD_STATE_LAUNCH_FAILED {
			failed = append(failed, o)
			equal(t, "msg id", p.MsgID, "observed.i000.1.LAUNCH_FAILED.o1")
		}
	}
	equal(t, "LAUNCH_FAILED observations", len(failed), 1)
	equal(t, "launch error kind", failed[0].GetLaunchError().GetKind(), cloudv1.ErrorKind_ERROR_KIND_CAPACITY)
	// One relaunch per offering: the first VM on A, one on B, no more.
	equal(t, "create calls", len(h.cloud.Calls().Create), 2)
	equal(t, "VMs", len(h.cloud.VMs()), 2)
	equal(t, "created events", len(createdEvents(h.events.All())), 2)
	equal(t, "B's VM, reported, is left to lifecycle", len(h.cloud.Calls().Terminate), 1)
}

func TestOfferingsLaunchFailedRelaunchIsRepeatable(t *testing.T) {
	// The watch is handed back before the failed VM was terminated: the
	// redelivery relaunches again with the same token, so it gets the same
	// VM back and publishes the same event.
	h := newOfferingHarness(t)
	h.cloud.FailLaunchesIn(offA.Zone, offA.InstanceType, launchStock)
	h.cloud.FailNext(fake.OpTerminate, ports.NewTransientError("InternalError", "try again"))
	cmd := offeringCmd(1, offA, offB)
	if err := h.svc.Create(context.Background(), cmd, first); err == nil {
		t.Fatal("Create succeeded although the failed VM was not terminated")
	}
	if err := h.svc.Create(context.Background(), cmd, app.Delivery{Attempt: 2}); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	equal(t, "VMs", len(h.cloud.VMs()), 2)
	equal(t, "VMs in zone B", len(vmsIn(h, offB.Zone)), 1)
	equal(t, "created events", len(createdEvents(h.events.All())), 2)
	for _, v := range vmsIn(h, offA.Zone) {
		equal(t, "state of the failed VM", v.State, domain.StateTerminating)
	}
}

func TestOfferingsOnTheWire(t *testing.T) {
	cmd := offeringCmd(1, offA, offB)
	cmd.MaxPrice = "0.8"
	c, ok := protoconv.Command(&cloudv1.Command{Body: &cloudv1.Command_Create{Create: cmd}}).(*domain.CreateInstances)
	if !ok {
		t.Fatal("not a create")
	}
	equal(t, "offerings", fmt.Sprint(c.Offerings), fmt.Sprint([]domain.Offering{dom(offA), dom(offB)}))
	equal(t, "subnet", c.Offerings[0].SubnetID, "subnet-a")
	equal(t, "max price", c.MaxPrice, "0.8")
	o := dom(offB)
	ev := protoconv.Event(&domain.InstancesCreated{BatchID: "b1", Offering: &o})
	equal(t, "event offering", ev.GetCreated().GetOffering().String(), offB.String())
	equal(t, "no offering", protoconv.Event(&domain.InstancesCreated{BatchID: "b1"}).GetCreated().GetOffering() == nil, true)
}

// failingEvents fails, once, the first publish fail says to.
type failingEvents struct {
	*fake.Events
	mu     sync.Mutex
	fail   func(msgID string) bool
	failed bool
}

func (e *failingEvents) Publish(ctx context.Context, msgID string, ev domain.Event) error {
	e.mu.Lock()
	if !e.failed && e.fail(msgID) {
		e.failed = true
		e.mu.Unlock()
		return errors.New("nats: connection lost")
	}
	e.mu.Unlock()
	return e.Events.Publish(ctx, msgID, ev)
}

func TestOfferingsRelaunchedVMIsWatchedAgainAfterARedelivery(t *testing.T) {
	// The command is redelivered after the relaunch (here a publish of the
	// new VM's observation fails; a watch handed back at shutdown is the
	// same): the failed VM is still LAUNCH_FAILED, so the redelivery
	// relaunches it again, gets the same new VM from its token, watches it
	// to RUNNING, and only then terminates the failed one.
	h := newOfferingHarness(t)
	events := &failingEvents{Events: h.events.Events, fail: func(id string) bool { return strings.HasSuffix(id, ".RUNNING.o1") }}
	h.svc = wireService{app.New(map[string]ports.Cloud{cloudspec.Tencent: h.cloud}, events, app.Options{
		PollInterval: time.Millisecond, MaxWatch: time.Hour, NotFoundGrace: 10 * time.Second, Stopping: h.stop,
		Now: h.clock.Now, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Marks: h.marks,
	})}
	h.cloud.FailLaunchesIn(offA.Zone, offA.InstanceType, launchStock)
	cmd := offeringCmd(1, offA, offB)
	if err := h.svc.Create(context.Background(), cmd, first); err == nil {
		t.Fatal("Create succeeded although an observation was not published")
	}
	equal(t, "terminate calls before the watch ended", len(h.cloud.Calls().Terminate), 0)
	if err := h.svc.Create(context.Background(), cmd, app.Delivery{Attempt: 2}); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	equal(t, "VMs", len(h.cloud.VMs()), 2)
	b := vmsIn(h, offB.Zone)
	equal(t, "VMs in zone B", len(b), 1)
	var running []string
	for _, p := range h.events.All() {
		if o := p.Event.GetObserved(); o.GetState() == cloudv1.CloudState_CLOUD_STATE_RUNNING {
			running = append(running, o.GetInstance().GetCloudId())
		}
		if o := p.Event.GetObserved(); o.GetState() == cloudv1.CloudState_CLOUD_STATE_TERMINATING {
			t.Errorf("the failed VM's termination was reported: %v", o)
		}
	}
	equal(t, "running", fmt.Sprint(running), fmt.Sprint([]string{b[0].CloudID}))
	equal(t, "created events", len(createdEvents(h.events.All())), 2)
	for _, v := range vmsIn(h, offA.Zone) {
		equal(t, "state of the failed VM", v.State, domain.StateTerminating)
	}
}
