package grpcapi

import (
	corev1 "k8s.io/api/core/v1"
)

// PodMilliCPU is the CPU a pod asks the scheduler for, in millicores, by
// Kubernetes' rules: the sum of its containers and sidecars (init
// containers that restart), or the largest init container step if that is
// more, plus the pod overhead.
func PodMilliCPU(pod *corev1.Pod) int64 {
	cpu := func(c *corev1.Container) int64 {
		if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
			return q.MilliValue()
		}
		return 0
	}
	var sum int64
	for i := range pod.Spec.Containers {
		sum += cpu(&pod.Spec.Containers[i])
	}
	var sidecars, initPeak int64
	for i := range pod.Spec.InitContainers {
		c := &pod.Spec.InitContainers[i]
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			sidecars += cpu(c)
			initPeak = max(initPeak, sidecars)
			continue
		}
		initPeak = max(initPeak, sidecars+cpu(c))
	}
	total := max(sum+sidecars, initPeak)
	if q, ok := pod.Spec.Overhead[corev1.ResourceCPU]; ok {
		total += q.MilliValue()
	}
	return max(total, 0)
}
