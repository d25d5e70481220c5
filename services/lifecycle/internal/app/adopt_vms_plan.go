package app

import (
	"fmt"

	"github.com/nodesmith/nodesmith/libs/contract"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// AdoptVMs' checks and planning (see adopt_vms.go).

// candidate is a VM AdoptVMs will adopt.
type candidate struct {
	i  int // index in the request and the outcomes
	id string
}

func (o *AdoptOutcome) refuse(format string, args ...any) {
	o.Result, o.Message = AdoptRefused, fmt.Sprintf(format, args...)
}

func keep(cs []candidate, f func(candidate) bool) []candidate {
	var out []candidate
	for _, c := range cs {
		if f(c) {
			out = append(out, c)
		}
	}
	return out
}

// planAdoptLocked sets the outcome of VMs the records decide (owned
// already, or owned by something else) and returns the others.
func (nd *nodes) planAdoptLocked(g domain.NodeGroup, out []AdoptOutcome) []candidate {
	var cands []candidate
	for i := range out {
		o := &out[i]
		if nd.ownedLocked(g, o) {
			continue
		}
		if id, ok := g.CloudIDFromProviderID(o.VM.ProviderID); !ok || id != o.VM.CloudID {
			o.refuse("providerID %q does not name VM %s under node group %q's providerID template %q",
				o.VM.ProviderID, o.VM.CloudID, g.ID, g.Template.ProviderIDTemplate)
			continue
		}
		cands = append(cands, candidate{i: i, id: o.InstanceID})
	}
	return cands
}

// ownedLocked reports whether an instance owns o's VM, its providerID or
// its Node, and sets o's outcome if so: already adopted when it is the
// group's instance of that very VM, refused otherwise.
func (nd *nodes) ownedLocked(g domain.NodeGroup, o *AdoptOutcome) bool {
	for _, r := range nd.insts {
		in := r.Instance
		if in.State == domain.StateDeleted {
			continue
		}
		sameVM := in.CloudID != "" && in.CloudID == o.VM.CloudID
		if !sameVM && in.ProviderID != o.VM.ProviderID && in.Node() != o.VM.NodeName {
			continue
		}
		if sameVM && in.Group == g.ID && in.ProviderID == o.VM.ProviderID {
			o.Result, o.InstanceID, o.Message = AdoptAlready, in.ID, "already an instance of the group ("+in.State.String()+")"
			return true
		}
		o.refuse("instance %s of node group %q already owns VM %s, providerID %q or Node %q", in.ID, in.Group, in.CloudID, in.ProviderID, in.Node())
		return true
	}
	return false
}

func (nd *nodes) tagCommand(t ports.Target, group string, out []AdoptOutcome, cs []candidate, checkOnly bool) ports.TagCommand {
	refs := make([]ports.InstanceRef, len(cs))
	for i, c := range cs {
		refs[i] = ports.InstanceRef{InstanceID: out[c.i].InstanceID, Group: group, CloudID: out[c.i].VM.CloudID, Adopted: true}
	}
	return ports.TagCommand{RequestID: "adopt-" + nd.random(16), Target: t, ClusterID: nd.opts.ClusterID, Instances: refs, CheckOnly: checkOnly}
}

func validateAdopt(req AdoptRequest) error {
	if req.Group == "" {
		return domain.Errorf(contract.CodeInvalidArgument, "group: required")
	}
	if len(req.VMs) == 0 || len(req.VMs) > MaxAdoptVMs {
		return domain.Errorf(contract.CodeInvalidArgument, "instances: between 1 and %d VMs, got %d", MaxAdoptVMs, len(req.VMs))
	}
	seen := map[string]string{}
	for i, vm := range req.VMs {
		for _, f := range []struct{ name, v string }{{"cloudID", vm.CloudID}, {"nodeName", vm.NodeName}, {"providerID", vm.ProviderID}} {
			if f.v == "" {
				return domain.Errorf(contract.CodeInvalidArgument, "instances[%d].%s: required", i, f.name)
			}
			k := f.name + "=" + f.v
			if prev, dup := seen[k]; dup {
				return domain.Errorf(contract.CodeInvalidArgument, "instances[%d].%s: %q repeats %s", i, f.name, f.v, prev)
			}
			seen[k] = fmt.Sprintf("instances[%d]", i)
		}
	}
	return nil
}
