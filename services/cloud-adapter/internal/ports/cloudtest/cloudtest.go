// Package cloudtest is the contract suite of ports.Cloud: one set of
// scenarios every implementation must pass, the in-memory fake as much as
// each cloud's adapter against its emulator. It checks what the port
// promises (cloud.go, errors.go) and the application relies on: creates
// idempotent by ClientToken, Describe leaving out what does not exist,
// Terminate idempotent and counting gone VMs as done, listing by the
// cluster tag, and the cloud's throttling and stock-outs surfaced as the
// typed errors.
//
// An implementation's test calls Run with a constructor of a fresh
// environment per scenario.
package cloudtest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// Op names a ports.Cloud method, for fault knobs.
type Op string

// The ports.Cloud methods.
const (
	OpCreate    Op = "CreateBatch"
	OpDescribe  Op = "Describe"
	OpTerminate Op = "Terminate"
	OpList      Op = "ListByTag"
)

// Env is one fresh cloud for one scenario.
type Env struct {
	Cloud  ports.Cloud
	Target ports.Target
	// Parameters is a valid template of the provider.
	Parameters string
	// MissingID is a well-formed id of a VM that never existed.
	MissingID string
	// OtherRegion is a region of the same account the VMs are not in;
	// empty skips the isolation scenario.
	OtherRegion string
	// Throttle makes the cloud answer every call of op with its rate-limit
	// error until restore is called (the implementation's retries must
	// give up within the test's patience: configure few, short ones).
	Throttle func(t *testing.T, op Op) (restore func())
	// StockOut makes the cloud out of stock for Parameters until restore
	// is called.
	StockOut func(t *testing.T) (restore func())
	// LaunchStockOut makes the cloud accept creates from Parameters but
	// end their VMs LAUNCH_FAILED for want of stock, until restore is
	// called; nil skips the scenario.
	LaunchStockOut func(t *testing.T) (restore func())
	// Shapes, if not nil, is what the cloud's ports.InstanceShapes must
	// answer; nil skips the scenario.
	Shapes *ShapesEnv
	// Patience bounds waits for VMs to boot or vanish; 0 means 30s.
	Patience time.Duration
}

// ShapesEnv is what the InstanceShapes scenario expects.
type ShapesEnv struct {
	// NotSupported: the cloud answers ports.ErrNotSupported.
	NotSupported bool
	// Known is the shape of one instance type in one zone (SoldOut false).
	Known domain.InstanceShape
	// Others are more shapes of the same zone, answered with Known.
	Others []domain.InstanceShape
}

