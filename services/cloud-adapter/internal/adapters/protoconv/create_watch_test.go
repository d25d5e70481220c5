package protoconv_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/fake"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/app"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// A create command watches the VMs it created, in the same command: the
// cloud ids first (InstancesCreated), then each VM's observations under
// the instance's attempt, as a watch command publishes them.
func TestCreateWatchesItsVMsAfterPublishingTheirCloudIDs(t *testing.T) {
	h := newHarness(t, nil)
	if err := h.svc.Create(context.Background(), createCmd(2), first); err != nil {
		t.Fatalf("Create: %v", err)
	}
	evs := h.events.All()
	equal(t, "events", fmt.Sprint(kinds(evs)), "[created observed observed observed observed]")
	want := "[i000=CLOUD_STATE_PENDING i001=CLOUD_STATE_PENDING i000=CLOUD_STATE_RUNNING i001=CLOUD_STATE_RUNNING]"
	equal(t, "observations", fmt.Sprint(observed(evs)), want)
	cloudIDs := map[string]string{}
	for _, r := range evs[0].Event.GetCreated().GetInstances() {
		cloudIDs[r.GetInstanceId()] = r.GetCloudId()
	}
	for _, p := range evs[1:] {
		ref := p.Event.GetObserved().GetInstance()
		equal(t, "observed cloud id of "+ref.GetInstanceId(), ref.GetCloudId(), cloudIDs[ref.GetInstanceId()])
		equal(t, "observed attempt", ref.GetAttempt(), uint32(1))
	}
	equal(t, "msg id", evs[3].MsgID, "observed.i000.1.RUNNING")
}

// killAtDescribe is a cloud whose first Describe finds the handler killed:
// it cancels the command's context, as a crashing replica would lose it.
type killAtDescribe struct {
	*fake.Cloud
	kill   context.CancelFunc
	killed bool
}

func (k *killAtDescribe) Describe(ctx context.Context, t ports.Target, ids []string) ([]domain.Status, error) {
	if !k.killed {
		k.killed = true
		k.kill()
		return nil, ctx.Err()
	}
	return k.Cloud.Describe(ctx, t, ids)
}

// A create whose handler dies after publishing the cloud ids, before its
// watch saw anything, is redelivered: the same ClientTokens return the same
// VMs (none leaks, none is created twice) and the redelivery watches
// exactly the requested VMs until they run.
func TestCreateKilledAfterCreatedIsWatchedToRunningOnRedelivery(t *testing.T) {
	h := newHarness(t, nil)
	ctx, kill := context.WithCancel(context.Background())
	defer kill()
	dying := app.New(map[string]ports.Cloud{provider: &killAtDescribe{Cloud: h.cloud, kill: kill}}, h.events.Events, app.Options{
		PollInterval: time.Millisecond, MaxWatch: time.Hour, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	const n = 150 // two cloud calls
	cmd := createCmd(n)
	err := wireService{dying}.Create(ctx, cmd, first)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("killed Create = %v, want context.Canceled (left to a redelivery)", err)
	}
	equal(t, "events before the kill", fmt.Sprint(kinds(h.events.All())), "[created created]")

	if err := h.svc.Create(context.Background(), cmd, app.Delivery{Attempt: 2}); err != nil {
		t.Fatalf("redelivery: %v", err)
	}
	equal(t, "VMs", len(h.cloud.VMs()), n)
	calls := h.cloud.Calls().Create
	equal(t, "create calls", len(calls), 4)
	for i, c := range calls {
		equal(t, "token of call", c.ClientToken, fmt.Sprintf("tok-%d", i%2))
	}
	evs := h.events.All()
	equal(t, "created events", fmt.Sprint(results(evs)), "[created created]")
	running := map[string]int{}
	for _, o := range observed(evs) {
		if id, ok := strings.CutSuffix(o, "="+cloudv1.CloudState_CLOUD_STATE_RUNNING.String()); ok {
			running[id]++
		}
	}
	equal(t, "instances watched to RUNNING", len(running), n)
	for i := range n {
		equal(t, "RUNNING observations of an instance", running[fmt.Sprintf("i%03d", i)], 1)
	}
}
