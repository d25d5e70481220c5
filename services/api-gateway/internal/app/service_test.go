package app_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/libs/providerid"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/natsreq"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/ports"
)

type fixture struct {
	rm  *app.ReadModel
	lc  *natsreq.Fake
	svc *app.Service
	rev uint64
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{rm: app.NewReadModel(), lc: &natsreq.Fake{}}
	f.svc = app.NewService(f.rm, f.lc, app.Config{OpTimeout: 2 * time.Second, GPULabel: "nodesmith.io/gpu-type"}, nil)
	f.rm.MarkSynced(app.BucketGroups, nil)
	f.rm.MarkSynced(app.BucketInstances, nil)
	f.rm.MarkSynced(app.BucketCatalog, nil)
	return f
}

func (f *fixture) next() uint64 { f.rev++; return f.rev }

func (f *fixture) group(id string, minSize, maxSize, target int32) *domain.NodeGroup {
	g := &domain.NodeGroup{
		ID: id, MinSize: minSize, MaxSize: maxSize, TargetSize: target,
		InstanceTemplate: &domain.InstanceTemplate{HourlyPrice: 0.4},
		NodeTemplate:     &domain.NodeTemplate{Capacity: map[string]string{"cpu": "4"}},
	}
	f.rm.PutGroup(id, f.next(), g)
	return g
}

func (f *fixture) instance(group, id string, st domain.InstanceState, mutate ...func(*domain.Instance)) {
	in := &domain.Instance{ID: id, Group: group, State: st, ProviderID: providerid.Placeholder(group, id)}
	for _, m := range mutate {
		m(in)
	}
	f.rm.PutInstance(group+"."+id, f.next(), in)
}

func codeOf(err error) domain.Code { return domain.CodeOf(err) }

func TestReadsFailUntilSynced(t *testing.T) {
	svc := app.NewService(app.NewReadModel(), &natsreq.Fake{}, app.Config{GPULabel: "x"}, nil)
	checks := map[string]error{
		"Refresh": svc.Refresh(),
		"NodeGroups": func() error {
			_, err := svc.NodeGroups()
			return err
		}(),
		"GroupForNode": func() error {
			_, _, err := svc.GroupForNode(app.NodeRef{Name: "n"})
			return err
		}(),
		"TargetSize": func() error {
			_, err := svc.TargetSize("g")
			return err
		}(),
	}
	for name, err := range checks {
		if codeOf(err) != contract.CodeUnavailable {
			t.Errorf("%s before sync: %v, want unavailable", name, err)
		}
	}
}

func TestNodesReportsWhatCountsTowardTheTarget(t *testing.T) {
	f := newFixture(t)
	f.group("g", 0, 10, 4)
	f.instance("g", "pending", domain.StatePending)
	f.instance("g", "joined", domain.StateJoined)
	f.instance("g", "running", domain.StateRunning, func(in *domain.Instance) {
		in.ProviderID = "tencentcloud:///ap-1/ins-1"
	})
	f.instance("g", "draining", domain.StatePendingDeletion)
	f.instance("g", "deleted", domain.StateDeleted)
	f.instance("g", "nostock", domain.StateCreating, func(in *domain.Instance) {
		in.CreationFailed = true
		in.LastError = &domain.ErrorInfo{Code: "ResourceInsufficient.SpecifiedInstanceType", Message: "sold out", Class: 1}
	})
	f.instance("g", "bad", domain.StatePending, func(in *domain.Instance) { in.CreationFailed = true })
	f.instance("other", "x", domain.StateRunning)

	got, err := f.svc.Nodes("g")
	if err != nil {
		t.Fatal(err)
	}
	slices.SortFunc(got, func(a, b app.CAInstance) int {
		if a.ID < b.ID {
			return -1
		}
		return 1
	})
	want := []app.CAInstance{
		{ID: "nodesmith:///g/bad", State: domain.CAStateCreating, ErrorCode: domain.CreationFailedCode, ErrorMessage: "instance creation failed", ErrorClass: 99},
		{ID: "nodesmith:///g/draining", State: domain.CAStateDeleting},
		{ID: "nodesmith:///g/joined", State: domain.CAStateCreating},
		{ID: "nodesmith:///g/nostock", State: domain.CAStateCreating, ErrorCode: "ResourceInsufficient.SpecifiedInstanceType", ErrorMessage: "sold out", ErrorClass: 1},
		{ID: "nodesmith:///g/pending", State: domain.CAStateCreating},
		{ID: "tencentcloud:///ap-1/ins-1", State: domain.CAStateRunning},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Nodes:\n got %+v\nwant %+v", got, want)
	}
	if _, err := f.svc.Nodes("nope"); codeOf(err) != contract.CodeNotFound {
		t.Errorf("unknown group: %v", err)
	}
}

