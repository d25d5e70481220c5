package yamlconfig_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/yamlconfig"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

const valid = `
accounts:
  dev:
    region: ap-guangzhou
instanceTemplates:
  small:
    account: dev
    zone: ap-guangzhou-3
    instanceType: S5.MEDIUM4
    arch: amd64
    os: linux
    hourlyPrice: 0.12
    sshPort: 22
    hookEnv: {API_SERVER: "10.0.0.1:6443"}
    parameters:
      ImageId: img-abc
      SystemDisk: {DiskType: CLOUD_PREMIUM, DiskSize: 50}
      VirtualPrivateCloud: {VpcId: vpc-1, SubnetId: subnet-1}
nodeGroups:
  - id: workers
    minSize: 0
    maxSize: 20
    instanceTemplate: small
    nodeTemplate:
      labels: {node-role.kubernetes.io/worker: ""}
      annotations: {team: infra}
      taints: [{key: dedicated, value: workers, effect: NoSchedule}]
      capacity: {cpu: "2", memory: 4Gi}
      allocatable: {cpu: 1900m, memory: 3.5Gi}
    autoscalingOptions:
      scaleDownUtilizationThreshold: 0.5
      scaleDownUnneededTime: 10m
      maxNodeProvisionTime: 15m
    hooks:
      afterCreated:
        file: join.sh
        timeout: 10m
        env: {EXTRA: "1"}
      beforeDelete:
        script: kubectl drain "$NODE_NAME" --ignore-daemonsets
        onFailure: block
    parallelism: {create: 10, delete: 2}
  - id: gpu
    maxSize: 4
    targetSize: 1
    instanceTemplate: small
`

