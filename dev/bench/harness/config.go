package harness

import (
	"encoding/json"
	"time"

	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// Region is the region of every benchmark template on Tencent Cloud.
const Region = "ap-guangzhou"

// ECSRegion and ECSZone are those of ECS groups (GroupSpec.ECS).
const (
	ECSRegion = "cn-hangzhou"
	ECSZone   = "cn-hangzhou-h"
)

// JoinScript is the after_created hook of a real cluster reduced to its
// essence: join with the name and providerID lifecycle assigned (the
// simulated kubeadm registers the node in the simulated cluster). It works
// word for word on a real Ubuntu VM with kubeadm installed: the providerID
// reaches the kubelet through /etc/default/kubelet, the token and CA
// certificate hash come from the node image, API_SERVER from the
// template's hookEnv (APIServer).
const JoinScript = `set -eu
# On a real VM $SIMVM_SANDBOX is unset and these are the real paths; the
# simulated VMs of ` + "`make run`" + ` keep their files under it.
etc="${SIMVM_SANDBOX:-}/etc"
echo "KUBELET_EXTRA_ARGS=--provider-id=$PROVIDER_ID" > "$etc/default/kubelet"
kubeadm join "$API_SERVER" --node-name "$NODE_NAME" \
  --token "$(cat "$etc/kubeadm/token")" \
  --discovery-token-ca-cert-hash "$(cat "$etc/kubeadm/ca-cert-hash")"
`

// APIServer is the API_SERVER every benchmark template gives its hooks
// (hookEnv). The simulated kubeadm checks its form and contacts nothing.
const APIServer = "10.0.0.1:6443"

// GroupSpec is one node group of a generated configuration.
type GroupSpec struct {
	ID               string
	Min, Max, Target int
	Zone             string // default ap-guangzhou-3 (ECSZone for ECS)
	// ECS puts the group on Alibaba Cloud ECS (ECSAccount, ECSRegion);
	// the world needs WorldConfig.ECS.
	ECS                 bool
	AfterCreated        string // script; empty: no hook
	AfterCreatedTimeout time.Duration
	BeforeDelete        string // script; empty: no hook
	BeforeDeleteTimeout time.Duration
	CreateParallelism   int
	DeleteParallelism   int
}

// ConfigYAML renders lifecycle's configuration file for groups, one
// instance template per zone, in Account (ECS groups: ECSAccount, as
// dev/embedded's default configuration adds alibaba-dev). (JSON is YAML.)
func ConfigYAML(groups []GroupSpec) []byte {
	type hook struct {
		Script    string `json:"script"`
		Timeout   string `json:"timeout,omitempty"`
		OnFailure string `json:"onFailure,omitempty"`
	}
	type group struct {
		ID               string          `json:"id"`
		MinSize          int             `json:"minSize"`
		MaxSize          int             `json:"maxSize"`
		TargetSize       int             `json:"targetSize"`
		InstanceTemplate string          `json:"instanceTemplate"`
		NodeTemplate     map[string]any  `json:"nodeTemplate"`
		Hooks            map[string]hook `json:"hooks,omitempty"`
		Parallelism      map[string]int  `json:"parallelism,omitempty"`
	}
	templates := map[string]any{}
	accounts := map[string]any{Account: map[string]string{"region": Region}}
	var gs []group
	for _, g := range groups {
		zone := g.Zone
		if zone == "" {
			zone = Region + "-3"
			if g.ECS {
				zone = ECSZone
			}
		}
		tpl := "tpl-" + zone
		templates[tpl] = map[string]any{
			"account": Account, "zone": zone, "instanceType": "S5.MEDIUM4",
			"arch": "amd64", "os": "linux", "hourlyPrice": 0.12,
			"hookEnv": map[string]string{"API_SERVER": APIServer},
			"parameters": map[string]any{
				"ImageId": "img-nodesmith", "InstanceChargeType": "POSTPAID_BY_HOUR", "InstanceName": "nodesmith-bench",
			},
		}
		if g.ECS {
			accounts[ECSAccount] = map[string]string{"provider": "alibabacloud", "region": ECSRegion}
			templates[tpl] = map[string]any{
				"account": ECSAccount, "zone": zone, "instanceType": "ecs.g7.large",
				"arch": "amd64", "os": "linux", "hourlyPrice": 0.11,
				"providerIDTemplate": "{{.Region}}.{{.CloudID}}",
				"hookEnv":            map[string]string{"API_SERVER": APIServer},
				"parameters": map[string]any{
					"ZoneId": zone, "InstanceType": "ecs.g7.large", "ImageId": "aliyun_3_x64_20G_alibase_20240819.vhd",
					"VSwitchId": "vsw-nodesmith-bench", "SecurityGroupId": "sg-nodesmith-bench",
					"InstanceChargeType": "PostPaid", "InstanceName": "nodesmith-bench-ecs",
				},
			}
		}
		out := group{
			ID: g.ID, MinSize: g.Min, MaxSize: g.Max, TargetSize: g.Target, InstanceTemplate: tpl,
			NodeTemplate: map[string]any{
				"labels":      map[string]string{"node-role.kubernetes.io/worker": "", "nodesmith.io/pool": g.ID},
				"capacity":    map[string]string{"cpu": "2", "memory": "4Gi", "pods": "110"},
				"allocatable": map[string]string{"cpu": "1900m", "memory": "3584Mi", "pods": "110"},
			},
			Hooks:       map[string]hook{},
			Parallelism: map[string]int{},
		}
		if g.AfterCreated != "" {
			h := hook{Script: g.AfterCreated}
			if g.AfterCreatedTimeout > 0 {
				h.Timeout = g.AfterCreatedTimeout.String()
			}
			out.Hooks["afterCreated"] = h
		}
		if g.BeforeDelete != "" {
			h := hook{Script: g.BeforeDelete, OnFailure: "continue"}
			if g.BeforeDeleteTimeout > 0 {
				h.Timeout = g.BeforeDeleteTimeout.String()
			}
			out.Hooks["beforeDelete"] = h
		}
		if g.CreateParallelism > 0 {
			out.Parallelism["create"] = g.CreateParallelism
		}
		if g.DeleteParallelism > 0 {
			out.Parallelism["delete"] = g.DeleteParallelism
		}
		gs = append(gs, out)
	}
	b, err := json.MarshalIndent(map[string]any{
		"accounts":          accounts,
		"instanceTemplates": templates,
		"nodeGroups":        gs,
	}, "", "  ")
	if err != nil {
		panic(err) // only maps of strings and numbers: cannot fail
	}
	return b
}

// UnlimitedCloud are cloud-adapter rate limits that never bind (the
// emulator's limits, when set, are the ones that count).
const UnlimitedCloud = "RunInstances=10000:10000,TerminateInstances=10000:10000,DescribeInstances=10000:10000"

// TencentRateLimits are the real service's published per-account limits,
// as the emulator models them by default.
func TencentRateLimits() map[string]float64 { return cvmemu.DefaultConfig().RateLimits }
