package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/nodesmith/nodesmith/libs/contract"
)

// Nodes marks a Node as about to be reclaimed.
type Nodes struct {
	client corev1client.NodeInterface
}

// NewNodes returns a marker using client.
func NewNodes(client corev1client.NodeInterface) *Nodes { return &Nodes{client: client} }

// Mark taints node with contract.TaintSpotInterruption and annotates it
// with the notice, in one patch; it reports whether it wrote anything. A
// Node that already carries the taint and the same termination time is
// left alone (an agent restarted after marking its Node, or a notice seen
// again), so marking is idempotent. The patch carries the resourceVersion
// it was computed from: the taint list is replaced whole (Node taints have
// no merge key), and a concurrent writer's change makes it fail with a
// Conflict instead of being lost; the caller retries.
func (n *Nodes) Mark(ctx context.Context, node string, notice Notice, source contract.SpotSource, observedAt time.Time) (bool, error) {
	cur, err := n.client.Get(ctx, node, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("getting Node %s: %w", node, err)
	}
	when := notice.TerminationTime.UTC().Format(time.RFC3339)
	tainted := slices.ContainsFunc(cur.Spec.Taints, func(t corev1.Taint) bool {
		return t.Key == contract.TaintSpotInterruption && t.Effect == contract.TaintSpotInterruptionEffect
	})
	if tainted && cur.Annotations[contract.AnnotationSpotTerminationTime] == when {
		return false, nil
	}
	taints := slices.DeleteFunc(slices.Clone(cur.Spec.Taints), func(t corev1.Taint) bool {
		return t.Key == contract.TaintSpotInterruption
	})
	taints = append(taints, corev1.Taint{
		Key:    contract.TaintSpotInterruption,
		Value:  string(source),
		Effect: contract.TaintSpotInterruptionEffect,
	})
	annotations := map[string]string{
		contract.AnnotationSpotTerminationTime: when,
		contract.AnnotationSpotNoticeSource:    string(source),
	}
	// The first observation stays: a later, moved notice must not reset
	// the start of "notice to replacement Running".
	if _, ok := cur.Annotations[contract.AnnotationSpotNoticeObservedAt]; !ok {
		annotations[contract.AnnotationSpotNoticeObservedAt] = observedAt.UTC().Format(time.RFC3339)
	}
	patch := map[string]any{
		"metadata": map[string]any{"resourceVersion": cur.ResourceVersion, "annotations": annotations},
		"spec":     map[string]any{"taints": taints},
	}
	body, err := json.Marshal(patch)
	if err != nil {
		return false, err
	}
	if _, err := n.client.Patch(ctx, node, types.MergePatchType, body, metav1.PatchOptions{FieldManager: FieldManager}); err != nil {
		return false, fmt.Errorf("patching Node %s: %w", node, err)
	}
	return true, nil
}

// FieldManager names the agent's writes in the Node's managedFields.
const FieldManager = "nodesmith-node-agent"

// retryable reports whether an API error may pass: a conflict (recompute
// from the new Node), throttling, timeouts, server errors, a lost
// connection, and a Node not found (not registered yet, or a stale
// cache). Refusals that a retry cannot change (forbidden, unauthorized,
// invalid) are not.
func retryable(err error) bool {
	switch {
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err), apierrors.IsInvalid(err),
		apierrors.IsBadRequest(err), apierrors.IsMethodNotSupported(err), apierrors.IsNotAcceptable(err):
		return false
	default:
		return true
	}
}
