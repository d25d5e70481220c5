package jetstream

import (
	"go.opentelemetry.io/otel/attribute"

	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
)

// maxInstanceAttrs bounds the instance ids recorded on a span (a command
// carries at most a batch of 100 in practice).
const maxInstanceAttrs = 100

// commandAttributes describes a command on its span: what it is, which
// batch, group and instances it is about, and where in the cloud. Secrets
// never appear: the template's parameters (which may hold a login
// password) are left out, and credentials never travel in commands.
func commandAttributes(cmd *cloudv1.Command) []attribute.KeyValue {
	var (
		kind   string
		target *cloudv1.Target
		refs   []*cloudv1.InstanceRef
		attrs  []attribute.KeyValue
	)
	switch b := cmd.GetBody().(type) {
	case *cloudv1.Command_Create:
		c := b.Create
		kind, target, refs = "create", c.GetTarget(), c.GetInstances()
		attrs = append(attrs,
			attribute.String("nodesmith.batch", c.GetBatchId()),
			attribute.String("nodesmith.group", c.GetGroup()),
			attribute.String("nodesmith.template", c.GetTemplateName()),
			attribute.String("nodesmith.cluster", c.GetClusterId()),
			attribute.String("nodesmith.client_token", c.GetClientToken()))
	case *cloudv1.Command_Watch:
		kind, target, refs = "watch", b.Watch.GetTarget(), b.Watch.GetInstances()
	case *cloudv1.Command_Terminate:
		kind, target, refs = "terminate", b.Terminate.GetTarget(), b.Terminate.GetInstances()
	case *cloudv1.Command_ListInventory:
		l := b.ListInventory
		kind, target = "inventory", l.GetTarget()
		attrs = append(attrs,
			attribute.String("nodesmith.cluster", l.GetClusterId()),
			attribute.String("nodesmith.request", l.GetRequestId()))
	case *cloudv1.Command_Tag:
		c := b.Tag
		kind, target, refs = "tag", c.GetTarget(), c.GetInstances()
		attrs = append(attrs,
			attribute.String("nodesmith.cluster", c.GetClusterId()),
			attribute.String("nodesmith.request", c.GetRequestId()),
			attribute.Bool("nodesmith.check_only", c.GetCheckOnly()))
	default:
		return []attribute.KeyValue{attribute.String("nodesmith.command", "unknown")}
	}
	attrs = append(attrs,
		attribute.String("nodesmith.command", kind),
		attribute.String("cloud.provider", target.GetProvider()),
		attribute.String("cloud.account.id", target.GetAccount()),
		attribute.String("cloud.region", target.GetRegion()))
	if len(refs) == 0 {
		return attrs
	}
	ids := make([]string, 0, min(len(refs), maxInstanceAttrs))
	groups := map[string]bool{}
	var attempt uint32
	for i, r := range refs {
		if i < maxInstanceAttrs {
			ids = append(ids, r.GetInstanceId())
		}
		if r.GetGroup() != "" {
			groups[r.GetGroup()] = true
		}
		attempt = max(attempt, r.GetAttempt())
	}
	attrs = append(attrs,
		attribute.Int("nodesmith.instance_count", len(refs)),
		attribute.StringSlice("nodesmith.instances", ids),
		attribute.Int64("nodesmith.attempt", int64(attempt)))
	if len(refs) == 1 {
		attrs = append(attrs, attribute.String("nodesmith.instance", refs[0].GetInstanceId()))
	}
	if _, isCreate := cmd.GetBody().(*cloudv1.Command_Create); !isCreate && len(groups) == 1 {
		for g := range groups {
			attrs = append(attrs, attribute.String("nodesmith.group", g))
		}
	}
	return attrs
}
