package kubesim

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
)

// The stand-ins run no containers and this API server has no scheduler or
// controller-manager: a test that wants workload on its Nodes binds Pods
// itself and plays the missing parts with these.

// RunPod creates p bound to node (spec.nodeName, as the scheduler's
// binding leaves it) and reports it Running and Ready, as its kubelet
// would once the containers started. Only a Running pod counts for a
// PodDisruptionBudget: the Eviction API removes a Pending one without
// consulting the budget.
func RunPod(ctx context.Context, client kubernetes.Interface, p *corev1.Pod, node string) (*corev1.Pod, error) {
	p = p.DeepCopy()
	p.Spec.NodeName = node
	pods := client.CoreV1().Pods(p.Namespace)
	got, err := pods.Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("creating pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	now := metav1.Now()
	got.Status.Phase = corev1.PodRunning
	got.Status.StartTime = &now
	got.Status.Conditions = []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodInitialized, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.ContainersReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now},
	}
	got, err = pods.UpdateStatus(ctx, got, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("reporting pod %s/%s Running: %w", p.Namespace, p.Name, err)
	}
	return got, nil
}

// AllowDisruptions writes the status the disruption controller would give
// the PodDisruptionBudget ns/name: observed, with allowed disruptions
// (without it the Eviction API refuses every eviction the budget covers).
// The API server records each eviction it admits in status.disruptedPods
// (pod name and time) and lowers disruptionsAllowed: the budget is then an
// audit of the evictions, which a bare pod delete never appears in.
func AllowDisruptions(ctx context.Context, client kubernetes.Interface, ns, name string, allowed int32) error {
	pdbs := client.PolicyV1().PodDisruptionBudgets(ns)
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		pdb, err := pdbs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		pdb.Status.ObservedGeneration = pdb.Generation
		pdb.Status.DisruptionsAllowed = allowed
		pdb.Status.CurrentHealthy = allowed
		pdb.Status.ExpectedPods = allowed
		pdb.Status.Conditions = []metav1.Condition{{
			Type: policyv1.DisruptionAllowedCondition, Status: metav1.ConditionTrue,
			Reason: policyv1.SufficientPodsReason, LastTransitionTime: metav1.Now(), ObservedGeneration: pdb.Generation,
		}}
		_, err = pdbs.UpdateStatus(ctx, pdb, metav1.UpdateOptions{})
		return err
	})
}
