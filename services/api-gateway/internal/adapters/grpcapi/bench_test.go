package grpcapi_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/protobuf/types/known/durationpb"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/grpcapi"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

const (
	benchInstances = 50_000
	benchGroups    = 50
)

// bigModel builds a server over 50k instances in 50 groups, and the
// requests CA would send for them (every node once, by providerID and
// name, as CA does per loop).
func bigModel(b *testing.B) (*grpcapi.Server, *app.ReadModel, []*pb.NodeGroupForNodeRequest) {
	b.Helper()
	var groups []*domain.NodeGroup
	for g := range benchGroups {
		groups = append(groups, &domain.NodeGroup{ID: fmt.Sprintf("group-%02d", g), MaxSize: 5000, TargetSize: benchInstances / benchGroups,
			InstanceTemplate:   &domain.InstanceTemplate{Name: "tpl", Provider: "tencentcloud", Region: "ap-guangzhou", Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4"},
			AutoscalingOptions: &domain.PartialOptions{ScaleDownUnneeded: new(time.Duration(g+1) * time.Minute)}})
	}
	srv, rm := newServer(b, groups...)
	reqs := make([]*pb.NodeGroupForNodeRequest, 0, benchInstances)
	for i := range benchInstances {
		g := groups[i%benchGroups].ID
		id := fmt.Sprintf("i-%07d", i)
		pid := fmt.Sprintf("tencentcloud:///ap-guangzhou-3/ins-%08x", i)
		name := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
		rm.PutInstance(g+"."+id, uint64(i+1), &domain.Instance{ID: id, Group: g, State: domain.StateRunning, ProviderID: pid, NodeName: name})
		reqs = append(reqs, &pb.NodeGroupForNodeRequest{Node: &pb.ExternalGrpcNode{ProviderID: pid, Name: name}})
	}
	// Some unmanaged nodes (control plane), which CA asks about every time.
	for i := range 100 {
		reqs = append(reqs, &pb.NodeGroupForNodeRequest{Node: &pb.ExternalGrpcNode{ProviderID: fmt.Sprintf("kind://cp-%d", i), Name: fmt.Sprintf("cp-%d", i)}})
	}
	rand.Shuffle(len(reqs), func(i, j int) { reqs[i], reqs[j] = reqs[j], reqs[i] })
	return srv, rm, reqs
}

// BenchmarkNodeGroupForNode measures CA's hottest call at 50k instances.
// It reports the p99 latency of single calls (target: <= 150us) besides
// the mean; nothing is asserted, the machine is shared.
func BenchmarkNodeGroupForNode(b *testing.B) {
	srv, _, reqs := bigModel(b)
	ctx := context.Background()
	// b.N is not known before b.Loop's first round: a fixed sample of the
	// first million calls (sized by b.N, it held one call, the first).
	lat := make([]time.Duration, 0, 1_000_000)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		start := time.Now()
		resp, err := srv.NodeGroupForNode(ctx, reqs[i%len(reqs)])
		if len(lat) < cap(lat) {
			lat = append(lat, time.Since(start))
		}
		if err != nil || resp.GetNodeGroup() == nil {
			b.Fatalf("NodeGroupForNode: %v", err)
		}
	}
	reportP99(b, lat)
}

// BenchmarkNodeGroupForNodeUnderWrites adds a writer applying instance
// updates as fast as it can while readers call NodeGroupForNode.
func BenchmarkNodeGroupForNodeUnderWrites(b *testing.B) {
	srv, rm, reqs := bigModel(b)
	ctx := context.Background()
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		rev := uint64(benchInstances + 1)
		for i := 0; !stop.Load(); i++ {
			g := fmt.Sprintf("group-%02d", i%benchGroups)
			id := fmt.Sprintf("i-%07d", i%benchInstances)
			rm.PutInstance(g+"."+id, rev, &domain.Instance{ID: id, Group: g, State: domain.StateRunning, ProviderID: "tencentcloud:///x/" + id})
			rev++
		}
	}()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := rand.IntN(len(reqs))
		for pb.Next() {
			if _, err := srv.NodeGroupForNode(ctx, reqs[i%len(reqs)]); err != nil {
				b.Error(err)
				return
			}
			i++
		}
	})
	b.StopTimer()
	stop.Store(true)
	<-done
}

func reportP99(b *testing.B, lat []time.Duration) {
	if len(lat) == 0 {
		return
	}
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)*99/100].Nanoseconds()), "p99-ns")
}

// caDefaults are the defaults CA sends with every NodeGroupGetOptions (its
// flag defaults).
var caDefaults = &pb.NodeGroupAutoscalingOptions{
	ScaleDownUtilizationThreshold: 0.5, ScaleDownGpuUtilizationThreshold: 0.5,
	ScaleDownUnneededDuration: durationpb.New(10 * time.Minute), ScaleDownUnreadyDuration: durationpb.New(20 * time.Minute),
	MaxNodeProvisionDuration: durationpb.New(15 * time.Minute),
}

// BenchmarkNodeGroupGetOptions is CA's most frequent call (2 to 5 per
// node per loop, issue 21), as CA sends it: the group's id and CA's
// defaults, over 50 groups with options of their own. The answer's
// allocations are pinned by TestGetOptionsAllocations.
func BenchmarkNodeGroupGetOptions(b *testing.B) {
	srv, _, _ := bigModel(b)
	ctx := context.Background()
	reqs := make([]*pb.NodeGroupAutoscalingOptionsRequest, benchGroups)
	for g := range reqs {
		reqs[g] = &pb.NodeGroupAutoscalingOptionsRequest{Id: fmt.Sprintf("group-%02d", g), Defaults: caDefaults}
	}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		resp, err := srv.NodeGroupGetOptions(ctx, reqs[i%len(reqs)])
		if err != nil || resp.GetNodeGroupAutoscalingOptions().GetMaxNodeProvisionDuration() == nil {
			b.Fatalf("NodeGroupGetOptions: %v, %v", resp, err)
		}
	}
}