// applyLater answers like lifecycle: it returns the revisions it will
// write, and the write reaches the read model only afterwards (as the KV
// watch would deliver it).
func (f *fixture) applyLater(t *testing.T, apply func(rev uint64)) {
	f.lc.Handle = func(ctx context.Context, req ports.Request) (ports.Revisions, error) {
		rev := f.rev + 1
		go func() {
			time.Sleep(20 * time.Millisecond) // the watch's delivery delay, not an assertion
			apply(rev)
		}()
		return ports.Revisions{Groups: rev}, nil
	}
}

func TestIncreaseSizeIsVisibleOnReturn(t *testing.T) {
	f := newFixture(t)
	g := f.group("g", 0, 10, 2)
	f.applyLater(t, func(rev uint64) {
		cp := *g
		upd := &cp
		upd.TargetSize = 5
		f.rm.PutGroup("g", rev, upd)
	})
	if err := f.svc.IncreaseSize(context.Background(), "g", 3); err != nil {
		t.Fatal(err)
	}
	if n, _ := f.svc.TargetSize("g"); n != 5 {
		t.Fatalf("TargetSize right after IncreaseSize = %d, want 5", n)
	}
	calls := f.lc.Calls()
	if len(calls) != 1 || calls[0].Op != (ports.IncreaseSize{Group: "g", Delta: 3}) {
		t.Fatalf("lifecycle calls: %v", calls)
	}
	// One request id per call, so lifecycle can deduplicate its retries.
	if err := f.svc.IncreaseSize(context.Background(), "g", 1); err != nil {
		t.Fatal(err)
	}
	calls = f.lc.Calls()
	if id := calls[0].ID; len(calls) != 2 || id == "" || calls[1].ID == "" || calls[1].ID == id {
		t.Fatalf("request ids of two calls: %q, %q; want two different non-empty ids", id, calls[len(calls)-1].ID)
	}
}

func TestMutationsValidateBeforeCallingLifecycle(t *testing.T) {
	f := newFixture(t)
	f.group("g", 0, 10, 2)
	f.group("h", 0, 10, 1)
	f.instance("h", "i-h", domain.StateRunning)
	ctx := context.Background()
	tests := []struct {
		name string
		call func() error
		code domain.Code
	}{
		{"increase zero", func() error { return f.svc.IncreaseSize(ctx, "g", 0) }, contract.CodeInvalidArgument},
		{"increase negative", func() error { return f.svc.IncreaseSize(ctx, "g", -1) }, contract.CodeInvalidArgument},
		{"increase empty id", func() error { return f.svc.IncreaseSize(ctx, "", 1) }, contract.CodeInvalidArgument},
		{"increase unknown group", func() error { return f.svc.IncreaseSize(ctx, "nope", 1) }, contract.CodeNotFound},
		{"decrease positive", func() error { return f.svc.DecreaseTargetSize(ctx, "g", 1) }, contract.CodeInvalidArgument},
		{"decrease zero", func() error { return f.svc.DecreaseTargetSize(ctx, "g", 0) }, contract.CodeInvalidArgument},
		{"delete no nodes", func() error { return f.svc.DeleteNodes(ctx, "g", nil) }, contract.CodeInvalidArgument},
		{"delete nameless node", func() error { return f.svc.DeleteNodes(ctx, "g", []app.NodeRef{{}}) }, contract.CodeInvalidArgument},
		{"delete another group's node", func() error {
			return f.svc.DeleteNodes(ctx, "g", []app.NodeRef{{ProviderID: "nodesmith:///h/i-h", Name: "nodesmith:///h/i-h"}})
		}, contract.CodeInvalidArgument},
		{"scale outside bounds", func() error { _, err := f.svc.SetTargetSize(ctx, "g", 11); return err }, contract.CodeInvalidArgument},
		{"action on unknown instance", func() error {
			_, err := f.svc.InstanceAction(ctx, "nope", ports.ActionRetry)
			return err
		}, contract.CodeNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.call(); codeOf(err) != tt.code {
				t.Fatalf("err = %v, want %v", err, tt.code)
			}
		})
	}
	if n := len(f.lc.Calls()); n != 0 {
		t.Fatalf("lifecycle was called %d times for invalid input", n)
	}
}

