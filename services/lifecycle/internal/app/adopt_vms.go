package app

import (
	"context"
	"fmt"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// Explicit adoption (AdoptVMs): an operator hands running VMs that
// nodesmith did not create (the prototype's, say) to a group. Unlike a
// group's adoptExisting (adopt.go), the operator names the VMs; the record
// is written by the same code (recordAdoptedLocked). For each VM no
// instance owns yet, in this order:
//  1. the VM must exist in the group's cloud account and region and carry
//     no other cluster's tag (a check-only TagCommand, answered by the
//     cloud adapter), and its Node, when the cluster is watched, must exist
//     with exactly the providerID given (the kubelet's --provider-id);
//  2. the Node gets our group and instance labels;
//  3. the Running record is written and the group's target raised by one;
//  4. the VM is tagged with our cluster, group and instance tags. Tagging
//     comes last: a tagged VM without a record would be an orphan to the
//     reconciler. A failed tagging is reported, not undone: an adopted VM
//     without our tags is still terminated on scale-down
//     (domain.MayTerminate), and running AdoptVMs again tags it.
// New VMs that would take the target beyond the max size refuse the whole
// request. Nothing is created or terminated. Running it again adopts
// nothing twice: owned VMs are reported as already adopted (and tagged
// again).

// MaxAdoptVMs bounds the VMs of one AdoptVMs request.
const MaxAdoptVMs = 100

// adoptCheckTimeout bounds the wait for the cloud adapter's answer.
const adoptCheckTimeout = 30 * time.Second

// AdoptVM is one VM to adopt.
type AdoptVM struct {
	CloudID    string
	NodeName   string
	ProviderID string
	PrivateIP  string
}

// AdoptResult is what happened to one VM.
type AdoptResult int

// Adoption results.
const (
	AdoptResultUnknown AdoptResult = iota
	// AdoptAdopted: adopted now (in a dry run: would be).
	AdoptAdopted
	// AdoptAlready: an instance of the group already owns the VM.
	AdoptAlready
	// AdoptRefused: not adopted, see the message.
	AdoptRefused
)

func (r AdoptResult) String() string {
	switch r {
	case AdoptAdopted:
		return "adopted"
	case AdoptAlready:
		return "already_adopted"
	case AdoptRefused:
		return "refused"
	}
	return "unknown"
}

// AdoptOutcome is the outcome for one VM.
type AdoptOutcome struct {
	VM         AdoptVM
	Result     AdoptResult
	InstanceID string
	Message    string
}

// AdoptRequest is an AdoptVMs request.
type AdoptRequest struct {
	Group  string
	VMs    []AdoptVM
	DryRun bool
}

// TagResult is the cloud adapter's answer to a TagCommand.
type TagResult struct {
	RequestID string
	Results   []TagVMResult
	// Err is set when the whole call failed.
	Err *domain.CloudError
}

// TagVMResult is the answer about one VM.
type TagVMResult struct {
	CloudID   string
	State     domain.CloudState
	PrivateIP string
	// Err is set when the VM was refused, missing or not tagged.
	Err *domain.CloudError
}

// HandleTagged hands the cloud adapter's answer to the AdoptVMs waiting
// for it; an answer nobody waits for (a leader that restarted, a request
// that timed out) is dropped.
func (nd *nodes) HandleTagged(_ context.Context, r TagResult) error {
	nd.mu.Lock()
	ch, ok := nd.tagWaiters[r.RequestID]
	delete(nd.tagWaiters, r.RequestID)
	nd.mu.Unlock()
	if !ok {
		nd.log.Debug("tag result of an unknown request dropped", "request", r.RequestID)
		return nil
	}
	ch <- r // buffered: one answer per waiter
	return nil
}

// tagAndWait publishes a TagCommand and waits for its answer.
func (nd *nodes) tagAndWait(ctx context.Context, c ports.TagCommand) (TagResult, error) {
	ch := make(chan TagResult, 1)
	nd.mu.Lock()
	if nd.tagWaiters == nil {
		nd.tagWaiters = map[string]chan TagResult{}
	}
	nd.tagWaiters[c.RequestID] = ch
	nd.mu.Unlock()
	defer func() {
		nd.mu.Lock()
		delete(nd.tagWaiters, c.RequestID)
		nd.mu.Unlock()
	}()
	if err := nd.cmds.Tag(ctx, c); err != nil {
		return TagResult{}, &domain.Error{Code: contract.CodeUnavailable, Msg: "asking the cloud adapter about the VMs", Err: err}
	}
	wctx, cancel := context.WithTimeout(ctx, adoptCheckTimeout)
	defer cancel()
	select {
	case r := <-ch:
		if r.Err != nil {
			return r, &domain.Error{Code: contract.CodeUnavailable,
				Msg: fmt.Sprintf("the cloud adapter could not describe the VMs: %s: %s", r.Err.Code, r.Err.Message)}
		}
		return r, nil
	case <-wctx.Done():
		return TagResult{}, &domain.Error{Code: contract.CodeUnavailable, Msg: "no answer from the cloud adapter about the VMs", Err: wctx.Err()}
	}
}

// AdoptVMs adopts running VMs into a group (see the top of this file). It
// returns one outcome per VM, in the request's order. Errors: invalid
// request, unknown group, OutOfRange beyond the max size, Unavailable when
// the cloud adapter or the store does not answer (nothing or only some VMs
// adopted: run it again).
func (nd *nodes) AdoptVMs(ctx context.Context, req AdoptRequest) (outs []AdoptOutcome, revs Revisions, err error) {
	defer func() {
		nd.obs.Op("AdoptVMs", domain.CodeOf(err))
		if err != nil {
			nd.log.Info("operation refused", "op", "AdoptVMs", "group", req.Group, "code", domain.CodeOf(err).String(), "err", err)
		}
	}()
	if err := validateAdopt(req); err != nil {
		return nil, revs, err
	}
	out := make([]AdoptOutcome, len(req.VMs))
	for i, vm := range req.VMs {
		out[i] = AdoptOutcome{VM: vm, InstanceID: domain.AdoptedInstanceID(req.Group, vm.ProviderID)}
	}

	// 1. What the records say.
	nd.mu.Lock()
	if !nd.loaded {
		nd.mu.Unlock()
		return nil, revs, ErrNotLeader
	}
	g, err := nd.groupLocked(req.Group)
	if err != nil {
		nd.mu.Unlock()
		return nil, revs, err
	}
	tmpl := g.g.Template
	cands := nd.planAdoptLocked(g.g, out)
	target, maxSize := g.g.TargetSize, g.g.MaxSize
	nd.mu.Unlock()
	if target+len(cands) > maxSize {
		return nil, revs, domain.Errorf(contract.CodeOutOfRange,
			"adopting %d VMs would take node group %q's target from %d to %d, beyond its max size %d: raise maxSize first",
			len(cands), req.Group, target, target+len(cands), maxSize)
	}

	// 1b. The Nodes (when the cluster is watched).
	if nd.cluster != nil && len(cands) > 0 {
		if !nd.known.isSynced() {
			return nil, revs, domain.Errorf(contract.CodeUnavailable, "the Node cache is not synced yet: retry")
		}
		cands = keep(cands, func(c candidate) bool {
			vm := req.VMs[c.i]
			n, ok := nd.Node(vm.NodeName)
			switch {
			case !ok:
				out[c.i].refuse("no Node %q in the cluster", vm.NodeName)
			case n.ProviderID != vm.ProviderID:
				out[c.i].refuse("Node %q has providerID %q, not %q (the kubelet's --provider-id must name the VM)", vm.NodeName, n.ProviderID, vm.ProviderID)
			default:
				if out[c.i].VM.PrivateIP == "" {
					out[c.i].VM.PrivateIP = n.InternalIP
				}
				return true
			}
			return false
		})
	}

	// 1c. The cloud.
	t := targetOf(tmpl)
	if len(cands) > 0 {
		res, err := nd.tagAndWait(ctx, nd.tagCommand(t, req.Group, out, cands, true))
		if err != nil {
			return nil, revs, err
		}
		byCloud := map[string]TagVMResult{}
		for _, r := range res.Results {
			byCloud[r.CloudID] = r
		}
		cands = keep(cands, func(c candidate) bool {
			r, ok := byCloud[req.VMs[c.i].CloudID]
			switch {
			case !ok:
				out[c.i].refuse("the cloud adapter did not report VM %s", req.VMs[c.i].CloudID)
			case r.Err != nil && r.Err.Kind == contract.ErrorKindNotFound:
				out[c.i].refuse("no VM %s in %s/%s/%s", req.VMs[c.i].CloudID, t.Provider, t.Account, t.Region)
			case r.Err != nil:
				out[c.i].refuse("VM %s refused by the cloud adapter: %s: %s", req.VMs[c.i].CloudID, r.Err.Code, r.Err.Message)
			case r.State != domain.CloudRunning:
				out[c.i].refuse("VM %s is not running (%s)", req.VMs[c.i].CloudID, r.State)
			default:
				if r.PrivateIP != "" {
					out[c.i].VM.PrivateIP = r.PrivateIP
				}
				return true
			}
			return false
		})
	}
	if req.DryRun {
		for _, c := range cands {
			out[c.i].Result, out[c.i].Message = AdoptAdopted, "would be adopted (dry run)"
		}
		return out, revs, nil
	}

	// 2. Node labels.
	if nd.cluster != nil {
		cands = keep(cands, func(c candidate) bool {
			pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			err := nd.cluster.PatchNode(pctx, req.VMs[c.i].NodeName, map[string]string{LabelGroup: req.Group, LabelInstance: c.id}, nil, nil)
			if err != nil {
				out[c.i].refuse("labelling Node %q failed: %v (run the adoption again)", req.VMs[c.i].NodeName, err)
				return false
			}
			return true
		})
	}

	// 3. Records, under the lock, after checking again what may have
	// changed meanwhile.
	var failed error
	if len(cands) > 0 {
		nd.mu.Lock()
		g, err := nd.groupLocked(req.Group)
		if !nd.loaded {
			err = ErrNotLeader
		}
		if err != nil {
			nd.mu.Unlock()
			return nil, revs, err
		}
		for _, c := range cands {
			o := &out[c.i]
			if nd.ownedLocked(g.g, o) {
				continue
			}
			if g.g.TargetSize >= g.g.MaxSize {
				o.refuse("node group %q is at its max size %d", g.g.ID, g.g.MaxSize)
				continue
			}
			in, r, err := nd.recordAdoptedLocked(ctx, g, o.VM.NodeName, o.VM.ProviderID, o.VM.CloudID, o.VM.PrivateIP)
			if err != nil {
				if nd.ownedLocked(g.g, o) { // a concurrent adoption won
					continue
				}
				o.refuse("recording the instance failed: %v (run the adoption again)", err)
				failed = err
				continue
			}
			revs.inst(r.Instances)
			revs.group(r.Groups)
			o.Result, o.InstanceID, o.Message = AdoptAdopted, in.ID, "adopted as a Running instance"
			nd.log.Info("VM adopted", "group", g.g.ID, "instance", in.ID, "cloud_id", o.VM.CloudID, "node", o.VM.NodeName, "target", g.g.TargetSize)
			if nd.notify != nil {
				nd.notify.Notify(ports.Notice{Node: o.VM.NodeName, Reason: ReasonAdopted,
					Message: fmt.Sprintf("Adopted by node group %s as instance %s (VM %s, explicit adoption)", in.Group, in.ID, o.VM.CloudID)})
			}
		}
		nd.mu.Unlock()
		nd.Wake()
	}

	// 4. Tags, on every VM the group owns now (again on those adopted
	// before: a run that stopped before tagging converges).
	var owned []candidate
	for i, o := range out {
		if o.Result == AdoptAdopted || o.Result == AdoptAlready {
			owned = append(owned, candidate{i: i, id: o.InstanceID})
		}
	}
	if len(owned) > 0 {
		res, err := nd.tagAndWait(ctx, nd.tagCommand(t, req.Group, out, owned, false))
		if err != nil {
			for _, c := range owned {
				out[c.i].Message += "; tagging the VM not confirmed: " + err.Error() + " (run the adoption again)"
			}
		} else {
			for _, r := range res.Results {
				if r.Err == nil {
					continue
				}
				for _, c := range owned {
					if out[c.i].VM.CloudID == r.CloudID {
						out[c.i].Message += fmt.Sprintf("; tagging the VM failed: %s: %s (it is still terminated on scale-down)", r.Err.Code, r.Err.Message)
					}
				}
			}
		}
	}
	if failed != nil {
		return out, revs, &domain.Error{Code: contract.CodeUnavailable, Msg: "recording some adopted VMs failed", Err: failed}
	}
	return out, revs, nil
}
