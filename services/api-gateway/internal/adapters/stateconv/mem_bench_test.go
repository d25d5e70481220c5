package stateconv_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/stateconv"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
)

// BenchmarkReadModelMemory loads memInstances records as the KV watcher
// does (decode, then PutInstance) and reports the heap the read model
// keeps per instance (issue 20: < 256 MiB at 100,000 instances).
func BenchmarkReadModelMemory(b *testing.B) {
	const memInstances = 20000
	raw := make([][]byte, memInstances)
	for i := range raw {
		var err error
		if raw[i], err = proto.Marshal(memRecord(i)); err != nil {
			b.Fatal(err)
		}
	}
	var perInstance float64
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		m := app.NewReadModel()
		for i, r := range raw {
			p := &statev1.Instance{}
			if err := proto.Unmarshal(r, p); err != nil {
				b.Fatal(err)
			}
			m.PutInstance(p.GetGroup()+"."+p.GetId(), uint64(i+1), stateconv.Instance(p))
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perInstance = float64(after.HeapAlloc-before.HeapAlloc) / memInstances
		runtime.KeepAlive(m)
	}
	b.ReportMetric(perInstance, "B/instance")
}

// memRecord is an instance record as lifecycle writes one for a RUNNING
// VM: placement, ids, a trace context, a host key, a short hook output
// and five transitions.
func memRecord(i int) *statev1.Instance {
	at := func(s int) *timestamppb.Timestamp {
		return timestamppb.New(time.Unix(1_780_000_000+int64(i)+int64(s), int64(i)))
	}
	id := fmt.Sprintf("i-%08x", i)
	cloud := fmt.Sprintf("ins-%08x", i*7919)
	ip := fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
	return &statev1.Instance{
		Id: id, Group: fmt.Sprintf("group-%02d", i%10), State: statev1.InstanceState_INSTANCE_STATE_RUNNING, Attempt: 1,
		CloudId: cloud, ProviderId: "tencentcloud:///ap-guangzhou-3/" + cloud, NodeName: ip, PrivateIp: ip,
		ClientToken: fmt.Sprintf("%08x-0000-4000-8000-%012x", i, i), BatchId: fmt.Sprintf("b-%08x", i/50),
		CreatedAt: at(0), StateSince: at(240),
		History: []*statev1.Transition{
			{From: 0, To: 1, Reason: "created", At: at(0)},
			{From: 1, To: 2, Reason: "dispatched", At: at(1)},
			{From: 2, To: 3, Reason: "cloud reports running", At: at(60)},
			{From: 3, To: 4, Reason: "node registered", At: at(180)},
			{From: 4, To: 5, Reason: "node ready", At: at(240)},
		},
		SshHostKey:     "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI" + fmt.Sprintf("%040x", i),
		HookOutputTail: strings.Repeat("joined the cluster\n", 8),
		TraceContext:   map[string]string{"traceparent": fmt.Sprintf("00-%032x-%016x-01", i+1, i+1)},
	}
}