func TestLifecycleErrorsPassThrough(t *testing.T) {
	f := newFixture(t)
	f.group("g", 0, 10, 2)
	f.lc.FailNext(
		domain.Errorf(contract.CodeFailedPrecondition, "only 0 instances are not yet nodes"),
		errors.New("boom"),
	)
	err := f.svc.DecreaseTargetSize(context.Background(), "g", -1)
	if codeOf(err) != contract.CodeFailedPrecondition || domain.MessageOf(err) != "only 0 instances are not yet nodes" {
		t.Fatalf("lifecycle rejection: %v", err)
	}
	if err := f.svc.IncreaseSize(context.Background(), "g", 1); codeOf(err) != contract.CodeInternal {
		t.Fatalf("untyped adapter error: %v, want internal", err)
	}
}

func TestMutationNotVisibleInTimeIsDeadlineExceeded(t *testing.T) {
	f := newFixture(t)
	f.group("g", 0, 10, 2)
	svc := app.NewService(f.rm, f.lc, app.Config{OpTimeout: 50 * time.Millisecond}, nil)
	f.lc.Handle = func(context.Context, ports.Request) (ports.Revisions, error) {
		return ports.Revisions{Groups: 1000}, nil // a revision the watch never delivers
	}
	err := svc.IncreaseSize(context.Background(), "g", 1)
	if codeOf(err) != contract.CodeDeadlineExceeded {
		t.Fatalf("err = %v, want deadline exceeded", err)
	}
}

func TestDeleteNodesResolvesAndFillsProviderID(t *testing.T) {
	f := newFixture(t)
	f.group("g", 0, 10, 2)
	f.instance("g", "i-1", domain.StateRunning, func(in *domain.Instance) {
		in.ProviderID, in.NodeName = "tencentcloud:///ap-1/ins-1", "node-1"
	})
	err := f.svc.DeleteNodes(context.Background(), "g", []app.NodeRef{
		{Name: "node-1"}, // resolved by name: providerID filled in
		{ProviderID: "nodesmith:///g/unknown", Name: "nodesmith:///g/unknown"}, // unknown here: passed on
	})
	if err != nil {
		t.Fatal(err)
	}
	calls := f.lc.Calls()
	if len(calls) != 1 {
		t.Fatalf("calls: %d", len(calls))
	}
	del, _ := calls[0].Op.(ports.DeleteNodes)
	nodes := del.Nodes
	if len(nodes) != 2 || nodes[0].ProviderID != "tencentcloud:///ap-1/ins-1" || nodes[1].ProviderID != "nodesmith:///g/unknown" {
		t.Fatalf("nodes sent: %v", nodes)
	}
}

