package embedded

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/tracing/tracingtest"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
)

// traceIndex indexes the ended spans of one trace by span id.
type traceIndex map[trace.SpanID]sdktrace.ReadOnlySpan

func spansOf(rec *tracetest.SpanRecorder, id trace.TraceID) traceIndex {
	ix := traceIndex{}
	for _, s := range rec.Ended() {
		if s.SpanContext().TraceID() == id {
			ix[s.SpanContext().SpanID()] = s
		}
	}
	return ix
}

// find returns the first span of the trace whose name is name.
func (ix traceIndex) find(name string) sdktrace.ReadOnlySpan {
	for _, s := range ix {
		if s.Name() == name {
			return s
		}
	}
	return nil
}

// chain returns the names from s up to the root, following parents within
// the trace; it stops at a parent that is not (yet) recorded.
func (ix traceIndex) chain(s sdktrace.ReadOnlySpan) []string {
	var names []string
	for s != nil && len(names) < 64 {
		names = append(names, s.Name())
		if !s.Parent().IsValid() {
			break
		}
		s = ix[s.Parent().SpanID()]
	}
	return names
}

// subsequence reports whether want appears in got in order (other spans may
// sit between them).
func subsequence(got, want []string) bool {
	i := 0
	for _, g := range got {
		if i < len(want) && g == want[i] {
			i++
		}
	}
	return i == len(want)
}

func reversed(s []string) []string {
	out := make([]string, len(s))
	for i, v := range s {
		out[len(s)-1-i] = v
	}
	return out
}

// TestTraceFromIncreaseSizeReachesTheWorkers is the tracing acceptance: a
// trace started by CA's IncreaseSize call at the gateway continues through
// lifecycle (the operation, and the commands it dispatches later for the
// instances it created), through NATS to the cloud adapter's RunInstances
// call and the hook runner's SSH hook, and the workers' result events come
// back to lifecycle in the same trace.
func TestTraceFromIncreaseSizeReachesTheWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	_, rec := tracingtest.Record(t)
	s := start(t, testConfig(t, t.TempDir(), 20000+rand.IntN(20000)))
	defer s.stop(t)
	c := s.client(t)
	waitGroups(t, c)

	call(t, func(ctx context.Context) (*pb.NodeGroupIncreaseSizeResponse, error) {
		return c.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: "workers", Delta: 1})
	})
	running := waitRunning(t, c, "workers", 1)

	const rpc = "clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/NodeGroupIncreaseSize"
	id := rootTrace(t, rec, rpc)
	expectChains(t, rec, id, rpc, []chainCase{
		{"cvm RunInstances", []string{rpc, "lifecycle increase_size", "lifecycle increase_size",
			"dispatch create", "publish nodesmith.cmd.cloud.create", "process nodesmith.cmd.cloud.create", "cvm RunInstances"}},
		{"ssh run", []string{rpc, "lifecycle increase_size", "dispatch hook",
			"publish nodesmith.cmd.hook.run", "process nodesmith.cmd.hook.run", "ssh run"}},
		{"process nodesmith.evt.cloud.created", []string{rpc, "lifecycle increase_size",
			"process nodesmith.cmd.cloud.create", "publish nodesmith.evt.cloud.created", "process nodesmith.evt.cloud.created"}},
		{"process nodesmith.evt.hook.result", []string{rpc, "process nodesmith.cmd.hook.run",
			"publish nodesmith.evt.hook.result", "process nodesmith.evt.hook.result"}},
	})

	// Scale-down: the node's release stamps DeleteNodes' trace on the
	// record, so its before_delete hook and termination continue it.
	call(t, func(ctx context.Context) (*pb.NodeGroupDeleteNodesResponse, error) {
		return c.NodeGroupDeleteNodes(ctx, &pb.NodeGroupDeleteNodesRequest{Id: "workers",
			Nodes: []*pb.ExternalGrpcNode{{ProviderID: running[0].GetId(), Name: nodeName(running[0].GetId())}}})
	})
	const delRPC = "clusterautoscaler.cloudprovider.v1.externalgrpc.CloudProvider/NodeGroupDeleteNodes"
	del := rootTrace(t, rec, delRPC)
	expectChains(t, rec, del, delRPC, []chainCase{
		{"cvm TerminateInstances", []string{delRPC, "lifecycle delete_nodes", "dispatch terminate",
			"publish nodesmith.cmd.cloud.terminate", "process nodesmith.cmd.cloud.terminate", "cvm TerminateInstances"}},
		{"ssh run", []string{delRPC, "lifecycle delete_nodes", "dispatch hook", "process nodesmith.cmd.hook.run", "ssh run"}},
	})
}

// rootTrace returns the trace id of the (last) server span named rpc, which
// must be a root: the test's client sends no trace context.
func rootTrace(t *testing.T, rec *tracetest.SpanRecorder, rpc string) trace.TraceID {
	t.Helper()
	var root sdktrace.ReadOnlySpan
	// The server span ends just after the response is sent.
	for deadline := time.Now().Add(10 * time.Second); root == nil; time.Sleep(50 * time.Millisecond) {
		for _, sp := range rec.Ended() {
			if sp.Name() == rpc {
				root = sp
			}
		}
		if root == nil && time.Now().After(deadline) {
			t.Fatalf("no gRPC server span %q recorded", rpc)
		}
	}
	if root.SpanKind() != trace.SpanKindServer || root.Parent().IsValid() {
		t.Fatalf("the gRPC span should be the trace's root server span: kind %v parent %v", root.SpanKind(), root.Parent())
	}
	return root.SpanContext().TraceID()
}

// chainCase: the span named leaf descends, in trace id, from the spans of
// want (from the root down; other spans may sit between them).
type chainCase struct {
	leaf string
	want []string
}

func expectChains(t *testing.T, rec *tracetest.SpanRecorder, id trace.TraceID, rpc string, cases []chainCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.leaf, func(t *testing.T) {
			// Spans end asynchronously (a worker's span ends after its
			// result is published), so poll until the chain is complete.
			var got []string
			deadline := time.Now().Add(30 * time.Second)
			for {
				ix := spansOf(rec, id)
				if leaf := ix.find(tc.leaf); leaf != nil {
					got = reversed(ix.chain(leaf))
					if subsequence(got, tc.want) && got[0] == rpc {
						return
					}
				}
				if time.Now().After(deadline) {
					t.Fatalf("trace %s: chain to %q = %s\nwant (in order) %s\nspans in the trace: %s",
						id, tc.leaf, strings.Join(got, " -> "), strings.Join(tc.want, " -> "), names(spansOf(rec, id)))
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
	}
}

func names(ix traceIndex) string {
	var out []string
	for _, s := range ix {
		out = append(out, fmt.Sprintf("%s(%s<-%s)", s.Name(), s.SpanContext().SpanID(), s.Parent().SpanID()))
	}
	return strings.Join(out, ", ")
}

// waitGroups waits until lifecycle applied the built-in configuration.
func waitGroups(t *testing.T, c pb.CloudProviderClient) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; {
		gs := call(t, func(ctx context.Context) (*pb.NodeGroupsResponse, error) {
			return c.NodeGroups(ctx, &pb.NodeGroupsRequest{})
		})
		if len(gs.GetNodeGroups()) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no node group after 30s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