func writeHook(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	const join = `set -eu
echo "KUBELET_EXTRA_ARGS=--provider-id=$PROVIDER_ID" > /etc/default/kubelet
kubeadm join "$API_SERVER" --node-name "$NODE_NAME" \
  --token "$(cat /etc/kubeadm/token)" \
  --discovery-token-ca-cert-hash "$(cat /etc/kubeadm/ca-cert-hash)"
`
	if err := os.WriteFile(filepath.Join(dir, "join.sh"), []byte(join), 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestValidConfig(t *testing.T) {
	dir := writeHook(t)
	path := filepath.Join(dir, "nodesmith.yaml")
	if err := os.WriteFile(path, []byte(valid), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := yamlconfig.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Groups) != 2 {
		t.Fatalf("groups %d", len(cfg.Groups))
	}
	w := cfg.Groups[0]
	if w.ID != "workers" || w.MaxSize != 20 || w.TargetSize != 0 || w.Source != domain.SourceConfig {
		t.Errorf("workers: %+v", w)
	}
	tm := w.Template
	if tm.Provider != "tencentcloud" || tm.Region != "ap-guangzhou" || tm.Zone != "ap-guangzhou-3" || tm.Name != "small" {
		t.Errorf("template defaults not resolved: %+v", tm)
	}
	for _, want := range []string{`"DiskSize":50`, `"ImageId":"img-abc"`, `"Placement":{"Zone":"ap-guangzhou-3"}`, `"InstanceType":"S5.MEDIUM4"`} {
		if !strings.Contains(tm.ParametersJSON, want) {
			t.Errorf("parameters JSON %s lacks %s", tm.ParametersJSON, want)
		}
	}
	ac := w.Hooks.AfterCreated
	if ac == nil || !strings.Contains(ac.Script, "kubeadm join") || ac.Name != "join.sh" || ac.Timeout != 10*time.Minute || ac.Env["EXTRA"] != "1" {
		t.Errorf("afterCreated %+v", ac)
	}
	if bd := w.Hooks.BeforeDelete; bd == nil || bd.OnFailure != domain.OnFailureBlock {
		t.Errorf("beforeDelete %+v", bd)
	}
	if w.Autoscaling.ScaleDownUnneeded != 10*time.Minute || *w.Autoscaling.ScaleDownUtilizationThreshold != 0.5 {
		t.Errorf("autoscaling %+v", w.Autoscaling)
	}
	if len(w.NodeTemplate.Taints) != 1 || w.NodeTemplate.Capacity["memory"] != "4Gi" {
		t.Errorf("node template %+v", w.NodeTemplate)
	}
	if g := cfg.Groups[1]; g.MinSize != 0 || g.TargetSize != 1 || g.Hooks.AfterCreated != nil {
		t.Errorf("gpu %+v", g)
	}
	if errs := w.Validate(); len(errs) != 0 {
		t.Errorf("loaded group does not validate: %v", errs)
	}
}

func TestInvalidConfigsNameFileFieldAndProblem(t *testing.T) {
	base := func(groups string) string {
		return "accounts:\n  dev: {region: r1}\ninstanceTemplates:\n  small: {account: dev}\nnodeGroups:\n" + groups
	}
	tests := []struct {
		name string
		yaml string
		want []string // substrings, each must appear
	}{
		{"malformed YAML", "nodeGroups: [", []string{"cfg.yaml", "line"}},
		{"unknown top-level field", "nodeGroup: []\n", []string{`nodeGroup: unknown field "nodeGroup"; did you mean "nodeGroups"?`}},
		{"unknown nested field", base("  - id: a\n    maxSize: 1\n    instanceTemplate: small\n    nodeTemplate: {lables: {}}\n"),
			[]string{"nodeGroups[0].nodeTemplate.lables: unknown field", `did you mean "labels"`}},
		{"min above max", base("  - id: a\n    maxSize: 1\n    instanceTemplate: small\n  - id: b\n    minSize: 5\n    maxSize: 3\n    instanceTemplate: small\n"),
			[]string{"nodeGroups[1].minSize: must not exceed maxSize (3), got 5"}},
		{"target out of range", base("  - id: a\n    maxSize: 2\n    targetSize: 3\n    instanceTemplate: small\n"),
			[]string{"nodeGroups[0].targetSize: must be within [minSize, maxSize] = [0, 2], got 3"}},
		{"missing max size", base("  - id: a\n    instanceTemplate: small\n"), []string{"nodeGroups[0].maxSize: required"}},
		{"invalid id", base("  - id: Workers_1\n    maxSize: 2\n    instanceTemplate: small\n"), []string{"nodeGroups[0].id:", "DNS-1123"}},
		{"duplicate id", base("  - id: a\n    maxSize: 2\n    instanceTemplate: small\n  - id: a\n    maxSize: 2\n    instanceTemplate: small\n"),
			[]string{"nodeGroups[1].id: duplicate id \"a\""}},
		{"unknown template", base("  - id: a\n    maxSize: 2\n    instanceTemplate: big\n"),
			[]string{`nodeGroups[0].instanceTemplate: unknown instance template "big" (defined: small)`}},
		{"unknown account", "instanceTemplates:\n  small: {account: prod, region: r}\n",
			[]string{`instanceTemplates.small.account: unknown account "prod" (defined: none)`}},
		{"missing hook file", base("  - id: a\n    maxSize: 2\n    instanceTemplate: small\n    hooks:\n      afterCreated: {file: nope.sh}\n"),
			[]string{"nodeGroups[0].hooks.afterCreated.file: cannot read hook script"}},
		{"both file and script", base("  - id: a\n    maxSize: 2\n    instanceTemplate: small\n    hooks:\n      beforeDelete: {file: x.sh, script: echo}\n"),
			[]string{"nodeGroups[0].hooks.beforeDelete: set either file or script, not both"}},
		{"bad onFailure", base("  - id: a\n    maxSize: 2\n    instanceTemplate: small\n    hooks:\n      beforeDelete: {script: x, onFailure: retry}\n"),
			[]string{"nodeGroups[0].hooks.beforeDelete.onFailure: must be continue or block"}},
		{"wrong type", base("  - id: a\n    maxSize: lots\n    instanceTemplate: small\n"),
			[]string{"nodeGroups[0].maxSize: cannot unmarshal", "line 7"}},
		{"bad duration", base("  - id: a\n    maxSize: 2\n    instanceTemplate: small\n    hooks:\n      afterCreated: {script: x, timeout: soon}\n"),
			[]string{"nodeGroups[0].hooks.afterCreated.timeout:"}},
		{"bad taint effect", base("  - id: a\n    maxSize: 2\n    instanceTemplate: small\n    nodeTemplate:\n      taints: [{key: k, effect: Never}]\n"),
			[]string{"nodeGroups[0].nodeTemplate.taints[0].effect: must be one of"}},
		{"bad providerID template", "accounts:\n  dev: {region: r}\ninstanceTemplates:\n  small: {account: dev, providerIDTemplate: 'x://{{.Nope}}'}\n",
			[]string{"instanceTemplates.small.providerIDTemplate:"}},
		{"zone disagrees with the parameters", "accounts:\n  dev: {region: r}\ninstanceTemplates:\n  small: {account: dev, zone: z1, parameters: {Placement: {Zone: z2}}}\n",
			[]string{`instanceTemplates.small.zone: "z1" differs from parameters.Placement.Zone "z2"`}},
		{"not a RunInstances field", "accounts:\n  dev: {region: r}\ninstanceTemplates:\n  small:\n    account: dev\n    parameters:\n      ImageName: img-1\n",
			[]string{`instanceTemplates.small.parameters.ImageName: is not a field of the Tencent Cloud RunInstances request (line 7)`}},
		{"a RunInstances field of the wrong type", "accounts:\n  dev: {region: r}\ninstanceTemplates:\n  small:\n    account: dev\n    parameters:\n      SystemDisk: {DiskSize: big}\n",
			[]string{`instanceTemplates.small.parameters.SystemDisk.DiskSize: must be an integer (int64) (line 7)`}},
		{"alibaba: what ECS needs", "accounts:\n  ali: {provider: alibabacloud, region: cn-hangzhou}\ninstanceTemplates:\n  ecs:\n    account: ali\n    zone: cn-hangzhou-h\n    parameters:\n      InstanceType: ecs.g7.large\n",
			[]string{`instanceTemplates.ecs.parameters.ImageId: is required (line 7)`, `parameters.SecurityGroupId: is required (or SecurityGroupIds)`, `parameters.VSwitchId: is required`}},
		{"alibaba: what nodesmith sets", "accounts:\n  ali: {provider: alibabacloud, region: cn-hangzhou}\ninstanceTemplates:\n  ecs:\n    account: ali\n    zone: cn-hangzhou-h\n    instanceType: ecs.g7.large\n    parameters:\n      ImageId: m-1\n      VSwitchId: vsw-1\n      SecurityGroupId: sg-1\n      Amount: 2\n",
			[]string{`instanceTemplates.ecs.parameters.Amount: must not be set: nodesmith sets it (the size of a batch) (line 12)`}},
		{"a secret parameter that is not a RunInstances field", "accounts:\n  dev: {region: r}\ninstanceTemplates:\n  small:\n    account: dev\n    secretParameters:\n      Password: hunter2\n",
			[]string{`instanceTemplates.small.secretParameters.Password: is not a field of the Tencent Cloud RunInstances request (line 7)`}},
		{"alibaba: zone disagrees with the parameters", "accounts:\n  ali: {provider: alibabacloud}\ninstanceTemplates:\n  ecs: {account: ali, zone: cn-hangzhou-h, parameters: {ZoneId: cn-hangzhou-i}}\n",
			[]string{`instanceTemplates.ecs.zone: "cn-hangzhou-h" differs from parameters.ZoneId "cn-hangzhou-i"`}},
		{"two documents", "nodeGroups: []\n---\nnodeGroups: []\n", []string{"exactly one YAML document"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := yamlconfig.Parse("cfg.yaml", []byte(tt.yaml), t.TempDir())
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			if !strings.Contains(msg, "cfg.yaml") {
				t.Errorf("error does not name the file: %s", msg)
			}
			for _, w := range tt.want {
				if !strings.Contains(msg, w) {
					t.Errorf("error lacks %q:\n%s", w, msg)
				}
			}
		})
	}
}

func TestEveryProblemIsReported(t *testing.T) {
	bad := `
accounts:
  dev: {region: r1}
instanceTemplates:
  small: {account: nope}
nodeGroups:
  - id: A
    minSize: 3
    maxSize: 1
    instanceTemplate: missing
    nodeTemplate: {lables: {}}
  - id: b
    maxSize: x
    instanceTemplate: small
`
	_, err := yamlconfig.Parse("cfg.yaml", []byte(bad), "")
	var ce *yamlconfig.Error
	if !errors.As(err, &ce) {
		t.Fatalf("error %T: %v", err, err)
	}
	paths := map[string]bool{}
	for _, p := range ce.Problems {
		paths[p.Path] = true
		if p.Line == 0 {
			t.Errorf("problem without a line: %s", p)
		}
	}
	for _, want := range []string{
		"instanceTemplates.small.account", "nodeGroups[0].id", "nodeGroups[0].minSize",
		"nodeGroups[0].instanceTemplate", "nodeGroups[0].nodeTemplate.lables", "nodeGroups[1].maxSize",
	} {
		if !paths[want] {
			t.Errorf("no problem reported at %s; got %v", want, err)
		}
	}
}

func TestTencentZoneAndTypeComeFromTheParameters(t *testing.T) {
	cfg, err := yamlconfig.Parse("cfg.yaml", []byte(`
accounts: {dev: {region: r}}
instanceTemplates:
  t: {account: dev, parameters: {Placement: {Zone: r-1}, InstanceType: S5.LARGE8, ImageId: img-1}}
nodeGroups: [{id: w, maxSize: 2, instanceTemplate: t}]
`), "")
	if err != nil {
		t.Fatal(err)
	}
	if tm := cfg.Groups[0].Template; tm.Zone != "r-1" || tm.InstanceType != "S5.LARGE8" {
		t.Errorf("template %+v", tm)
	}
}

func TestEmptyFileDefinesNoGroups(t *testing.T) {
	cfg, err := yamlconfig.Parse("cfg.yaml", []byte("  \n"), "")
	if err != nil || len(cfg.Groups) != 0 || len(cfg.Warnings) != 1 {
		t.Errorf("empty file: %+v %v", cfg, err)
	}
}

func TestAccountsAndTemplatesBecomeCatalogEntries(t *testing.T) {
	cfg, err := yamlconfig.Parse("c.yaml", []byte(`
accounts:
  dev: {region: ap-guangzhou}
  other: {provider: tencentcloud}
instanceTemplates:
  small: {account: dev, zone: ap-guangzhou-3, instanceType: S5.SMALL1}
nodeGroups:
  - {id: workers, maxSize: 2, instanceTemplate: small}
`), "")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range cfg.Catalog {
		if e.Source != domain.SourceConfig {
			t.Errorf("%s has source %q", e.Ref(), e.Source)
		}
		got = append(got, e.Ref().String())
	}
	want := []string{`cloud account "dev"`, `cloud account "other"`, `instance template "small"`}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("catalog = %v, want %v", got, want)
	}
	if a := cfg.Catalog[0].Account; a.Provider != "tencentcloud" || len(a.Regions) != 1 || a.Regions[0] != "ap-guangzhou" {
		t.Errorf("account dev = %+v", a)
	}
	if tm := cfg.Catalog[2].Template; tm.Region != "ap-guangzhou" || tm.Provider != "tencentcloud" || !reflect.DeepEqual(*tm, cfg.Groups[0].Template) {
		t.Errorf("template small = %+v, the group holds %+v", tm, cfg.Groups[0].Template)
	}
}

func TestAlibabaTemplate(t *testing.T) {
	cfg, err := yamlconfig.Parse("cfg.yaml", []byte(`
accounts: {ali: {provider: alibabacloud, region: cn-hangzhou}}
instanceTemplates:
  ecs:
    account: ali
    zone: cn-hangzhou-h
    parameters:
      InstanceType: ecs.g7.large
      ImageId: aliyun_3_x64_20G_alibase_20240528.vhd
      VSwitchId: vsw-1
      SecurityGroupIds: [sg-1]
      SystemDisk: {Category: cloud_essd, Size: "40"}
      InternetMaxBandwidthOut: 0
nodeGroups: [{id: w, maxSize: 2, instanceTemplate: ecs}]
`), "")
	if err != nil {
		t.Fatal(err)
	}
	tm := cfg.Groups[0].Template
	if tm.Provider != "alibabacloud" || tm.Region != "cn-hangzhou" || tm.Zone != "cn-hangzhou-h" || tm.InstanceType != "ecs.g7.large" ||
		tm.ParametersJSON != `{"ImageId":"aliyun_3_x64_20G_alibase_20240528.vhd","InstanceType":"ecs.g7.large","InternetMaxBandwidthOut":0,"SecurityGroupIds":["sg-1"],"SystemDisk":{"Category":"cloud_essd","Size":"40"},"VSwitchId":"vsw-1","ZoneId":"cn-hangzhou-h"}` {
		t.Errorf("template %+v", tm)
	}
}
