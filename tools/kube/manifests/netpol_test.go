package manifests_test

import (
	"net"
	"slices"

	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
)

// A small NetworkPolicy evaluator with the API's semantics (a pod selected
// by no policy of a direction is not isolated in it; otherwise a flow
// needs a rule that allows it), for the numeric ports and selectors our
// policies use. All policies are in the nodesmith namespace.

// externalIP stands for any address outside the cluster (a cloud API, a VM).
var externalIP = net.ParseIP("203.0.113.10")

func selects(sel *metav1.LabelSelector, l labels.Set) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(l)
}

func hasType(np networkingv1.NetworkPolicy, t networkingv1.PolicyType) bool {
	return slices.Contains(np.Spec.PolicyTypes, t)
}

func portAllowed(ports []networkingv1.NetworkPolicyPort, port int32) bool {
	if len(ports) == 0 {
		return true
	}
	return slices.ContainsFunc(ports, func(p networkingv1.NetworkPolicyPort) bool {
		return p.Port == nil || p.Port.IntVal == port
	})
}

// peerMatchesPod: does peer admit a pod with labels l in namespace ns?
func peerMatchesPod(peer networkingv1.NetworkPolicyPeer, l labels.Set, ns string) bool {
	if peer.IPBlock != nil {
		return false // pod traffic is selected by labels, not addresses
	}
	nsLabels := labels.Set{"kubernetes.io/metadata.name": ns}
	if peer.NamespaceSelector != nil {
		if !selects(peer.NamespaceSelector, nsLabels) {
			return false
		}
	} else if ns != namespace {
		return false // a bare podSelector means the policy's namespace
	}
	return peer.PodSelector == nil || selects(peer.PodSelector, l)
}

func allowsIngress(pols []networkingv1.NetworkPolicy, to, from labels.Set, fromNS string, port int32) bool {
	isolated := false
	for _, np := range pols {
		if !hasType(np, networkingv1.PolicyTypeIngress) || !selects(&np.Spec.PodSelector, to) {
			continue
		}
		isolated = true
		for _, rule := range np.Spec.Ingress {
			if !portAllowed(rule.Ports, port) {
				continue
			}
			if len(rule.From) == 0 || slices.ContainsFunc(rule.From, func(p networkingv1.NetworkPolicyPeer) bool {
				return peerMatchesPod(p, from, fromNS)
			}) {
				return true
			}
		}
	}
	return !isolated
}

func allowsEgressToPod(pols []networkingv1.NetworkPolicy, from, to labels.Set, port int32) bool {
	return allowsEgress(pols, from, port, func(p networkingv1.NetworkPolicyPeer) bool {
		return peerMatchesPod(p, to, namespace)
	})
}

func allowsEgressToWorld(pols []networkingv1.NetworkPolicy, from labels.Set, port int32) bool {
	return allowsEgressToIP(pols, from, externalIP, port)
}

// allowsEgressToIP: may a pod with labels from reach ip:port outside the
// pod network?
func allowsEgressToIP(pols []networkingv1.NetworkPolicy, from labels.Set, ip net.IP, port int32) bool {
	return allowsEgress(pols, from, port, func(p networkingv1.NetworkPolicyPeer) bool {
		if p.IPBlock == nil {
			return false
		}
		_, cidr, err := net.ParseCIDR(p.IPBlock.CIDR)
		if err != nil || !cidr.Contains(ip) {
			return false
		}
		for _, e := range p.IPBlock.Except {
			if _, ex, err := net.ParseCIDR(e); err == nil && ex.Contains(ip) {
				return false
			}
		}
		return true
	})
}

func allowsEgress(pols []networkingv1.NetworkPolicy, from labels.Set, port int32, peerOK func(networkingv1.NetworkPolicyPeer) bool) bool {
	isolated := false
	for _, np := range pols {
		if !hasType(np, networkingv1.PolicyTypeEgress) || !selects(&np.Spec.PodSelector, from) {
			continue
		}
		isolated = true
		for _, rule := range np.Spec.Egress {
			if portAllowed(rule.Ports, port) && (len(rule.To) == 0 || slices.ContainsFunc(rule.To, peerOK)) {
				return true
			}
		}
	}
	return !isolated
}
