package app

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"
	"github.com/nodesmith/nodesmith/libs/logging"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// Labels lifecycle puts on the Nodes it manages, besides the group's own.
const (
	LabelGroup    = "nodesmith.io/node-group"
	LabelInstance = "nodesmith.io/instance-id"
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

// applyLocked applies ev to a cached instance and persists the result. It
// refuses events whose result has effects (use Apply for those).
func (c *cache) applyLocked(ctx context.Context, id string, ev domain.Event) (domain.Result, uint64, error) {
	rec, ok := c.insts[id]
	if !ok {
		return domain.Result{}, 0, domain.Errorf(contract.CodeNotFound, "instance %s not found", id)
	}
	res, err := domain.Apply(rec.Instance, ev, c.envLocked(rec.Instance.Group))
	if err != nil {
		return res, 0, err
	}
	if len(res.Effects) > 0 {
		return res, 0, fmt.Errorf("%s on %s has cluster effects; use Apply", domain.EventName(ev), id)
	}
	return c.commitLocked(ctx, rec.Instance, res)
}

func (c *cache) commitLocked(ctx context.Context, old domain.Instance, res domain.Result) (domain.Result, uint64, error) {
	if !res.Changed {
		return res, 0, nil
	}
	res.Instance = c.stampTraceLocked(ctx, old, res.Instance)
	rev, err := c.writeInstLocked(ctx, res.Instance)
	if err != nil {
		return res, 0, err
	}
	c.observe(ctx, old, res)
	c.observeSpotLocked(ctx, res)
	return res, rev, nil
}

func (c *cache) observe(ctx context.Context, old domain.Instance, res domain.Result) {
	in := res.Instance
	log := logging.WithTrace(ctx, c.log).With("instance", in.ID, "group", in.Group, "state", in.State.String())
	for _, m := range res.Moves {
		c.obs.Transition(in.Group, m)
		log.Info("transition", "from", m.From.String(), "to", m.To.String(), "reason", m.Reason, "attempt", in.Attempt)
	}
	switch {
	case in.NodeLost() && !old.NodeLost():
		log.Warn("node deleted from the cluster by someone else; the instance is replaced unless the node registers again",
			"node", in.Node(), "replace_at", in.Deadline)
	case old.NodeLost() && !in.NodeLost() && in.State == domain.StateRunning:
		log.Info("node registered again; the instance stays", "node", in.Node())
	}
	if res.CreationFailed {
		class := int32(0)
		if in.LastError != nil {
			class = in.LastError.Class
			log.Warn("creation failed; reported to the autoscaler until deleted or retried",
				"code", in.LastError.Code, "class", class, "error", in.LastError.Message)
		}
		c.obs.CreationFailed(in.Group, class)
	} else if in.LastError != nil && in.LastError.Code != domain.CodeNodeDeleted &&
		(old.LastError == nil || *old.LastError != *in.LastError) {
		log.Warn("step failed", "state", in.State.String(), "code", in.LastError.Code,
			"error", in.LastError.Message, "retries", in.Retries, "next_retry_at", in.NextRetryAt)
	}
	c.notifyLocked(old, res)
}

// stampTraceLocked records ctx's trace context on an instance an operation
// just created or released, so its later commands join that trace. Other
// changes keep the context the instance has.
func (c *cache) stampTraceLocked(ctx context.Context, old domain.Instance, in domain.Instance) domain.Instance {
	if !in.Released || old.Released {
		return in
	}
	if carrier := c.tracer.Carrier(ctx); carrier != nil {
		in.TraceContext = carrier
	}
	return in
}

// notifyLocked records the transitions of an instance that has (or had) a
// Node as notices on that Node. Instances that never had one (cancelled,
// failed before joining) are only logged: there is nothing to describe.
func (c *cache) notifyLocked(old domain.Instance, res domain.Result) {
	if c.notify == nil || c.cluster == nil {
		return
	}
	in := res.Instance
	_, hasNode := c.known.forInstance(in)
	hadNode := old.State >= domain.StateRunning || hasNode
	send := func(warning bool, reason, format string, args ...any) {
		c.notify.Notify(ports.Notice{Node: in.Node(), Warning: warning, Reason: reason,
			Message: fmt.Sprintf(format, args...)})
	}
	for _, m := range res.Moves {
		switch {
		case m.To == domain.StateRunning:
			send(false, ReasonRunning, "Instance %s of node group %s is Running (VM %s)", in.ID, in.Group, in.CloudID)
		case !hadNode:
		case m.To == domain.StatePendingDeletion && m.Cause == domain.EventName(domain.SpotInterrupted{}):
			send(true, ReasonSpotInterrupted, "Instance %s of node group %s: the cloud reclaims spot VM %s; draining, a replacement is created: %s", in.ID, in.Group, in.CloudID, m.Reason)
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

// Apply applies ev to instance id: it carries out the result's cluster
// effects first (outside the lock; they are idempotent) and then persists
// the record, re-evaluating against the current record if it changed
// meanwhile. A stale or inapplicable event returns a zero revision and a nil
// error, or an error wrapping domain.ErrInvalidTransition.
func (c *cache) Apply(ctx context.Context, id string, ev domain.Event) (domain.Result, uint64, error) {
	done := map[domain.Effect]bool{}
	for range 3 {
		c.mu.Lock()
		if !c.loaded {
			c.mu.Unlock()
			return domain.Result{}, 0, ErrNotLeader
		}
		rec, ok := c.insts[id]
		if !ok {
			c.mu.Unlock()
			return domain.Result{}, 0, domain.Errorf(contract.CodeNotFound, "instance %s not found", id)
		}
		res, err := domain.Apply(rec.Instance, ev, c.envLocked(rec.Instance.Group))
		if err != nil || !res.Changed {
			c.mu.Unlock()
			return res, 0, err
		}
		var todo []domain.Effect
		for _, e := range res.Effects {
			if !done[e] {
				todo = append(todo, e)
			}
		}
		if len(todo) == 0 {
			res, rev, err := c.commitLocked(ctx, rec.Instance, res)
			c.mu.Unlock()
			if err == nil {
				c.Wake()
			}
			return res, rev, err
		}
		group := c.groups[rec.Instance.Group]
		c.mu.Unlock()
		for _, e := range todo {
			if err := c.effect(ctx, rec.Instance, group, e); err != nil {
				return res, 0, err
			}
			done[e] = true
		}
	}
	return domain.Result{}, 0, domain.Errorf(contract.CodeAborted, "instance %s kept changing while applying %s", id, domain.EventName(ev))
}

func (c *cache) effect(ctx context.Context, in domain.Instance, group *groupRec, e domain.Effect) error {
	if c.cluster == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	switch e.Kind {
	case domain.EffectPatchNode:
		labels := map[string]string{LabelGroup: in.Group, LabelInstance: in.ID}
		var annotations map[string]string
		var taints []ports.Taint
		if group != nil {
			for k, v := range group.g.NodeTemplate.Labels {
				labels[k] = v
			}
			annotations = group.g.NodeTemplate.Annotations
			for _, t := range group.g.NodeTemplate.Taints {
				taints = append(taints, ports.Taint(t))
			}
		}
		if err := c.cluster.PatchNode(ctx, e.NodeName, labels, annotations, taints); err != nil {
			return fmt.Errorf("labelling node %s: %w", e.NodeName, err)
		}
	case domain.EffectDeleteNode:
		if err := c.cluster.DeleteNode(ctx, e.NodeName); err != nil {
			return fmt.Errorf("deleting node %s: %w", e.NodeName, err)
		}
	}
	return nil
}

// HandleEvent applies a worker's result to an instance. Results for unknown
// instances and results that make no sense in the instance's state are
// logged and dropped (returning nil acks them); an error means the result
// should be redelivered (storage trouble, a concurrent write).
func (c *cache) HandleEvent(ctx context.Context, instanceID string, ev domain.Event) error {
	res, _, err := c.Apply(ctx, instanceID, ev)
	log := logging.WithTrace(ctx, c.log).With("instance", instanceID, "event", domain.EventName(ev))
	switch {
	case err == nil:
		if !res.Changed {
			log.Debug("event changed nothing", "why", res.Ignored)
		}
		return nil
	case domain.CodeOf(err) == contract.CodeNotFound:
		log.Info("event for an unknown instance dropped")
		return nil
	case errors.Is(err, domain.ErrInvalidTransition):
		log.Warn("event dropped", "err", err)
		return nil
	}
	return err
}