func TestOptions(t *testing.T) {
	f := newFixture(t)
	f.group("plain", 0, 1, 0)
	g := f.group("tuned", 0, 1, 0)
	minute, zero := time.Minute, time.Duration(0)
	g.AutoscalingOptions = &domain.PartialOptions{ScaleDownUnneeded: &minute, MaxNodeProvision: &zero}
	f.rm.PutGroup("tuned", f.next(), g)

	if _, err := f.svc.Options("plain", domain.PartialOptions{}); codeOf(err) != contract.CodeUnimplemented {
		t.Fatalf("no options, no defaults: %v", err)
	}
	maxProv := 20 * time.Minute
	opts, err := f.svc.Options("tuned", domain.PartialOptions{MaxNodeProvision: &maxProv})
	if err != nil {
		t.Fatal(err)
	}
	if opts.ScaleDownUnneeded != time.Minute || opts.MaxNodeProvision != maxProv {
		t.Fatalf("options = %+v", opts)
	}
}

func TestPricing(t *testing.T) {
	f := newFixture(t)
	f.group("g", 0, 10, 1)
	f.instance("g", "i-1", domain.StateRunning)
	start := time.Unix(1_700_000_000, 0)
	end := start.Add(3 * time.Hour)
	for _, n := range []app.NodeRef{
		{ProviderID: "nodesmith:///g/i-1"},
		{Name: "template-node-for-g-123", Labels: map[string]string{app.GroupLabel: "g"}},
	} {
		p, err := f.svc.NodePrice(n, start, end)
		if err != nil || fmt.Sprintf("%.4f", p) != "1.2000" {
			t.Errorf("NodePrice(%+v) = %v, %v; want 1.2", n, p, err)
		}
	}
	if _, err := f.svc.NodePrice(app.NodeRef{Name: "control-plane"}, start, end); codeOf(err) != contract.CodeNotFound {
		t.Errorf("unmanaged node: %v", err)
	}
	// 1 CPU of a 4-CPU node at 0.4/h for 3h.
	if p, err := f.svc.PodPrice(1000, start, end); err != nil || fmt.Sprintf("%.4f", p) != "0.3000" {
		t.Errorf("PodPrice = %v, %v; want 0.3", p, err)
	}
}

func TestListInstancesPages(t *testing.T) {
	f := newFixture(t)
	f.group("a", 0, 100, 0)
	f.group("b", 0, 100, 0)
	for i := range 7 {
		f.instance("a", fmt.Sprintf("i-%d", i), domain.StateRunning)
	}
	f.instance("b", "i-x", domain.StatePending)

	var seen []string
	q := app.InstanceQuery{Group: "a", Limit: 3}
	for pages := 0; ; pages++ {
		if pages > 5 {
			t.Fatal("pagination does not end")
		}
		page, err := f.svc.ListInstances(q)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range page.Items {
			seen = append(seen, v.Key)
		}
		if page.Next == "" {
			break
		}
		q.After = page.Next
	}
	want := []string{"a.i-0", "a.i-1", "a.i-2", "a.i-3", "a.i-4", "a.i-5", "a.i-6"}
	if !slices.Equal(seen, want) {
		t.Fatalf("pages = %v, want %v", seen, want)
	}
	page, err := f.svc.ListInstances(app.InstanceQuery{States: []domain.InstanceState{domain.StatePending}, Limit: 10})
	if err != nil || len(page.Items) != 1 || page.Items[0].Key != "b.i-x" {
		t.Fatalf("state filter: %v %v", page.Items, err)
	}
	if _, err := f.svc.ListInstances(app.InstanceQuery{Limit: 0}); codeOf(err) != contract.CodeInvalidArgument {
		t.Fatalf("limit 0: %v", err)
	}
}

func TestGPUTypes(t *testing.T) {
	f := newFixture(t)
	for i, gpu := range []string{"nvidia-t4", "", "nvidia-a10", "nvidia-t4"} {
		g := f.group(fmt.Sprintf("g%d", i), 0, 1, 0)
		if gpu != "" {
			g.NodeTemplate.Labels = map[string]string{"nodesmith.io/gpu-type": gpu}
		}
	}
	got, err := f.svc.GPUTypes()
	if err != nil || !slices.Equal(got, []string{"nvidia-a10", "nvidia-t4"}) {
		t.Fatalf("GPUTypes = %v, %v", got, err)
	}
}
