package stateconv_test

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
	"unsafe"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/stateconv"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// BenchmarkReadModelMemory loads memInstances records as the KV watcher
// does (decode, then PutInstance) and reports the heap the read model
// keeps per instance (issue 20: < 256 MiB at 100,000 instances).
func BenchmarkReadModelMemory(b *testing.B) {
	const memInstances = 20000
	raw := memRecords(b, memInstances)
	var perInstance float64
	for b.Loop() {
		perInstance = readModelBytes(b, raw)
	}
	b.ReportMetric(perInstance, "B/instance")
}

// TestReadModelMemory pins the heap the read model keeps per instance
// (issue 20). 1,479 bytes before the cuts of issue 20 (the indexes' one-
// element slices, the whole KV subject kept by each key, group and
// history reasons copied into every record, each string of a record its
// own allocation); 1,230 after.
func TestReadModelMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("loads 10,000 records")
	}
	const limit = 1180
	raw := memRecords(t, 10000)
	got := readModelBytes(t, raw)
	t.Logf("%.0f bytes per instance", got)
	if got > limit {
		t.Errorf("read model keeps %.0f bytes per instance, want at most %d", got, limit)
	}
}

// TestInstanceAllocs pins the allocations of decoding one instance into
// the read model's type: the record, the block of its strings, the
// history (group, reasons and error code are interned).
func TestInstanceAllocs(t *testing.T) {
	p := memRecord(7)
	if got := testing.AllocsPerRun(100, func() { stateconv.Instance(p) }); got != 3 {
		t.Errorf("stateconv.Instance allocates %v times, want 3", got)
	}
}

// TestInstanceSize pins the read model's record struct to its size class:
// 320 bytes before its small fields were grouped (issue 20).
func TestInstanceSize(t *testing.T) {
	if got := unsafe.Sizeof(domain.Instance{}); got > 288 {
		t.Errorf("domain.Instance is %d bytes, want at most 288 (a field added? group small ones with the others at the end)", got)
	}
}

func memRecords(tb testing.TB, n int) [][]byte {
	raw := make([][]byte, n)
	for i := range raw {
		var err error
		if raw[i], err = proto.Marshal(memRecord(i)); err != nil {
			tb.Fatal(err)
		}
	}
	return raw
}

// readModelBytes loads raw into a new read model and returns the heap it
// keeps per record, measured around the load after collections.
func readModelBytes(tb testing.TB, raw [][]byte) float64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	m := app.NewReadModel()
	for i, r := range raw {
		p := &statev1.Instance{}
		if err := proto.Unmarshal(r, p); err != nil {
			tb.Fatal(err)
		}
		m.PutInstance(p.GetGroup()+"."+p.GetId(), uint64(i+1), stateconv.Instance(p))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(m)
	runtime.KeepAlive(raw) // measured before the load: it must outlive after
	return float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(len(raw))
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
		Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4", CapacityType: "spot",
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
