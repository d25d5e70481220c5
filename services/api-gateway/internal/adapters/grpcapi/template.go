package grpcapi

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/nodesmith/nodesmith/libs/contract"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/app"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// DefaultMaxPods is the kubelet's default pod capacity, used when a node
// template does not state one: CA cannot place a pod on a template node
// without a pods capacity.
const DefaultMaxPods = 110

// TemplateNode builds the v1.Node a new VM of group g becomes, which CA
// uses to scale the group from zero: capacity and allocatable from the node
// template, the well-known labels from the instance template (the node
// template's own labels win, except hostname), taints, and a Ready
// condition. It is Unimplemented for a group without a node template and
// FailedPrecondition for a template CA could not use.
func TemplateNode(g *domain.NodeGroup) (*corev1.Node, error) {
	nt := g.NodeTemplate
	if nt == nil {
		return nil, domain.Errorf(contract.CodeUnimplemented, "node group %q has no node template", g.ID)
	}
	it := g.InstanceTemplate
	if it == nil {
		it = &domain.InstanceTemplate{}
	}
	name := TemplateNodeName(g.ID)
	arch := cmp.Or(it.Arch, "amd64")
	os := cmp.Or(it.OS, "linux")

	labels := map[string]string{
		corev1.LabelArchStable:    arch,
		corev1.LabelOSStable:      os,
		"beta.kubernetes.io/arch": arch,
		"beta.kubernetes.io/os":   os,
	}
	if t := it.InstanceType; t != "" {
		labels[corev1.LabelInstanceTypeStable] = t
		labels[corev1.LabelInstanceType] = t
	}
	if z := it.Zone; z != "" {
		labels[corev1.LabelTopologyZone] = z
		labels[corev1.LabelFailureDomainBetaZone] = z
	}
	if r := it.Region; r != "" {
		labels[corev1.LabelTopologyRegion] = r
		labels[corev1.LabelFailureDomainBetaRegion] = r
	}
	maps.Copy(labels, nt.Labels)
	labels[corev1.LabelHostname] = name
	labels[app.GroupLabel] = g.ID

	capacity, err := quantities("capacity", nt.Capacity)
	if err != nil {
		return nil, domain.Errorf(contract.CodeFailedPrecondition, "node group %q: %v", g.ID, err)
	}
	if _, ok := capacity[corev1.ResourcePods]; !ok {
		capacity[corev1.ResourcePods] = *resource.NewQuantity(DefaultMaxPods, resource.DecimalSI)
	}
	// Allocatable defaults to capacity per resource: a template that only
	// states capacity still yields a schedulable node.
	allocatable := capacity.DeepCopy()
	explicit, err := quantities("allocatable", nt.Allocatable)
	if err != nil {
		return nil, domain.Errorf(contract.CodeFailedPrecondition, "node group %q: %v", g.ID, err)
	}
	maps.Copy(allocatable, explicit)

	var taints []corev1.Taint
	for _, t := range nt.Taints {
		effect := corev1.TaintEffect(t.Effect)
		switch effect {
		case corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute:
		default:
			return nil, domain.Errorf(contract.CodeFailedPrecondition, "node group %q: taint %q has invalid effect %q", g.ID, t.Key, t.Effect)
		}
		if t.Key == "" {
			return nil, domain.Errorf(contract.CodeFailedPrecondition, "node group %q: taint with an empty key", g.ID)
		}
		taints = append(taints, corev1.Taint{Key: t.Key, Value: t.Value, Effect: effect})
	}

	var annotations map[string]string
	if len(nt.Annotations) > 0 {
		annotations = maps.Clone(nt.Annotations)
	}
	cond := func(t corev1.NodeConditionType, s corev1.ConditionStatus, reason string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: s, Reason: reason}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: annotations},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: allocatable,
			Phase:       corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady"),
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID"),
			},
			NodeInfo: corev1.NodeSystemInfo{Architecture: arch, OperatingSystem: os},
		},
	}, nil
}

func quantities(what string, in map[string]string) (corev1.ResourceList, error) {
	out := make(corev1.ResourceList, len(in)+1)
	// Sorted so the first bad entry reported is stable.
	for _, k := range slices.Sorted(maps.Keys(in)) {
		q, err := resource.ParseQuantity(strings.TrimSpace(in[k]))
		if err != nil {
			return nil, fmt.Errorf("%s %s: invalid quantity %q: %w", what, k, in[k], err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("%s %s: negative quantity %q", what, k, in[k])
		}
		out[corev1.ResourceName(k)] = q
	}
	return out, nil
}

// TemplateNodeName is the name (and hostname label) of a group's template
// node: a valid DNS label derived from the group id.
func TemplateNodeName(group string) string {
	var b strings.Builder
	b.WriteString("nodesmith-template-")
	for _, r := range strings.ToLower(group) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') || r == '-' {
			b.WriteRune(r)
		} else {
			b.WriteByte('-')
		}
	}
	name := strings.TrimRight(b.String(), "-")
	if len(name) > 63 {
		name = strings.TrimRight(name[:63], "-")
	}
	return name
}
