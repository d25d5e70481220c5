package fake_test

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/fake"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

var tgt = ports.Target{Account: "a", Region: "r"}

func TestCloudBehavesLikeACloud(t *testing.T) {
	ctx := context.Background()
	c := fake.NewCloud()
	boom := errors.New("boom")
	c.FailNext(fake.OpCreate, nil, boom)
	req := ports.CreateRequest{Target: tgt, ClientToken: "tok", Count: 2, Tags: domain.CreationTags("c1", "g", "b", "")}
	ids, err := c.CreateBatch(ctx, req)
	if err != nil || len(ids) != 2 {
		t.Fatalf("CreateBatch = %v, %v", ids, err)
	}
	if _, err := c.CreateBatch(ctx, req); !errors.Is(err, boom) {
		t.Fatalf("programmed error not returned: %v", err)
	}
	again, err := c.CreateBatch(ctx, req)
	if err != nil || !slices.Equal(again, ids) || len(c.VMs()) != 2 {
		t.Fatalf("same token created more VMs: %v %v (%d VMs)", again, err, len(c.VMs()))
	}

	sts, _ := c.Describe(ctx, tgt, ids)
	if sts[0].State != domain.StatePending {
		t.Fatalf("first round state %s, want PENDING", sts[0].State)
	}
	sts, _ = c.Describe(ctx, tgt, append(slices.Clone(ids), "ins-unknown"))
	if len(sts) != 2 || sts[0].State != domain.StateRunning || sts[0].PrivateIP == "" {
		t.Fatalf("second round = %+v, want two RUNNING VMs with IPs", sts)
	}
	if err := c.Terminate(ctx, tgt, []string{ids[0], "ins-unknown"}); err != nil {
		t.Fatalf("Terminate with an unknown VM: %v", err)
	}
	listed, _ := c.ListByTag(ctx, tgt, "c1")
	if len(listed) != 2 || listed[0].State != domain.StateTerminating {
		t.Fatalf("ListByTag = %+v", listed)
	}
	if calls := c.Calls(); len(calls.Create) != 3 || len(calls.Describe) != 2 || len(calls.Terminate) != 1 || len(calls.List) != 1 {
		t.Fatalf("recorded calls = %+v", calls)
	}
	c.Reset()
	if len(c.VMs()) != 0 || len(c.Calls().Create) != 0 {
		t.Fatal("Reset kept state")
	}
}

func TestEventsDeduplicateByMessageID(t *testing.T) {
	e := fake.NewEvents()
	ev := &domain.InstancesTerminated{}
	e.FailNext(errors.New("down"))
	if err := e.Publish(context.Background(), "id1", ev); err == nil {
		t.Fatal("programmed error not returned")
	}
	for range 3 {
		if err := e.Publish(context.Background(), "id1", ev); err != nil {
			t.Fatal(err)
		}
	}
	if len(e.All()) != 1 || e.Duplicates() != 2 {
		t.Fatalf("stored %d, duplicates %d; want 1 and 2", len(e.All()), e.Duplicates())
	}
}
