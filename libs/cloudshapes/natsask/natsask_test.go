package natsask_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/cloudshapes"
	"github.com/nodesmith/nodesmith/libs/cloudshapes/natsask"
	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
)

// The gateway and lifecycle ask the cloud adapters (each as its own NATS
// identity, over a real server) and read their answers: shapes, not
// supported, a cloud that could not be asked, a garbled answer, nobody
// answering, nobody answering in time.
func TestNew(t *testing.T) {
	env := natstest.Start(t)
	ca, _ := env.ConnectAs(t, natsauth.CloudAdapter)
	tgt := cloudshapes.Target{Provider: "tencentcloud", Account: "dev", Region: "ap-guangzhou"}
	asks := map[string]cloudshapes.Ask{}
	for _, id := range []natsauth.Identity{natsauth.APIGateway, natsauth.Lifecycle} {
		nc, _ := env.ConnectAs(t, id)
		asks[string(id)] = natsask.New(nc)
	}

	for who, ask := range asks {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if _, err := ask(ctx, tgt, []string{"z1"}, []string{"A"}); err == nil || err.Error() != "no cloud adapter is answering" {
			t.Errorf("%s, nobody subscribed: %v", who, err)
		}
		cancel()
	}

	got := make(chan *cloudv1.ShapesRequest, 16)
	sub, err := ca.QueueSubscribe(messaging.SubjectCloudShapes, messaging.QueueCloudShapes, func(m *nats.Msg) {
		var req cloudv1.ShapesRequest
		if err := proto.Unmarshal(m.Data, &req); err != nil {
			t.Errorf("request: %v", err)
			return
		}
		got <- &req
		reply := &cloudv1.ShapesReply{}
		switch req.GetTarget().GetAccount() {
		case "alibaba":
			reply.Error = &cloudv1.CloudError{Code: cloudshapes.CodeNotSupported, Message: "not supported by this cloud"}
		case "broken":
			reply.Error = &cloudv1.CloudError{Kind: cloudv1.ErrorKind_ERROR_KIND_AUTH, Code: "AuthFailure", Message: "AuthFailure.SecretIdNotFound: no such key"}
		case "garbled":
			_ = m.Respond([]byte{0xff, 0xff, 0xff})
			return
		case "slow":
			return // never answers
		default:
			reply.Shapes = []*cloudv1.InstanceShape{{Zone: req.GetZones()[0], InstanceType: req.GetInstanceTypes()[0], Cpu: 8, MemoryMib: 32768, GpuCount: 1, GpuType: "GN7", Arch: "amd64"}}
		}
		data, _ := proto.Marshal(reply)
		_ = m.Respond(data)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Unsubscribe() })
	if err := ca.Flush(); err != nil {
		t.Fatal(err)
	}
	next := func() *cloudv1.ShapesRequest {
		t.Helper()
		select {
		case req := <-got:
			return req
		case <-time.After(10 * time.Second):
			t.Fatal("the cloud adapter was not asked")
			return nil
		}
	}

	for who, ask := range asks {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		shapes, err := ask(ctx, tgt, []string{"z1", "z2"}, []string{"GN7.2XLARGE32", "GN7.4XLARGE64"})
		want := []cloudspec.Shape{{Zone: "z1", InstanceType: "GN7.2XLARGE32", VCPU: 8, MemoryMiB: 32768, GPU: 1, GPUType: "GN7", Arch: "amd64"}}
		if err != nil || !reflect.DeepEqual(shapes, want) {
			t.Errorf("%s: got %v, %v", who, shapes, err)
		}
		req := next()
		wantReq := &cloudv1.ShapesRequest{Target: &cloudv1.Target{Provider: "tencentcloud", Account: "dev", Region: "ap-guangzhou"},
			Zones: []string{"z1", "z2"}, InstanceTypes: []string{"GN7.2XLARGE32", "GN7.4XLARGE64"}}
		if !proto.Equal(req, wantReq) {
			t.Errorf("%s asked %v, want %v", who, req, wantReq)
		}

		for account, want := range map[string]string{
			"alibaba": "this cloud's adapter cannot tell instance shapes (not supported by this cloud)",
			"broken":  "the cloud could not be asked: AuthFailure.SecretIdNotFound: no such key",
			"garbled": "decoding the cloud adapter's answer: ",
		} {
			_, err := ask(ctx, cloudshapes.Target{Provider: "tencentcloud", Account: account}, []string{"z1"}, []string{"A"})
			next()
			if err == nil || !strings.HasPrefix(err.Error(), want) {
				t.Errorf("%s, account %s: %v, want %q", who, account, err, want)
			}
			if notSupported := errors.Is(err, cloudshapes.ErrNotSupported); notSupported != (account == "alibaba") {
				t.Errorf("%s, account %s: %v is ErrNotSupported: %v", who, account, err, notSupported)
			}
		}
		cancel()

		// The caller's context bounds the question.
		short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		if _, err := ask(short, cloudshapes.Target{Provider: "tencentcloud", Account: "slow"}, []string{"z1"}, []string{"A"}); err == nil || err.Error() != "no cloud adapter answered in time" {
			t.Errorf("%s, nobody answering in time: %v", who, err)
		}
		cancel()
		next()
	}
}
