package natsreq

import (
	"fmt"

	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/adapters/stateconv"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/ports"
)

// The wire shape of the operations (nodesmith.lifecycle.v1), converted
// here only: the application speaks ports' operation types (and the
// records they carry are domain types, converted by stateconv).

var catalogKinds = map[string]lifecyclev1.CatalogKind{
	"templates": lifecyclev1.CatalogKind_CATALOG_KIND_TEMPLATE,
	"accounts":  lifecyclev1.CatalogKind_CATALOG_KIND_ACCOUNT,
	"hooks":     lifecyclev1.CatalogKind_CATALOG_KIND_HOOK,
}

var actions = map[ports.InstanceActionKind]lifecyclev1.InstanceAction_Action{
	ports.ActionUnspecified: lifecyclev1.InstanceAction_ACTION_UNSPECIFIED,
	ports.ActionRetry:       lifecyclev1.InstanceAction_ACTION_RETRY,
	ports.ActionForceDelete: lifecyclev1.InstanceAction_ACTION_FORCE_DELETE,
	ports.ActionCancel:      lifecyclev1.InstanceAction_ACTION_CANCEL,
}

// Request returns req's wire shape, or an error for an operation the wire
// cannot carry (an unknown catalog kind or action, a nil operation).
func Request(req ports.Request) (*lifecyclev1.Request, error) {
	w := &lifecyclev1.Request{RequestId: req.ID}
	switch op := req.Op.(type) {
	case ports.IncreaseSize:
		w.Op = &lifecyclev1.Request_IncreaseSize{IncreaseSize: &lifecyclev1.IncreaseSize{Group: op.Group, Delta: op.Delta}}
	case ports.DecreaseTargetSize:
		w.Op = &lifecyclev1.Request_DecreaseTargetSize{DecreaseTargetSize: &lifecyclev1.DecreaseTargetSize{Group: op.Group, Delta: op.Delta}}
	case ports.DeleteNodes:
		nodes := make([]*lifecyclev1.NodeRef, len(op.Nodes))
		for i, n := range op.Nodes {
			nodes[i] = &lifecyclev1.NodeRef{ProviderId: n.ProviderID, Name: n.Name, Labels: n.Labels, Annotations: n.Annotations}
		}
		w.Op = &lifecyclev1.Request_DeleteNodes{DeleteNodes: &lifecyclev1.DeleteNodes{Group: op.Group, Nodes: nodes}}
	case ports.SetTargetSize:
		w.Op = &lifecyclev1.Request_SetTargetSize{SetTargetSize: &lifecyclev1.SetTargetSize{Group: op.Group, TargetSize: op.TargetSize}}
	case ports.PutGroup:
		w.Op = &lifecyclev1.Request_PutGroup{PutGroup: &lifecyclev1.PutGroup{Group: stateconv.GroupRecord(op.Group), ExpectedRevision: op.ExpectedRevision, Upsert: op.Upsert}}
	case ports.DeleteGroup:
		w.Op = &lifecyclev1.Request_DeleteGroup{DeleteGroup: &lifecyclev1.DeleteGroup{Id: op.ID, ExpectedRevision: op.ExpectedRevision}}
	case ports.InstanceAction:
		a, ok := actions[op.Action]
		if !ok {
			return nil, fmt.Errorf("unknown instance action %d", op.Action)
		}
		w.Op = &lifecyclev1.Request_InstanceAction{InstanceAction: &lifecyclev1.InstanceAction{InstanceId: op.InstanceID, Action: a}}
	case ports.PutCatalogEntry:
		w.Op = &lifecyclev1.Request_PutCatalogEntry{PutCatalogEntry: &lifecyclev1.PutCatalogEntry{
			Entry: stateconv.CatalogEntryRecord(op.Entry), ExpectedRevision: op.ExpectedRevision, Upsert: op.Upsert}}
	case ports.DeleteCatalogEntry:
		k, ok := catalogKinds[op.Kind]
		if !ok {
			return nil, fmt.Errorf("unknown catalog kind %q", op.Kind)
		}
		w.Op = &lifecyclev1.Request_DeleteCatalogEntry{DeleteCatalogEntry: &lifecyclev1.DeleteCatalogEntry{
			Kind: k, Name: op.Name, ExpectedRevision: op.ExpectedRevision}}
	case ports.ReleaseOrphans:
		w.Op = &lifecyclev1.Request_ReleaseOrphans{ReleaseOrphans: &lifecyclev1.ReleaseOrphans{}}
	case ports.AdoptVMs:
		a := &lifecyclev1.AdoptVMs{Group: op.Group, DryRun: op.DryRun}
		for _, vm := range op.VMs {
			a.Vms = append(a.Vms, &lifecyclev1.AdoptVM{CloudId: vm.CloudID, NodeName: vm.NodeName, ProviderId: vm.ProviderID, PrivateIp: vm.PrivateIP})
		}
		w.Op = &lifecyclev1.Request_AdoptVms{AdoptVms: a}
	default:
		return nil, fmt.Errorf("unknown lifecycle operation %T", req.Op)
	}
	return w, nil
}

func adoptResult(r lifecyclev1.AdoptOutcome_Result) ports.AdoptResult {
	switch r {
	case lifecyclev1.AdoptOutcome_RESULT_ADOPTED:
		return ports.Adopted
	case lifecyclev1.AdoptOutcome_RESULT_ALREADY_ADOPTED:
		return ports.AlreadyAdopted
	case lifecyclev1.AdoptOutcome_RESULT_REFUSED:
		return ports.AdoptRefused
	default:
		return ports.AdoptUnspecified
	}
}

func adoptOutcomes(outs []*lifecyclev1.AdoptOutcome) []ports.AdoptOutcome {
	if outs == nil {
		return nil
	}
	res := make([]ports.AdoptOutcome, len(outs))
	for i, o := range outs {
		vm := o.GetVm()
		res[i] = ports.AdoptOutcome{
			VM:         ports.AdoptVM{CloudID: vm.GetCloudId(), NodeName: vm.GetNodeName(), ProviderID: vm.GetProviderId(), PrivateIP: vm.GetPrivateIp()},
			Result:     adoptResult(o.GetResult()),
			InstanceID: o.GetInstanceId(),
			Message:    o.GetMessage(),
		}
	}
	return res
}
