package natsreq

import (
	"reflect"
	"testing"

	"google.golang.org/protobuf/proto"

	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/ports"
)

// Every operation reaches the wire with each of its fields, under the name
// its OpName gives (metric labels and spans agree).
func TestRequestWireShape(t *testing.T) {
	g := &statev1.NodeGroup{Id: "g", MaxSize: 3}
	e := &statev1.CatalogEntry{Entry: &statev1.CatalogEntry_Template{Template: &statev1.InstanceTemplate{Name: "small"}}}
	dg := &domain.NodeGroup{ID: "g", MaxSize: 3}
	de := &domain.CatalogEntry{Template: &domain.InstanceTemplate{Name: "small"}}
	labels := map[string]string{"a": "b"}
	for _, tc := range []struct {
		op   ports.Operation
		want *lifecyclev1.Request
	}{
		{ports.IncreaseSize{Group: "g", Delta: 2}, &lifecyclev1.Request{Op: &lifecyclev1.Request_IncreaseSize{IncreaseSize: &lifecyclev1.IncreaseSize{Group: "g", Delta: 2}}}},
		{ports.DecreaseTargetSize{Group: "g", Delta: -1}, &lifecyclev1.Request{Op: &lifecyclev1.Request_DecreaseTargetSize{DecreaseTargetSize: &lifecyclev1.DecreaseTargetSize{Group: "g", Delta: -1}}}},
		{ports.DeleteNodes{Group: "g", Nodes: []ports.NodeRef{{ProviderID: "p", Name: "n", Labels: labels, Annotations: labels}}},
			&lifecyclev1.Request{Op: &lifecyclev1.Request_DeleteNodes{DeleteNodes: &lifecyclev1.DeleteNodes{Group: "g",
				Nodes: []*lifecyclev1.NodeRef{{ProviderId: "p", Name: "n", Labels: labels, Annotations: labels}}}}}},
		{ports.SetTargetSize{Group: "g", TargetSize: 4}, &lifecyclev1.Request{Op: &lifecyclev1.Request_SetTargetSize{SetTargetSize: &lifecyclev1.SetTargetSize{Group: "g", TargetSize: 4}}}},
		{ports.PutGroup{Group: dg, ExpectedRevision: 7, Upsert: true}, &lifecyclev1.Request{Op: &lifecyclev1.Request_PutGroup{PutGroup: &lifecyclev1.PutGroup{Group: g, ExpectedRevision: 7, Upsert: true}}}},
		{ports.DeleteGroup{ID: "g", ExpectedRevision: 7}, &lifecyclev1.Request{Op: &lifecyclev1.Request_DeleteGroup{DeleteGroup: &lifecyclev1.DeleteGroup{Id: "g", ExpectedRevision: 7}}}},
		{ports.InstanceAction{InstanceID: "i", Action: ports.ActionForceDelete}, &lifecyclev1.Request{Op: &lifecyclev1.Request_InstanceAction{InstanceAction: &lifecyclev1.InstanceAction{
			InstanceId: "i", Action: lifecyclev1.InstanceAction_ACTION_FORCE_DELETE}}}},
		{ports.InstanceAction{InstanceID: "i", Action: ports.ActionCancel}, &lifecyclev1.Request{Op: &lifecyclev1.Request_InstanceAction{InstanceAction: &lifecyclev1.InstanceAction{
			InstanceId: "i", Action: lifecyclev1.InstanceAction_ACTION_CANCEL}}}},
		{ports.PutCatalogEntry{Entry: de, ExpectedRevision: 3, Upsert: true}, &lifecyclev1.Request{Op: &lifecyclev1.Request_PutCatalogEntry{PutCatalogEntry: &lifecyclev1.PutCatalogEntry{
			Entry: e, ExpectedRevision: 3, Upsert: true}}}},
		{ports.DeleteCatalogEntry{Kind: "hooks", Name: "drain", ExpectedRevision: 3}, &lifecyclev1.Request{Op: &lifecyclev1.Request_DeleteCatalogEntry{DeleteCatalogEntry: &lifecyclev1.DeleteCatalogEntry{
			Kind: lifecyclev1.CatalogKind_CATALOG_KIND_HOOK, Name: "drain", ExpectedRevision: 3}}}},
		{ports.ReleaseOrphans{}, &lifecyclev1.Request{Op: &lifecyclev1.Request_ReleaseOrphans{ReleaseOrphans: &lifecyclev1.ReleaseOrphans{}}}},
		{ports.AdoptVMs{Group: "g", DryRun: true, VMs: []ports.AdoptVM{{CloudID: "ins-1", NodeName: "n1", ProviderID: "p1", PrivateIP: "10.0.0.1"}}},
			&lifecyclev1.Request{Op: &lifecyclev1.Request_AdoptVms{AdoptVms: &lifecyclev1.AdoptVMs{Group: "g", DryRun: true,
				Vms: []*lifecyclev1.AdoptVM{{CloudId: "ins-1", NodeName: "n1", ProviderId: "p1", PrivateIp: "10.0.0.1"}}}}}},
	} {
		got, err := Request(ports.Request{ID: "r1", Op: tc.op})
		if err != nil {
			t.Fatalf("%T: %v", tc.op, err)
		}
		tc.want.RequestId = "r1"
		if !proto.Equal(got, tc.want) {
			t.Errorf("%T: wire %v, want %v", tc.op, got, tc.want)
		}
		if name := lifecyclev1.OpName(got); tc.op.OpName() != name {
			t.Errorf("%T: OpName %q, wire name %q", tc.op, tc.op.OpName(), name)
		}
	}
	for _, op := range []ports.Operation{nil, ports.DeleteCatalogEntry{Kind: "nope"}, ports.InstanceAction{Action: 99}} {
		if _, err := Request(ports.Request{Op: op}); err == nil {
			t.Errorf("%#v reached the wire", op)
		}
	}
}

func TestAdoptOutcomesFromTheWire(t *testing.T) {
	got := adoptOutcomes([]*lifecyclev1.AdoptOutcome{
		{Vm: &lifecyclev1.AdoptVM{CloudId: "ins-1", NodeName: "n1", ProviderId: "p1", PrivateIp: "10.0.0.1"}, Result: lifecyclev1.AdoptOutcome_RESULT_ADOPTED, InstanceId: "i1", Message: "m"},
		{Result: lifecyclev1.AdoptOutcome_RESULT_ALREADY_ADOPTED},
		{Result: lifecyclev1.AdoptOutcome_RESULT_REFUSED},
		{},
	})
	want := []ports.AdoptOutcome{
		{VM: ports.AdoptVM{CloudID: "ins-1", NodeName: "n1", ProviderID: "p1", PrivateIP: "10.0.0.1"}, Result: ports.Adopted, InstanceID: "i1", Message: "m"},
		{Result: ports.AlreadyAdopted},
		{Result: ports.AdoptRefused},
		{Result: ports.AdoptUnspecified},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("outcomes %+v, want %+v", got, want)
	}
}