// Run runs every scenario, each on an Env from newEnv.
func Run(t *testing.T, newEnv func(t *testing.T) Env) {
	scenarios := []struct {
		name string
		fn   func(t *testing.T, e Env)
	}{
		{"CreateIsIdempotentByClientToken", createIdempotent},
		{"CreateRejectsBadRequestsAsInvalid", createInvalid},
		{"DescribeReportsOnlyExistingVMs", describe},
		{"VMsBootToRunningWithAnAddress", boot},
		{"TerminateIsIdempotentAndGoneCountsAsDone", terminate},
		{"ListByTagListsExactlyTheCluster", listByTag},
		{"RegionsAreIsolated", regions},
		{"ThrottlingIsSurfacedTyped", throttling},
		{"StockOutIsACapacityError", stockOut},
		{"TagSetsTagsOnExistingVMs", tagVMs},
		{"LaunchFailedForCapacityIsClassified", launchStockOut},
		{"InstanceShapesPerZoneAndType", instanceShapes},
	}
	for _, s := range scenarios {
		t.Run(s.name, func(t *testing.T) {
			e := newEnv(t)
			if (s.name == "LaunchFailedForCapacityIsClassified" && e.LaunchStockOut == nil) ||
				(s.name == "InstanceShapesPerZoneAndType" && e.Shapes == nil) {
				t.Skip("the environment does not provide it")
			}
			if e.Patience <= 0 {
				e.Patience = 30 * time.Second
			}
			s.fn(t, e)
		})
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return c
}

func create(t *testing.T, e Env, token, cluster string, n int) []string {
	t.Helper()
	ids, err := e.Cloud.CreateBatch(ctx(t), ports.CreateRequest{
		Target: e.Target, ClientToken: token, Template: "contract", Parameters: e.Parameters, Count: n,
		Tags: domain.CreationTags(cluster, "g1", token, ""),
	})
	if err != nil {
		t.Fatalf("CreateBatch(%s, %d): %v", token, n, err)
	}
	if len(ids) != n {
		t.Fatalf("CreateBatch(%s, %d) returned %d ids: %v", token, n, len(ids), ids)
	}
	if len(uniq(ids)) != n {
		t.Fatalf("CreateBatch(%s) returned duplicate ids: %v", token, ids)
	}
	return ids
}

func uniq(ids []string) map[string]bool {
	m := map[string]bool{}
	for _, id := range ids {
		m[id] = true
	}
	return m
}

func listed(t *testing.T, e Env, cluster string) map[string]domain.Status {
	t.Helper()
	sts, err := e.Cloud.ListByTag(ctx(t), e.Target, cluster)
	if err != nil {
		t.Fatalf("ListByTag(%s): %v", cluster, err)
	}
	out := map[string]domain.Status{}
	for _, s := range sts {
		if _, dup := out[s.CloudID]; dup {
			t.Fatalf("ListByTag(%s) lists %s twice", cluster, s.CloudID)
		}
		out[s.CloudID] = s
	}
	return out
}

// eventually polls cond until it holds or e.Patience passes.
func eventually(t *testing.T, e Env, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(e.Patience)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s (last seen: %s)", e.Patience, what, state)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func createIdempotent(t *testing.T, e Env) {
	ids := create(t, e, "tok-a", "c1", 3)
	for range 2 { // two redeliveries of the same command
		if again := create(t, e, "tok-a", "c1", 3); !slices.Equal(again, ids) {
			t.Fatalf("the same ClientToken returned %v, first %v", again, ids)
		}
	}
	other := create(t, e, "tok-b", "c1", 2)
	for _, id := range other {
		if slices.Contains(ids, id) {
			t.Fatalf("another ClientToken returned VM %s of the first", id)
		}
	}
	if got := listed(t, e, "c1"); len(got) != 5 {
		t.Fatalf("the cluster has %d VMs after 3 creates with 2 tokens, want 5", len(got))
	}
}

func createInvalid(t *testing.T, e Env) {
	for name, req := range map[string]ports.CreateRequest{
		"no client token": {Count: 1},
		"count 0":         {Count: 0, ClientToken: "tok-0"},
		"count above max": {Count: ports.MaxBatch + 1, ClientToken: "tok-big"},
	} {
		req.Target, req.Parameters = e.Target, e.Parameters
		req.Tags = domain.CreationTags("c1", "g1", "b", "")
		if _, err := e.Cloud.CreateBatch(ctx(t), req); !ports.IsInvalidParametersError(err) {
			t.Errorf("%s: CreateBatch = %v, want an invalid-parameters error", name, err)
		}
	}
	if got := listed(t, e, "c1"); len(got) != 0 {
		t.Fatalf("rejected creates made %d VMs", len(got))
	}
}

func describe(t *testing.T, e Env) {
	ids := create(t, e, "tok-d", "c1", 2)
	sts, err := e.Cloud.Describe(ctx(t), e.Target, []string{ids[0], e.MissingID, ids[1]})
	if err != nil {
		t.Fatalf("Describe with a missing id: %v", err)
	}
	got := map[string]domain.Status{}
	for _, s := range sts {
		got[s.CloudID] = s
	}
	if len(got) != 2 || got[e.MissingID].CloudID != "" {
		t.Fatalf("Describe returned %v, want exactly the 2 created VMs", slices.Collect(maps.Keys(got)))
	}
	for _, id := range ids {
		s := got[id]
		if s.Tags[domain.TagCluster] != "c1" || s.Tags[domain.TagBatch] != "tok-d" || s.Tags[domain.TagGroup] != "g1" {
			t.Fatalf("VM %s tags %v, want the creation tags", id, s.Tags)
		}
		if s.State != domain.StatePending && s.State != domain.StateRunning {
			t.Fatalf("new VM %s is %s, want pending or running", id, s.State)
		}
	}
	if sts, err := e.Cloud.Describe(ctx(t), e.Target, []string{e.MissingID}); err != nil || len(sts) != 0 {
		t.Fatalf("Describe(missing) = %v, %v; want nothing and no error", sts, err)
	}
	if sts, err := e.Cloud.Describe(ctx(t), e.Target, nil); err != nil || len(sts) != 0 {
		t.Fatalf("Describe(no ids) = %v, %v", sts, err)
	}
}

func boot(t *testing.T, e Env) {
	ids := create(t, e, "tok-boot", "c1", 3)
	eventually(t, e, "all VMs running with a private IP", func() (bool, string) {
		sts, err := e.Cloud.Describe(ctx(t), e.Target, ids)
		if err != nil {
			return false, err.Error()
		}
		running := 0
		for _, s := range sts {
			if s.State == domain.StateRunning && s.PrivateIP != "" && s.Zone != "" {
				running++
			}
		}
		return running == len(ids), fmt.Sprintf("%+v", sts)
	})
}

func terminate(t *testing.T, e Env) {
	ids := create(t, e, "tok-t", "c1", 3)
	if err := e.Cloud.Terminate(ctx(t), e.Target, ids[:1]); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	// A redelivery with more ids, one never existed and one already gone.
	set := []string{ids[0], e.MissingID, ids[1], ids[2]}
	for range 2 {
		if err := e.Cloud.Terminate(ctx(t), e.Target, set); err != nil {
			t.Fatalf("Terminate with gone and missing VMs: %v", err)
		}
	}
	if err := e.Cloud.Terminate(ctx(t), e.Target, []string{e.MissingID}); err != nil {
		t.Fatalf("Terminate(missing): %v", err)
	}
	eventually(t, e, "terminated VMs terminating or gone", func() (bool, string) {
		sts, err := e.Cloud.Describe(ctx(t), e.Target, ids)
		if err != nil {
			return false, err.Error()
		}
		for _, s := range sts {
			if s.State != domain.StateTerminating {
				return false, fmt.Sprintf("%s is %s", s.CloudID, s.State)
			}
		}
		return true, ""
	})
	if err := e.Cloud.Terminate(ctx(t), e.Target, ids); err != nil {
		t.Fatalf("Terminate after they are gone: %v", err)
	}
}

func listByTag(t *testing.T, e Env) {
	mine := append(create(t, e, "tok-l1", "c1", 3), create(t, e, "tok-l2", "c1", 1)...)
	theirs := create(t, e, "tok-l3", "c2", 2)
	got := listed(t, e, "c1")
	if len(got) != len(mine) {
		t.Fatalf("ListByTag(c1) has %d VMs, want %d", len(got), len(mine))
	}
	for _, id := range mine {
		s, ok := got[id]
		if !ok {
			t.Fatalf("ListByTag(c1) misses %s", id)
		}
		if s.Tags[domain.TagCluster] != "c1" || s.CreatedAt.IsZero() {
			t.Fatalf("listed %+v lacks its tags or creation time", s)
		}
	}
	for _, id := range theirs {
		if _, ok := got[id]; ok {
			t.Fatalf("ListByTag(c1) lists %s of c2", id)
		}
	}
	if got := listed(t, e, "nobody"); len(got) != 0 {
		t.Fatalf("ListByTag(nobody) = %d VMs", len(got))
	}
}

func regions(t *testing.T, e Env) {
	if e.OtherRegion == "" {
		t.Skip("no other region")
	}
	ids := create(t, e, "tok-r", "c1", 2)
	other := ports.Target{Account: e.Target.Account, Region: e.OtherRegion}
	if sts, err := e.Cloud.Describe(ctx(t), other, ids); err != nil || len(sts) != 0 {
		t.Fatalf("Describe in region %s = %v, %v; want none of the VMs of %s", e.OtherRegion, sts, err, e.Target.Region)
	}
	if sts, err := e.Cloud.ListByTag(ctx(t), other, "c1"); err != nil || len(sts) != 0 {
		t.Fatalf("ListByTag in region %s = %v, %v; want none", e.OtherRegion, sts, err)
	}
}

func throttling(t *testing.T, e Env) {
	ids := create(t, e, "tok-th", "c1", 1)
	for _, op := range []Op{OpDescribe, OpCreate, OpTerminate, OpList} {
		restore := e.Throttle(t, op)
		var err error
		switch op {
		case OpDescribe:
			_, err = e.Cloud.Describe(ctx(t), e.Target, ids)
		case OpCreate:
			_, err = e.Cloud.CreateBatch(ctx(t), ports.CreateRequest{
				Target: e.Target, ClientToken: "tok-th2", Parameters: e.Parameters, Count: 1,
				Tags: domain.CreationTags("c1", "g1", "tok-th2", ""),
			})
		case OpTerminate:
			err = e.Cloud.Terminate(ctx(t), e.Target, ids)
		case OpList:
			_, err = e.Cloud.ListByTag(ctx(t), e.Target, "c1")
		}
		restore()
		if !ports.IsThrottledError(err) || !ports.IsRetryable(err) {
			t.Fatalf("%s while throttled = %v, want a throttled error", op, err)
		}
	}
	// The throttling is over: the same calls succeed.
	if _, err := e.Cloud.Describe(ctx(t), e.Target, ids); err != nil {
		t.Fatalf("Describe after throttling: %v", err)
	}
	if got := listed(t, e, "c1"); len(got) != 1 {
		t.Fatalf("%d VMs after a throttled create, want 1", len(got))
	}
}

func stockOut(t *testing.T, e Env) {
	restore := e.StockOut(t)
	_, err := e.Cloud.CreateBatch(ctx(t), ports.CreateRequest{
		Target: e.Target, ClientToken: "tok-so", Parameters: e.Parameters, Count: 3,
		Tags: domain.CreationTags("c1", "g1", "tok-so", ""),
	})
	if !ports.IsCapacityError(err) || ports.IsRetryable(err) {
		t.Fatalf("CreateBatch out of stock = %v, want a capacity error (not retried)", err)
	}
	if got := listed(t, e, "c1"); len(got) != 0 {
		t.Fatalf("a stock-out created %d VMs", len(got))
	}
	restore()
	create(t, e, "tok-so2", "c1", 1)
}

func tagVMs(t *testing.T, e Env) {
	ids := create(t, e, "tok-tag", "c1", 2)
	tags := []domain.Tag{{Key: domain.TagGroup, Value: "g2"}, {Key: domain.TagInstance, Value: "i-adopted"}}
	for range 2 { // idempotent
		if err := e.Cloud.Tag(ctx(t), e.Target, ids, tags); err != nil {
			t.Fatalf("Tag: %v", err)
		}
	}
	sts, err := e.Cloud.Describe(ctx(t), e.Target, ids)
	if err != nil || len(sts) != 2 {
		t.Fatalf("Describe after Tag = %v, %v", sts, err)
	}
	for _, s := range sts {
		// Set, replaced, and the other tags left alone.
		if s.Tags[domain.TagGroup] != "g2" || s.Tags[domain.TagInstance] != "i-adopted" || s.Tags[domain.TagCluster] != "c1" || s.Tags[domain.TagBatch] != "tok-tag" {
			t.Fatalf("VM %s tags after Tag: %v", s.CloudID, s.Tags)
		}
	}
}

// launchStockOut: a create accepted, then its VMs failing for want of
// stock, shows as LAUNCH_FAILED with a capacity LaunchError naming why;
// the failed VMs terminate like any other (no leak).
func launchStockOut(t *testing.T, e Env) {
	restore := e.LaunchStockOut(t)
	ids := create(t, e, "tok-lso", "c1", 2)
	var last []domain.Status
	eventually(t, e, "the VMs end LAUNCH_FAILED", func() (bool, string) {
		sts, err := e.Cloud.Describe(ctx(t), e.Target, ids)
		if err != nil {
			return false, err.Error()
		}
		last = sts
		done := len(sts) == len(ids)
		for _, s := range sts {
			done = done && s.State == domain.StateLaunchFailed
		}
		return done, fmt.Sprint(sts)
	})
	for _, s := range last {
		le := s.LaunchError
		if le == nil || le.Kind != ports.ErrorKindCapacity || le.Message == "" {
			t.Fatalf("VM %s LAUNCH_FAILED with launch error %+v, want a capacity error with a message", s.CloudID, le)
		}
	}
	restore()
	if err := e.Cloud.Terminate(ctx(t), e.Target, ids); err != nil {
		t.Fatalf("Terminate of LAUNCH_FAILED VMs: %v", err)
	}
	eventually(t, e, "the LAUNCH_FAILED VMs terminate", func() (bool, string) {
		sts, err := e.Cloud.Describe(ctx(t), e.Target, ids)
		if err != nil {
			return false, err.Error()
		}
		for _, s := range sts {
			if s.State != domain.StateTerminating {
				return false, fmt.Sprint(sts)
			}
		}
		return true, ""
	})
	// Launches work again.
	create(t, e, "tok-lso2", "c1", 1)
}

// instanceShapes: the shapes of a zone's types, only those it offers; bad
// queries are invalid parameters; a cloud that cannot tell says
// ErrNotSupported.
func instanceShapes(t *testing.T, e Env) {
	sh, ok := e.Cloud.(ports.InstanceShapes)
	if !ok {
		t.Fatalf("%T does not implement ports.InstanceShapes", e.Cloud)
	}
	if _, err := sh.InstanceShapes(ctx(t), e.Target, nil, []string{"x"}); !ports.IsInvalidParametersError(err) {
		t.Fatalf("InstanceShapes without zones = %v, want invalid parameters", err)
	}
	if _, err := sh.InstanceShapes(ctx(t), e.Target, []string{"z"}, make([]string, ports.MaxShapeQuery+1)); !ports.IsInvalidParametersError(err) {
		t.Fatalf("InstanceShapes with too many types = %v, want invalid parameters", err)
	}
	known := e.Shapes.Known
	if e.Shapes.NotSupported {
		_, err := sh.InstanceShapes(ctx(t), e.Target, []string{"zone-1"}, []string{"type-1"})
		if !errors.Is(err, ports.ErrNotSupported) {
			t.Fatalf("InstanceShapes = %v, want ErrNotSupported", err)
		}
		return
	}
	types := []string{known.InstanceType, "NOSUCH.TYPE1"}
	for _, o := range e.Shapes.Others {
		types = append(types, o.InstanceType)
	}
	got, err := sh.InstanceShapes(ctx(t), e.Target, []string{known.Zone}, types)
	if err != nil {
		t.Fatalf("InstanceShapes: %v", err)
	}
	want := append([]domain.InstanceShape{known}, e.Shapes.Others...)
	byType := map[string]domain.InstanceShape{}
	for _, s := range got {
		if _, dup := byType[s.InstanceType]; dup || s.Zone != known.Zone {
			t.Fatalf("InstanceShapes lists %s/%s twice or in another zone: %+v", s.Zone, s.InstanceType, got)
		}
		byType[s.InstanceType] = s
	}
	if len(got) != len(want) {
		t.Fatalf("InstanceShapes = %+v, want %+v (a type the zone does not offer is left out)", got, want)
	}
	for _, w := range want {
		if g := byType[w.InstanceType]; g != w {
			t.Fatalf("shape of %s = %+v, want %+v", w.InstanceType, g, w)
		}
	}
}
