package app

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// adoption is a Node that exactly one group recognises (see the rules in
// domain/adopt.go).
type adoption struct {
	node    ports.Node
	group   string
	cloudID string
}

// adoptionsLocked finds the Nodes to adopt: Ready, with a providerID, owned
// by no instance (by providerID, name, cloud id or our instance label), and
// recognised by exactly one group that adopts. A Node that several groups
// recognise, or whose group is at its max size, is reported once (log and
// notice) and left alone.
func (nd *nodes) adoptionsLocked() []adoption {
	if nd.cluster == nil || !nd.known.isSynced() {
		return nil
	}
	var adopters []domain.NodeGroup
	for _, id := range nd.sortedGroupIDsLocked() {
		if g := nd.groups[id].g; g.CanAdopt() {
			adopters = append(adopters, g)
		}
	}
	if len(adopters) == 0 {
		return nil
	}
	nodeNames := make(map[string]bool, len(nd.insts))
	cloudIDs := make(map[string]bool, len(nd.insts))
	for _, r := range nd.insts {
		nodeNames[r.Instance.Node()] = true
		if r.Instance.CloudID != "" {
			cloudIDs[r.Instance.CloudID] = true
		}
	}
	nodes := nd.known.all()
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	seen := make(map[string]bool, len(nodes))
	var out []adoption
	for _, n := range nodes {
		seen[n.Name] = true
		if !n.Ready || n.ProviderID == "" || nodeNames[n.Name] {
			continue
		}
		if _, owned := nd.instanceByProviderIDLocked(n.ProviderID); owned {
			continue
		}
		if id := n.Labels[LabelInstance]; id != "" {
			if _, owned := nd.insts[id]; owned {
				continue
			}
		}
		var groups []string
		var cloudID string
		for _, g := range adopters {
			taints := make([]domain.Taint, len(n.Taints))
			for i, t := range n.Taints {
				taints[i] = domain.Taint(t)
			}
			if !g.NodeTemplate.MatchesNode(n.Labels, n.Annotations, taints) {
				continue
			}
			if id, ok := g.CloudIDFromProviderID(n.ProviderID); ok {
				groups = append(groups, g.ID)
				cloudID = id
			}
		}
		switch {
		case len(groups) == 0:
			continue
		case len(groups) > 1:
			nd.reportAdoptionLocked(n.Name, true, ReasonAdoptionAmbiguous,
				fmt.Sprintf("Node matches node groups %s, which all adopt existing nodes; adopt it explicitly by making exactly one group's node template match", strings.Join(groups, ", ")))
			continue
		case cloudIDs[cloudID]:
			nd.reportAdoptionLocked(n.Name, true, ReasonAdoptionRefused,
				fmt.Sprintf("Node names VM %s, which instance records already own under another providerID or name (a join script without the kubelet's --provider-id?)", cloudID))
			continue
		}
		g := nd.groups[groups[0]].g
		if g.TargetSize >= g.MaxSize {
			nd.reportAdoptionLocked(n.Name, true, ReasonAdoptionRefused,
				fmt.Sprintf("Node group %s is at its max size %d: not adopted", g.ID, g.MaxSize))
			continue
		}
		out = append(out, adoption{node: n, group: g.ID, cloudID: cloudID})
	}
	// Forget reports about Nodes that are gone.
	for name := range nd.adoptReported {
		if !seen[name] {
			delete(nd.adoptReported, name)
		}
	}
	return out
}

// reportAdoptionLocked logs and notifies a Node that cannot be adopted, once
// per reason.
func (nd *nodes) reportAdoptionLocked(node string, warning bool, reason, msg string) {
	if nd.adoptReported[node] == msg {
		return
	}
	nd.adoptReported[node] = msg
	nd.log.Warn("node not adopted", "node", node, "reason", reason, "detail", msg)
	if nd.notify != nil {
		nd.notify.Notify(ports.Notice{Node: node, Warning: warning, Reason: reason, Message: msg})
	}
}

// adopt makes an adoption's Node a Running instance of its group: our labels
// on the Node first (idempotent), then the record (its id derived from the
// providerID, so a retry after a partial failure finds it), then the
// group's target is raised by one, so the autoscaler's target counts it.
// Nothing else is applied to the Node: adding the template's taints to a
// Node that carries pods could evict them.
func (nd *nodes) adopt(ctx context.Context, ad adoption) {
	id := domain.AdoptedInstanceID(ad.group, ad.node.ProviderID)
	log := nd.log.With("node", ad.node.Name, "group", ad.group, "instance", id, "provider_id", ad.node.ProviderID)
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	err := nd.cluster.PatchNode(pctx, ad.node.Name, map[string]string{LabelGroup: ad.group, LabelInstance: id}, nil, nil)
	cancel()
	if err != nil {
		log.Warn("labelling a node to adopt failed; retrying at the next pass", "err", err)
		return
	}
	nd.mu.Lock()
	defer nd.mu.Unlock()
	g, ok := nd.groups[ad.group]
	if !nd.loaded || !ok || !g.g.CanAdopt() || g.g.TargetSize >= g.g.MaxSize {
		return
	}
	if _, owned := nd.instanceByProviderIDLocked(ad.node.ProviderID); owned {
		return
	}
	in, _, err := nd.recordAdoptedLocked(ctx, g, ad.node.Name, ad.node.ProviderID, ad.cloudID, ad.node.InternalIP)
	if err != nil {
		log.Warn("recording an adopted node failed", "err", err)
		return
	}
	delete(nd.adoptReported, ad.node.Name)
	log.Info("existing node adopted", "cloud_id", ad.cloudID, "target", g.g.TargetSize)
	if nd.notify != nil {
		nd.notify.Notify(ports.Notice{Node: ad.node.Name, Reason: ReasonAdopted,
			Message: fmt.Sprintf("Adopted by node group %s as instance %s (VM %s)", in.Group, in.ID, ad.cloudID)})
	}
}

// recordAdoptedLocked is the one place an adoption is recorded (a Node
// the group recognises, adopt above, or a VM an operator hands over,
// AdoptVMs): the Running record (its id derived from the providerID, so a
// retry after a partial failure finds it), then the group's target raised
// by one, so the autoscaler's target counts it. The caller has checked
// that no instance owns the VM and that the target is below the max size.
// An error means nothing was recorded (a conflict refreshed the record:
// our own earlier attempt, or another leader's, now owns the VM).
func (nd *nodes) recordAdoptedLocked(ctx context.Context, g *groupRec, nodeName, providerID, cloudID, privateIP string) (domain.Instance, Revisions, error) {
	var revs Revisions
	in := domain.NewAdoptedInstance(g.g, nodeName, providerID, cloudID, privateIP, nd.clock.Now())
	rev, err := nd.store.CreateInstance(ctx, in)
	if err != nil {
		nd.refreshInstLocked(ctx, in.Group, in.ID)
		return in, revs, err
	}
	revs.inst(rev)
	nd.setInstLocked(in, rev)
	nd.created(ctx)
	if err := nd.setTargetLocked(ctx, g, g.g.TargetSize+1, &revs); err != nil {
		// The instance is recorded (Running instances above the target are
		// left alone); the target stays one short until the next change.
		nd.log.Error("raising the target for an adopted node failed", "group", g.g.ID, "instance", in.ID, "err", err)
	}
	nd.obs.Transition(in.Group, domain.Move{From: domain.StateUnknown, To: domain.StateRunning, Reason: "adopted", Cause: "adopted"})
	return in, revs, nil
}
