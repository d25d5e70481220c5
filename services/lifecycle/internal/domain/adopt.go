package domain

import (
	"fmt"
	"hash/fnv"
	"regexp"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
)

// Adoption (a group's opt-in adoptExisting): a Node that nodesmith did not
// create joins a group as a Running instance when
//   - the group's node template recognises it: the Node's labels and
//     annotations include the template's, and each of its taints is one of
//     the template's (system taints under node.kubernetes.io/ and
//     node.cloudprovider.kubernetes.io/ aside: they come and go with the
//     Node's condition);
//   - its providerID names a VM the group's cloud account manages (see
//     NodeGroup.CloudIDFromProviderID);
//   - exactly one group qualifies (several: reported, never guessed).
// A group adopts only if its node template has at least one label, so an
// empty template cannot claim every Node of the account (control planes
// included).

var systemTaintPrefixes = []string{"node.kubernetes.io/", "node.cloudprovider.kubernetes.io/"}

// MatchesNode reports whether a Node with these labels, annotations and
// taints is one of the template's (see Adoption above).
func (t NodeTemplate) MatchesNode(labels, annotations map[string]string, taints []Taint) bool {
	for k, v := range t.Labels {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	for k, v := range t.Annotations {
		if got, ok := annotations[k]; !ok || got != v {
			return false
		}
	}
next:
	for _, nt := range taints {
		for _, p := range systemTaintPrefixes {
			if strings.HasPrefix(nt.Key, p) {
				continue next
			}
		}
		for _, tt := range t.Taints {
			if tt == nt {
				continue next
			}
		}
		return false
	}
	return true
}

// CanAdopt reports whether the group adopts existing Nodes: opted in, with
// a node template that has at least one label.
func (g NodeGroup) CanAdopt() bool { return g.AdoptExisting && len(g.NodeTemplate.Labels) > 0 }

// cloudIDPattern captures the cloud id in a group's providerID template.
const cloudIDPattern = `([A-Za-z0-9][A-Za-z0-9._-]*)`

// CloudIDFromProviderID returns the id of the VM that a Node's providerID
// names when it is a VM of the group's cloud account and region:
//   - the group's own providerID template (default
//     externalgrpc://<provider>/<account>/<region>/<cloud id>), which names
//     the account;
//   - the format of the group's cloud (libs/cloudspec: Tencent
//     qcloud:///<zone>/<ins-id>, Alibaba <region>.<i-id>) naming the
//     template's region or a zone of it. It names no account: the group's
//     account is assumed.
func (g NodeGroup) CloudIDFromProviderID(providerID string) (string, bool) {
	t := g.Template
	if re, err := g.providerIDPattern(); err == nil {
		if m := re.FindStringSubmatch(providerID); m != nil {
			return m[1], true
		}
	}
	if cloud, ok := cloudspec.Lookup(t.Provider); ok {
		if parts, ok := cloud.ParseProviderID(providerID); ok && parts.InRegion(t.Region) {
			return parts.CloudID, true
		}
	}
	return "", false
}

// providerIDPattern turns the group's providerID template into a pattern
// capturing the cloud id: the template is rendered with markers in place of
// the fields an adopted Node's providerID may carry any value for.
func (g NodeGroup) providerIDPattern() (*regexp.Regexp, error) {
	const cloudMark, instMark, zoneMark = "\x00cloud\x00", "\x00instance\x00", "\x00zone\x00"
	t := g.Template
	zone := t.Zone
	if len(t.Offerings) > 0 {
		// VMs of a template with offerings are in any of its zones.
		zone = zoneMark
	}
	out, err := RenderProviderID(t.ProviderIDTemplate, ProviderIDFields{
		Provider: t.Provider, Account: t.Account, Region: t.Region, Zone: zone,
		CloudID: cloudMark, InstanceID: instMark, Group: g.ID,
	})
	if err != nil {
		return nil, err
	}
	if strings.Count(out, cloudMark) != 1 {
		return nil, fmt.Errorf("providerID template does not name the cloud id once: %q", t.ProviderIDTemplate)
	}
	p := regexp.QuoteMeta(out)
	p = strings.Replace(p, cloudMark, cloudIDPattern, 1)
	p = strings.ReplaceAll(p, instMark, `[a-z0-9-]+`)
	p = strings.ReplaceAll(p, zoneMark, `[a-z0-9-]+`)
	return regexp.Compile("^" + p + "$")
}

// AdoptedInstanceID is the id of the instance adopting a Node: derived from
// the group and the Node's providerID, so a retried adoption (after a
// partial failure) finds its own record instead of creating a second one.
func AdoptedInstanceID(group, providerID string) string {
	// FNV-1a 64 rendered in IDAlphabet: stable, and 50 bits make a
	// collision between two Nodes of one group negligible.
	f := fnv.New64a()
	_, _ = f.Write([]byte(providerID))
	h := f.Sum64()
	var b [InstanceIDRandomLength]byte
	for i := range b {
		b[i] = IDAlphabet[h&31]
		h >>= 5
	}
	return NewInstanceID(group, string(b[:]))
}

// NewAdoptedInstance returns the Running record of an adopted Node.
func NewAdoptedInstance(g NodeGroup, nodeName, providerID, cloudID, privateIP string, now time.Time) Instance {
	in := NewInstance(AdoptedInstanceID(g.ID, providerID), g.ID, now)
	in.State = StateRunning
	in.CloudID = cloudID
	in.ProviderID = providerID
	in.NodeName = nodeName
	in.PrivateIP = privateIP
	in.Adopted = true
	in.History = []Transition{{From: StateUnknown, To: StateRunning, Reason: "adopted existing node " + nodeName, At: now}}
	return in
}
