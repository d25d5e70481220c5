package jetstream

import (
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"

	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
)

func TestCommandAttributes(t *testing.T) {
	target := &cloudv1.Target{Provider: "tencentcloud", Account: "prod", Region: "ap-beijing"}
	ref := func(id string, attempt uint32, group string) *cloudv1.InstanceRef {
		return &cloudv1.InstanceRef{InstanceId: id, Attempt: attempt, Group: group, CloudId: "ins-" + id}
	}
	tests := []struct {
		name   string
		cmd    *cloudv1.Command
		want   map[attribute.Key]attribute.Value
		absent []attribute.Key
	}{
		{
			name: "create",
			cmd: &cloudv1.Command{Body: &cloudv1.Command_Create{Create: &cloudv1.CreateInstances{
				BatchId: "b1", ClientToken: "tok", Target: target, TemplateName: "small", ClusterId: "c1", Group: "workers",
				ParametersJson: `{"LoginSettings":{"Password":"hunter2"}}`,
				Instances:      []*cloudv1.InstanceRef{ref("i1", 2, ""), ref("i2", 3, "")},
			}}},
			want: map[attribute.Key]attribute.Value{
				"nodesmith.command":        attribute.StringValue("create"),
				"nodesmith.batch":          attribute.StringValue("b1"),
				"nodesmith.group":          attribute.StringValue("workers"),
				"nodesmith.template":       attribute.StringValue("small"),
				"nodesmith.cluster":        attribute.StringValue("c1"),
				"nodesmith.client_token":   attribute.StringValue("tok"),
				"nodesmith.instances":      attribute.StringSliceValue([]string{"i1", "i2"}),
				"nodesmith.instance_count": attribute.IntValue(2),
				"nodesmith.attempt":        attribute.Int64Value(3),
				"cloud.provider":           attribute.StringValue("tencentcloud"),
				"cloud.account.id":         attribute.StringValue("prod"),
				"cloud.region":             attribute.StringValue("ap-beijing"),
			},
			absent: []attribute.Key{"nodesmith.instance"},
		},
		{
			name: "watch of one instance",
			cmd: &cloudv1.Command{Body: &cloudv1.Command_Watch{Watch: &cloudv1.WatchInstances{
				Target: target, Instances: []*cloudv1.InstanceRef{ref("i1", 1, "workers")},
			}}},
			want: map[attribute.Key]attribute.Value{
				"nodesmith.command":  attribute.StringValue("watch"),
				"nodesmith.instance": attribute.StringValue("i1"),
				"nodesmith.group":    attribute.StringValue("workers"),
				"nodesmith.attempt":  attribute.Int64Value(1),
			},
		},
		{
			name: "terminate across groups names no group",
			cmd: &cloudv1.Command{Body: &cloudv1.Command_Terminate{Terminate: &cloudv1.TerminateInstances{
				Target: target, Instances: []*cloudv1.InstanceRef{ref("i1", 1, "a"), ref("i2", 1, "b")},
			}}},
			want: map[attribute.Key]attribute.Value{
				"nodesmith.command":        attribute.StringValue("terminate"),
				"nodesmith.instance_count": attribute.IntValue(2),
			},
			absent: []attribute.Key{"nodesmith.group", "nodesmith.instance"},
		},
		{
			name: "inventory",
			cmd: &cloudv1.Command{Body: &cloudv1.Command_ListInventory{ListInventory: &cloudv1.ListInventory{
				Target: target, ClusterId: "c1", RequestId: "r1",
			}}},
			want: map[attribute.Key]attribute.Value{
				"nodesmith.command": attribute.StringValue("inventory"),
				"nodesmith.cluster": attribute.StringValue("c1"),
				"nodesmith.request": attribute.StringValue("r1"),
				"cloud.region":      attribute.StringValue("ap-beijing"),
			},
			absent: []attribute.Key{"nodesmith.instances"},
		},
		{
			name: "empty",
			cmd:  &cloudv1.Command{},
			want: map[attribute.Key]attribute.Value{"nodesmith.command": attribute.StringValue("unknown")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := map[attribute.Key]attribute.Value{}
			for _, kv := range commandAttributes(tt.cmd) {
				got[kv.Key] = kv.Value
				if strings.Contains(kv.Value.String(), "hunter2") {
					t.Errorf("%s leaks the template's password", kv.Key)
				}
			}
			for k, v := range tt.want {
				if g, ok := got[k]; !ok || g.String() != v.String() || g.Type() != v.Type() {
					t.Errorf("%s = %v, want %v", k, g.String(), v.String())
				}
			}
			for _, k := range tt.absent {
				if _, ok := got[k]; ok {
					t.Errorf("%s is set (%v), want it absent", k, got[k].String())
				}
			}
		})
	}
}

func TestCommandAttributesBoundTheInstanceList(t *testing.T) {
	refs := make([]*cloudv1.InstanceRef, 250)
	for i := range refs {
		refs[i] = &cloudv1.InstanceRef{InstanceId: "i"}
	}
	cmd := &cloudv1.Command{Body: &cloudv1.Command_Terminate{Terminate: &cloudv1.TerminateInstances{Instances: refs}}}
	for _, kv := range commandAttributes(cmd) {
		switch kv.Key {
		case "nodesmith.instances":
			if n := len(kv.Value.AsStringSlice()); n != maxInstanceAttrs {
				t.Errorf("%d instance ids recorded, want %d", n, maxInstanceAttrs)
			}
		case "nodesmith.instance_count":
			if kv.Value.AsInt64() != 250 {
				t.Errorf("instance count %d, want 250", kv.Value.AsInt64())
			}
		}
	}
}
