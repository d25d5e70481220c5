package app

import (
	"fmt"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// Notice reasons recorded on Nodes (Kubernetes Events).
const (
	ReasonRunning           = "InstanceRunning"
	ReasonDeletionRequested = "InstanceDeletionRequested"
	ReasonTerminating       = "InstanceTerminating"
	ReasonDeleted           = "InstanceDeleted"
	ReasonCreationFailed    = "InstanceCreationFailed"
	ReasonNodeDeleted       = "NodeDeletedExternally"
	ReasonNodeBack          = "NodeRegisteredAgain"
	ReasonAdopted           = "NodeAdopted"
	ReasonAdoptionAmbiguous = "NodeAdoptionAmbiguous"
	ReasonAdoptionRefused   = "NodeAdoptionRefused"
)

// notifyLocked records the transitions of an instance that has (or had) a
// Node as notices on that Node. Instances that never had one (cancelled,
// failed before joining) are only logged: there is nothing to describe.
func (a *App) notifyLocked(old domain.Instance, res domain.Result) {
	if a.notify == nil || a.cluster == nil {
		return
	}
	in := res.Instance
	_, hasNode := a.nodes.forInstance(in)
	hadNode := old.State >= domain.StateRunning || hasNode
	send := func(warning bool, reason, format string, args ...any) {
		a.notify.Notify(ports.Notice{Node: in.Node(), Warning: warning, Reason: reason,
			Message: fmt.Sprintf(format, args...)})
	}
	for _, m := range res.Moves {
		switch {
		case m.To == domain.StateRunning:
			send(false, ReasonRunning, "Instance %s of node group %s is Running (VM %s)", in.ID, in.Group, in.CloudID)
		case !hadNode:
		case m.To == domain.StatePendingDeletion:
			send(false, ReasonDeletionRequested, "Instance %s of node group %s is being deleted: %s", in.ID, in.Group, m.Reason)
		case m.To == domain.StateDeleting:
			send(false, ReasonTerminating, "Terminating VM %s of instance %s: %s", in.CloudID, in.ID, m.Reason)
		case m.To == domain.StateDeleted:
			send(false, ReasonDeleted, "Instance %s of node group %s is deleted: %s", in.ID, in.Group, m.Reason)
		}
	}
	switch {
	case in.NodeLost() && !old.NodeLost():
		send(true, ReasonNodeDeleted, "Node deleted by someone else; instance %s of node group %s is replaced unless the node registers again by %s",
			in.ID, in.Group, in.Deadline.UTC().Format("2006-01-02T15:04:05Z"))
	case old.NodeLost() && !in.NodeLost() && in.State == domain.StateRunning:
		send(false, ReasonNodeBack, "Node registered again; instance %s of node group %s stays", in.ID, in.Group)
	case res.CreationFailed && hasNode && in.LastError != nil:
		send(true, ReasonCreationFailed, "Instance %s of node group %s failed: %s: %s", in.ID, in.Group, in.LastError.Code, in.LastError.Message)
	}
}
