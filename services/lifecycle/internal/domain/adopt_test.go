package domain_test

import (
	"strings"
	"testing"
	"time"

	. "github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

func TestNodeTemplateMatchesNode(t *testing.T) {
	tmpl := NodeTemplate{
		Labels:      map[string]string{"role": "gpu", "pool": "a"},
		Annotations: map[string]string{"owner": "ml"},
		Taints:      []Taint{{Key: "gpu", Value: "true", Effect: "NoSchedule"}, {Key: "dedicated", Value: "ml", Effect: "NoExecute"}},
	}
	labels := map[string]string{"role": "gpu", "pool": "a", "kubernetes.io/hostname": "n1"}
	annotations := map[string]string{"owner": "ml", "node.alpha.kubernetes.io/ttl": "0"}
	tests := []struct {
		name        string
		labels      map[string]string
		annotations map[string]string
		taints      []Taint
		want        bool
	}{
		{"superset of labels and annotations, no taints", labels, annotations, nil, true},
		{"a subset of the template's taints", labels, annotations, []Taint{{Key: "gpu", Value: "true", Effect: "NoSchedule"}}, true},
		{"system taints do not count", labels, annotations, []Taint{{Key: "node.kubernetes.io/unschedulable", Effect: "NoSchedule"}, {Key: "node.cloudprovider.kubernetes.io/uninitialized", Value: "true", Effect: "NoSchedule"}}, true},
		{"a label missing", map[string]string{"role": "gpu"}, annotations, nil, false},
		{"a label with another value", map[string]string{"role": "cpu", "pool": "a"}, annotations, nil, false},
		{"an annotation missing", labels, nil, nil, false},
		{"a taint the template lacks", labels, annotations, []Taint{{Key: "other", Effect: "NoSchedule"}}, false},
		{"a taint with another value", labels, annotations, []Taint{{Key: "gpu", Value: "false", Effect: "NoSchedule"}}, false},
		{"a taint with another effect", labels, annotations, []Taint{{Key: "gpu", Value: "true", Effect: "NoExecute"}}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tmpl.MatchesNode(tc.labels, tc.annotations, tc.taints); got != tc.want {
				t.Errorf("MatchesNode = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestCloudIDFromProviderID(t *testing.T) {
	base := testGroup()
	base.Template.Zone = "ap-guangzhou-3"
	custom := base
	custom.Template.ProviderIDTemplate = "tencentcloud://{{.Region}}/{{.Zone}}/{{.InstanceID}}/{{.CloudID}}"
	other := base
	other.Template.Provider = "othercloud"
	ali := base
	ali.Template.Provider, ali.Template.Region, ali.Template.Zone = "alibabacloud", "cn-hangzhou", "cn-hangzhou-h"
	tests := []struct {
		name       string
		group      NodeGroup
		providerID string
		want       string
	}{
		{"the default template", base, "externalgrpc://tencentcloud/dev/ap-guangzhou/ins-abc123", "ins-abc123"},
		{"the default template, another account", base, "externalgrpc://tencentcloud/prod/ap-guangzhou/ins-abc123", ""},
		{"the default template, another region", base, "externalgrpc://tencentcloud/dev/ap-shanghai/ins-abc123", ""},
		{"the default template, trailing garbage", base, "externalgrpc://tencentcloud/dev/ap-guangzhou/ins-abc123/x", ""},
		{"a custom template with any instance id", custom, "tencentcloud://ap-guangzhou/ap-guangzhou-3/someone-node-1/ins-zz9", "ins-zz9"},
		{"a custom template, another zone", custom, "tencentcloud://ap-guangzhou/ap-guangzhou-4/n/ins-zz9", ""},
		{"TKE's qcloud format in the region", base, "qcloud:///ap-guangzhou-4/ins-q1w2e3r4", "ins-q1w2e3r4"},
		{"TKE's qcloud format in another region", base, "qcloud:///ap-shanghai-2/ins-q1w2e3r4", ""},
		{"qcloud for another provider", other, "qcloud:///ap-guangzhou-4/ins-q1w2e3r4", ""},
		{"qcloud for Alibaba", ali, "qcloud:///cn-hangzhou-h/ins-q1w2e3r4", ""},
		{"Alibaba's format in the region", ali, "cn-hangzhou.i-bp1q1w2e3r4", "i-bp1q1w2e3r4"},
		{"Alibaba's format with the CCM's scheme", ali, "alicloud://cn-hangzhou.i-bp1q1w2e3r4", "i-bp1q1w2e3r4"},
		{"Alibaba's format in another region", ali, "cn-shanghai.i-bp1q1w2e3r4", ""},
		{"Alibaba's format for Tencent", base, "ap-guangzhou.i-bp1q1w2e3r4", ""},
		{"Alibaba's default template", ali, "externalgrpc://alibabacloud/dev/cn-hangzhou/i-bp1abc", "i-bp1abc"},
		{"our placeholder", base, "nodesmith:///workers/workers-aaaaaaaaaa", ""},
		{"kind", base, "kind://docker/kind/kind-worker", ""},
		{"empty", base, "", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.group.CloudIDFromProviderID(tc.providerID)
			if got != tc.want || ok != (tc.want != "") {
				t.Errorf("CloudIDFromProviderID(%q) = %q, %v; want %q", tc.providerID, got, ok, tc.want)
			}
		})
	}
}

func TestAdoptedInstance(t *testing.T) {
	g := testGroup()
	g.AdoptExisting = true
	pid := "qcloud:///ap-guangzhou-3/ins-q1w2e3r4"
	id := AdoptedInstanceID(g.ID, pid)
	if id != AdoptedInstanceID(g.ID, pid) || !ValidInstanceID(id) || !strings.HasPrefix(id, "workers-") {
		t.Errorf("adopted id %q is not a stable instance id of the group", id)
	}
	if AdoptedInstanceID(g.ID, pid+"5") == id {
		t.Errorf("two providerIDs share an id")
	}
	in := NewAdoptedInstance(g, "node-7", pid, "ins-q1w2e3r4", "10.1.2.3", t0)
	if in.State != StateRunning || !in.Live() || !in.Adopted || in.BatchID != "" || in.CloudID != "ins-q1w2e3r4" || in.Node() != "node-7" || in.ProviderID != pid {
		t.Errorf("adopted record %+v", in)
	}
	// Deleting it goes the normal way: before_delete on its address, then
	// the VM's termination by id.
	in = mustApply(t, in, DeleteRequested{Reason: "DeleteNodes"}, env(t0))
	in = mustApply(t, in, StartDelete{}, env(t0))
	if c, ok := PendingCommand(in); !ok || c.Kind != CmdRunHook || c.Hook != HookBeforeDelete {
		t.Fatalf("after StartDelete: %+v", in)
	}
	in = mustApply(t, in, HookFinished{Attempt: in.Attempt, Kind: HookBeforeDelete, Succeeded: true}, env(t0.Add(time.Minute)))
	if c, ok := PendingCommand(in); !ok || c.Kind != CmdTerminate {
		t.Fatalf("after the hook: %s, command %+v", in.State, c)
	}
}

func TestAdoptionNeedsALabel(t *testing.T) {
	g := testGroup()
	g.AdoptExisting = true
	if g.CanAdopt() {
		t.Errorf("a group without node template labels adopts")
	}
	found := false
	for _, e := range g.Validate() {
		found = found || e.Field == "adoptExisting"
	}
	if !found {
		t.Errorf("Validate accepts adoptExisting without labels: %v", g.Validate())
	}
	g.NodeTemplate.Labels = map[string]string{"role": "w"}
	if !g.CanAdopt() || len(g.Validate()) != 0 {
		t.Errorf("a labelled group cannot adopt: %v", g.Validate())
	}
}
