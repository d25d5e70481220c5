package jetstream_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/cloudshapes"
	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"

	jsadapter "github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/jetstream"
)

// Lifecycle asks the cloud adapters (as its own NATS identity) and reads
// their answers: shapes, not supported, nobody answering.
func TestShapes(t *testing.T) {
	env := natstest.Start(t)
	lc, _ := env.ConnectAs(t, natsauth.Lifecycle)
	ca, _ := env.ConnectAs(t, natsauth.CloudAdapter)
	ask := jsadapter.Shapes(lc)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tgt := cloudshapes.Target{Provider: "tencentcloud", Account: "dev", Region: "ap-guangzhou"}

	if _, err := ask(ctx, tgt, []string{"z1"}, []string{"A"}); err == nil || err.Error() != "no cloud adapter is answering" {
		t.Errorf("nobody subscribed: %v", err)
	}

	sub, err := ca.QueueSubscribe(messaging.SubjectCloudShapes, messaging.QueueCloudShapes, func(m *nats.Msg) {
		var req cloudv1.ShapesRequest
		_ = proto.Unmarshal(m.Data, &req)
		reply := &cloudv1.ShapesReply{}
		if req.GetTarget().GetProvider() == "alibaba" {
			reply.Error = &cloudv1.CloudError{Code: cloudshapes.CodeNotSupported, Message: "not supported by this cloud"}
		} else {
			reply.Shapes = []*cloudv1.InstanceShape{{Zone: req.GetZones()[0], InstanceType: req.GetInstanceTypes()[0], Cpu: 8, MemoryMib: 32768, GpuCount: 1, GpuType: "GN7", Arch: "amd64"}}
		}
		data, _ := proto.Marshal(reply)
		_ = m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	if err := ca.Flush(); err != nil {
		t.Fatal(err)
	}
	got, err := ask(ctx, tgt, []string{"z1"}, []string{"GN7.2XLARGE32"})
	want := []cloudspec.Shape{{Zone: "z1", InstanceType: "GN7.2XLARGE32", VCPU: 8, MemoryMiB: 32768, GPU: 1, GPUType: "GN7", Arch: "amd64"}}
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("got %v, %v", got, err)
	}
	if _, err := ask(ctx, cloudshapes.Target{Provider: "alibaba"}, []string{"z1"}, []string{"A"}); !errors.Is(err, cloudshapes.ErrNotSupported) {
		t.Errorf("alibaba: %v", err)
	}
}
