package service_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/cloudshapes"
	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/metrics/metricstest"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/adaptertest"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/service"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// askShapes asks as the gateway would, waiting for a responder (the
// replica subscribes once the catalog's credentials are loaded).
func askShapes(t *testing.T, nc *nats.Conn, req *cloudv1.ShapesRequest) *cloudv1.ShapesReply {
	t.Helper()
	data, err := proto.Marshal(req)
	if err != nil {
		t.Fatal(err)
	}
	var reply cloudv1.ShapesReply
	eventually(t, 20*time.Second, "an instance-shape answer", func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m, err := nc.RequestWithContext(ctx, messaging.SubjectCloudShapes, data)
		if errors.Is(err, nats.ErrNoResponders) {
			return false
		}
		if err != nil {
			t.Fatalf("shapes request: %v", err)
		}
		if err := proto.Unmarshal(m.Data, &reply); err != nil {
			t.Fatalf("shapes reply: %v", err)
		}
		return true
	})
	return &reply
}

// The emulator's catalogue (DescribeZoneInstanceConfigInfos) through the
// real SDK: S5.MEDIUM4 and SA2.MEDIUM4 share a shape, SR1.MEDIUM4 is arm64
// and GN7.2XLARGE32 has a GPU; a zone the region does not have offers
// nothing. A repeated question is answered from the cache.
func TestEmulatorInstanceShapes(t *testing.T) {
	const z3, z4, z6 = "ap-guangzhou-3", "ap-guangzhou-4", "ap-guangzhou-6"
	srv := startEmulator(t, func(c *cvmemu.Config) { c.Zones = []string{z3, z4} })
	s := newStack(t)
	reg := prometheus.NewRegistry()
	// Alibaba answers from the emulator's ECS front end (same key).
	ecsSrv := adaptertest.Emulator{Start: cvmemu.StartECS, KeyID: emulator.KeyID, Secret: emulator.Secret}.Run(t, nil)
	cfg := emulatorConfig(srv)
	cfg.AlibabaEndpoint, cfg.AlibabaScheme = ecsSrv.Endpoint(), "http"
	r := s.startReplica("a", cfg, service.Deps{Environ: credentialsEnv, Registry: reg})
	r.waitReady(t)
	gw, _ := s.env.ConnectAs(t, natsauth.APIGateway)

	target := &cloudv1.Target{Provider: provider, Account: "acct", Region: "ap-guangzhou"}
	types := []string{"S5.MEDIUM4", "SA2.MEDIUM4", "SR1.MEDIUM4", "GN7.2XLARGE32"}
	req := &cloudv1.ShapesRequest{Target: target, Zones: []string{z3, z6}, InstanceTypes: types}
	reply := askShapes(t, gw, req)
	if reply.GetError() != nil {
		t.Fatalf("error answer: %v", reply.GetError())
	}
	want := map[string]*cloudv1.InstanceShape{
		"S5.MEDIUM4":    {Zone: z3, InstanceType: "S5.MEDIUM4", Cpu: 2, MemoryMib: 4096, Arch: "amd64"},
		"SA2.MEDIUM4":   {Zone: z3, InstanceType: "SA2.MEDIUM4", Cpu: 2, MemoryMib: 4096, Arch: "amd64"},
		"SR1.MEDIUM4":   {Zone: z3, InstanceType: "SR1.MEDIUM4", Cpu: 2, MemoryMib: 4096, Arch: "arm64"},
		"GN7.2XLARGE32": {Zone: z3, InstanceType: "GN7.2XLARGE32", Cpu: 8, MemoryMib: 32768, GpuCount: 1, GpuType: "GN7", Arch: "amd64"},
	}
	if len(reply.GetShapes()) != len(want) {
		t.Fatalf("got %d shapes, want %d (none in %s): %v", len(reply.GetShapes()), len(want), z6, reply.GetShapes())
	}
	var shapes []cloudspec.Shape
	for _, got := range reply.GetShapes() {
		if w := want[got.GetInstanceType()]; !proto.Equal(got, w) {
			t.Errorf("shape %v, want %v", got, w)
		}
		shapes = append(shapes, cloudspec.Shape{Zone: got.GetZone(), InstanceType: got.GetInstanceType(), VCPU: int(got.GetCpu()),
			MemoryMiB: got.GetMemoryMib(), GPU: int(got.GetGpuCount()), GPUType: got.GetGpuType(), Arch: got.GetArch()})
	}
	// What the gateway and lifecycle conclude from it.
	errs := cloudspec.CheckShapes([]cloudspec.Offering{
		{Zone: z3, InstanceType: "S5.MEDIUM4"}, {Zone: z3, InstanceType: "SA2.MEDIUM4"},
		{Zone: z6, InstanceType: "S5.MEDIUM4"}, {Zone: z3, InstanceType: "SR1.MEDIUM4"},
	}, shapes)
	wantErrs := []cloudspec.FieldError{
		{Path: "offerings[2].instanceType", Msg: "S5.MEDIUM4 is not offered in ap-guangzhou-6"},
		{Path: "offerings[3].instanceType", Msg: "SR1.MEDIUM4 (2 vCPU, 4 GiB, arm64) differs from offerings[0] S5.MEDIUM4 (2 vCPU, 4 GiB, amd64): the types of one template must have one shape"},
	}
	if !slices.Equal(errs, wantErrs) {
		t.Errorf("CheckShapes = %q, want %q", errs, wantErrs)
	}

	calls := srv.Stats().Requests[cvmemu.ActionDescribeZoneInstanceConfigInfos]
	if calls != 1 {
		t.Errorf("%d catalogue calls, want 1", calls)
	}
	again := askShapes(t, gw, &cloudv1.ShapesRequest{Target: target, Zones: []string{z6, z3}, InstanceTypes: types[:2]})
	if again.GetError() != nil || len(again.GetShapes()) != 2 {
		t.Errorf("second answer %v", again)
	}
	if n := srv.Stats().Requests[cvmemu.ActionDescribeZoneInstanceConfigInfos]; n != calls {
		t.Errorf("a cached question called the cloud (%d calls, was %d)", n, calls)
	}
	// A zone not asked before is a new question.
	if r := askShapes(t, gw, &cloudv1.ShapesRequest{Target: target, Zones: []string{z4}, InstanceTypes: types[:1]}); len(r.GetShapes()) != 1 || r.GetShapes()[0].GetZone() != z4 {
		t.Errorf("answer for %s: %v", z4, r)
	}

	// Alibaba ECS answers too (DescribeAvailableResource, DescribeInstanceTypes).
	ali := askShapes(t, gw, &cloudv1.ShapesRequest{Target: &cloudv1.Target{Provider: cloudspec.Alibaba, Account: "acct", Region: "cn-hangzhou"},
		Zones: []string{"cn-hangzhou-h"}, InstanceTypes: []string{"ecs.g7.large", "ecs.g8y.large"}})
	wantAli := []*cloudv1.InstanceShape{
		{Zone: "cn-hangzhou-h", InstanceType: "ecs.g7.large", Cpu: 2, MemoryMib: 8192, Arch: "amd64"},
		{Zone: "cn-hangzhou-h", InstanceType: "ecs.g8y.large", Cpu: 2, MemoryMib: 8192, Arch: "arm64"},
	}
	if ali.GetError() != nil || len(ali.GetShapes()) != len(wantAli) {
		t.Fatalf("alibaba answer %v, want %v", ali, wantAli)
	}
	for i, w := range wantAli {
		if !proto.Equal(ali.GetShapes()[i], w) {
			t.Errorf("alibaba shape %v, want %v", ali.GetShapes()[i], w)
		}
	}

	// Clouds that cannot tell, and bad questions.
	for _, tc := range []struct {
		name     string
		req      *cloudv1.ShapesRequest
		code     string
		kind     cloudv1.ErrorKind
		wantKind bool
	}{
		{"unknown provider", &cloudv1.ShapesRequest{Target: &cloudv1.Target{Provider: "nocloud", Account: "acct", Region: "r"}, Zones: []string{"z"}, InstanceTypes: []string{"t"}}, cloudshapes.CodeNotSupported, 0, false},
		{"no zone", &cloudv1.ShapesRequest{Target: target, InstanceTypes: types}, "InvalidShapeQuery", cloudv1.ErrorKind_ERROR_KIND_INVALID_PARAMETERS, true},
		{"unknown account", &cloudv1.ShapesRequest{Target: &cloudv1.Target{Provider: provider, Account: "nobody", Region: "ap-guangzhou"}, Zones: []string{z3}, InstanceTypes: types}, "", cloudv1.ErrorKind_ERROR_KIND_AUTH, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := askShapes(t, gw, tc.req)
			e := r.GetError()
			if e == nil || len(r.GetShapes()) != 0 {
				t.Fatalf("answer %v, want an error", r)
			}
			if (tc.code != "" && e.GetCode() != tc.code) || (tc.wantKind && e.GetKind() != tc.kind) {
				t.Errorf("error %v, want code %q kind %v", e, tc.code, tc.kind)
			}
		})
	}

	for _, c := range []struct {
		provider, result string
		want             float64
	}{
		{provider, "cloud", 2}, {provider, "cached", 1}, {provider, "error", 2},
		{cloudspec.Alibaba, "cloud", 1}, {"", "not_supported", 1},
	} {
		if got := metricstest.Value(t, reg, "nodesmith_cloud_shape_questions_total", map[string]string{"provider": c.provider, "result": c.result}); got != c.want {
			t.Errorf("questions{provider=%q,result=%q} = %v, want %v", c.provider, c.result, got, c.want)
		}
	}
}
