package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/dev/bench/harness"
	"github.com/nodesmith/nodesmith/libs/messaging"
	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
)

// Go benchmarks of the hot paths reachable from outside the services
// (benchstat-compatible: go test -run '^$' -bench . -count 6). The
// services' own benchmarks cover their internals (e.g. the gateway's
// BenchmarkNodeGroupForNode on its read model).

// BenchmarkInstanceRecord is what every KV write (lifecycle) and every
// watched update (gateway, lifecycle at load) pays per instance.
func BenchmarkInstanceRecord(b *testing.B) {
	in := harness.BuildSeed(1, 1, 1).Instances[0]
	raw, err := proto.Marshal(in)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("marshal", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			if _, err := proto.Marshal(in); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("unmarshal", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(raw)))
		for b.Loop() {
			var out statev1.Instance
			if err := proto.Unmarshal(raw, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkGroupRecordUnmarshal is paid per group update.
func BenchmarkGroupRecordUnmarshal(b *testing.B) {
	raw, err := proto.Marshal(harness.BuildSeed(1, 1, 1).Groups[0])
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetBytes(int64(len(raw)))
	for b.Loop() {
		var out statev1.NodeGroup
		if err := proto.Unmarshal(raw, &out); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkNodeGroupForNodeGRPC is CA's call per node end to end over
// loopback gRPC, against the api-gateway (in-process, read model loaded
// from 10k seeded KV records) and against the minimal server from maps.
func BenchmarkNodeGroupForNodeGRPC(b *testing.B) {
	benchGRPC(b, func(ctx context.Context, c pb.CloudProviderClient, seed *harness.Seeded, i int) error {
		n := i % len(seed.Nodes)
		res, err := c.NodeGroupForNode(ctx, &pb.NodeGroupForNodeRequest{Node: seed.Nodes[n]})
		if err != nil {
			return fmt.Errorf("NodeGroupForNode(%s): %w", seed.Nodes[n].GetProviderID(), err)
		}
		if res.GetNodeGroup().GetId() != seed.Want[n] {
			return fmt.Errorf("NodeGroupForNode(%s) = %v, want %q", seed.Nodes[n].GetProviderID(), res, seed.Want[n])
		}
		return nil
	})
}

// BenchmarkNodeGroupGetOptionsGRPC is CA's most frequent call (2 to 5
// per node per loop), as BenchmarkNodeGroupForNodeGRPC.
func BenchmarkNodeGroupGetOptionsGRPC(b *testing.B) {
	benchGRPC(b, func(ctx context.Context, c pb.CloudProviderClient, seed *harness.Seeded, i int) error {
		g := seed.Groups[i%len(seed.Groups)]
		res, err := c.NodeGroupGetOptions(ctx, &pb.NodeGroupAutoscalingOptionsRequest{Id: g.GetId(), Defaults: harness.CADefaults})
		if err != nil {
			return fmt.Errorf("NodeGroupGetOptions(%s): %w", g.GetId(), err)
		}
		if res.GetNodeGroupAutoscalingOptions().GetMaxNodeProvisionDuration() == nil {
			return fmt.Errorf("NodeGroupGetOptions(%s) = %v, want every field", g.GetId(), res)
		}
		return nil
	})
}

// benchGRPC runs call (the i-th call of a run) against the gateway and
// the floor, each over its own loopback gRPC connection.
func benchGRPC(b *testing.B, call func(ctx context.Context, c pb.CloudProviderClient, seed *harness.Seeded, i int) error) {
	if testing.Short() {
		b.Skip("starts NATS and the gateway")
	}
	const groups, instances = 100, 10_000
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bus, err := harness.StartBus(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer bus.Close()
	js := bus.JS
	seed := harness.BuildSeed(groups, instances, b1Seed)
	if err := seed.Write(ctx, js); err != nil {
		b.Fatal(err)
	}
	stack, err := harness.StartStack(ctx, harness.OnNATS(bus.Server.ClientURL(), bus.Keys), harness.StackConfig{Lifecycle: -1, CloudAdapters: -1, HookRunners: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = stack.Stop() }()
	floor, err := harness.StartFloor(seed, "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	defer floor.Stop()
	for _, s := range []struct{ name, addr string }{{"gateway", stack.GRPCAddr}, {"floor", floor.Addr}} {
		b.Run(fmt.Sprintf("server=%s/instances=%d", s.name, instances), func(b *testing.B) {
			conn, err := harness.Dial(s.addr)
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			c := pb.NewCloudProviderClient(conn)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if err := call(ctx, c, seed, i); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkKVInstanceUpdate is one lifecycle state write: encode the
// record and compare-and-set it in the instances bucket (embedded NATS,
// file storage, as `make run` and the benchmarks use), one at a time, as
// lifecycle's writes are.
func BenchmarkKVInstanceUpdate(b *testing.B) {
	if testing.Short() {
		b.Skip("starts NATS")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	bus, err := harness.StartBus(ctx, b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer bus.Close()
	js := bus.JS
	kv, err := js.KeyValue(ctx, messaging.BucketInstances)
	if err != nil {
		b.Fatal(err)
	}
	in := harness.BuildSeed(1, 1, 1).Instances[0]
	key := messaging.InstanceKey(in.GetGroup(), in.GetId())
	raw, err := proto.Marshal(in)
	if err != nil {
		b.Fatal(err)
	}
	rev, err := kv.Create(ctx, key, raw)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		in.Attempt++
		raw, err := proto.Marshal(in)
		if err != nil {
			b.Fatal(err)
		}
		if rev, err = kv.Update(ctx, key, raw, rev); err != nil {
			b.Fatal(err)
		}
	}
}
