// Package jetstream connects lifecycle to NATS: it publishes commands on the
// command stream, consumes worker results from the event stream, and answers
// lifecycle operations on the request/reply subject.
package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sort"
	"strings"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/libs/messaging"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	hookv1 "github.com/nodesmith/nodesmith/proto/nodesmith/hook/v1"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/protoconv"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

var _ ports.Commands = (*Commands)(nil)

// Publisher is what Commands needs from messaging.Publisher.
type Publisher interface {
	Publish(ctx context.Context, subject, msgID string, msg proto.Message) error
}

// MessagingPublisher adapts *messaging.Publisher to Publisher.
type MessagingPublisher struct{ P *messaging.Publisher }

// Publish implements Publisher.
func (m MessagingPublisher) Publish(ctx context.Context, subject, msgID string, msg proto.Message) error {
	ctx, end := publishSpan(ctx, subject, msgID)
	_, err := m.P.Publish(ctx, subject, msgID, msg)
	end(err)
	if messaging.IsStreamFull(err) {
		return fmt.Errorf("%w: %w", ports.ErrCommandQueueFull, err)
	}
	return err
}

// Commands publishes lifecycle's commands. Message ids are derived from what
// makes a command unique, so a re-publication is deduplicated by the stream:
//
//	create.<batch>.<attempt>
//	hook.<instance>.<attempt>
//	watch.<instance>.<attempt>.<cloud id> (or watch.<hash of the set>)
//	terminate.<instance>.<attempt>.<cloud id> (or terminate.<hash>)
//	inventory.<request>
type Commands struct {
	pub Publisher
}

// NewCommands returns a ports.Commands over pub.
func NewCommands(pub Publisher) *Commands { return &Commands{pub: pub} }

func target(t ports.Target) *cloudv1.Target {
	return &cloudv1.Target{Provider: t.Provider, Account: t.Account, Region: t.Region}
}

func refs(rs []ports.InstanceRef) []*cloudv1.InstanceRef {
	out := make([]*cloudv1.InstanceRef, len(rs))
	for i, r := range rs {
		out[i] = &cloudv1.InstanceRef{InstanceId: r.InstanceID, Attempt: r.Attempt, CloudId: r.CloudID, Group: r.Group, Adopted: r.Adopted}
	}
	return out
}

// setID names a set of (instance, attempt): the instance itself for one,
// a digest of the sorted set for several.
func setID(rs []ports.InstanceRef) string {
	if len(rs) == 1 {
		return fmt.Sprintf("%s.%d.%s", rs[0].InstanceID, rs[0].Attempt, rs[0].CloudID)
	}
	keys := make([]string, len(rs))
	for i, r := range rs {
		keys[i] = fmt.Sprintf("%s/%d/%s", r.InstanceID, r.Attempt, r.CloudID)
	}
	sort.Strings(keys)
	sum := sha256.Sum256([]byte(strings.Join(keys, ",")))
	return hex.EncodeToString(sum[:12])
}

// Create implements ports.Commands.
func (c *Commands) Create(ctx context.Context, cmd ports.CreateCommand) error {
	msg := &cloudv1.Command{Body: &cloudv1.Command_Create{Create: &cloudv1.CreateInstances{
		BatchId:     cmd.BatchID,
		ClientToken: cmd.ClientToken,
		Target: target(ports.Target{
			Provider: cmd.Template.Provider, Account: cmd.Template.Account, Region: cmd.Template.Region,
		}),
		TemplateName:   cmd.Template.Name,
		ParametersJson: cmd.Template.ParametersJSON,
		// Still sealed: only the cloud adapter opens them.
		SecretParameters: cmd.Template.SecretParameters,
		Instances:        refs(cmd.Instances),
		ClusterId:        cmd.ClusterID,
		Group:            cmd.Group,
		Offerings:        offerings(cmd.Offerings),
		MaxPrice:         cmd.MaxPrice,
	}}}
	return c.pub.Publish(ctx, messaging.SubjectCloudCreate, fmt.Sprintf("create.%s.%d", cmd.BatchID, cmd.Attempt), msg)
}

func offerings(os []cloudspec.Offering) []*cloudv1.Offering {
	if len(os) == 0 {
		return nil
	}
	out := make([]*cloudv1.Offering, len(os))
	for i, o := range os {
		out[i] = protoconv.OfferingToProto(o)
	}
	return out
}

// Watch implements ports.Commands.
func (c *Commands) Watch(ctx context.Context, cmd ports.WatchCommand) error {
	msg := &cloudv1.Command{Body: &cloudv1.Command_Watch{Watch: &cloudv1.WatchInstances{
		Target: target(cmd.Target), Instances: refs(cmd.Instances),
	}}}
	return c.pub.Publish(ctx, messaging.SubjectCloudWatch, "watch."+setID(cmd.Instances), msg)
}

// Terminate implements ports.Commands.
func (c *Commands) Terminate(ctx context.Context, cmd ports.TerminateCommand) error {
	msg := &cloudv1.Command{Body: &cloudv1.Command_Terminate{Terminate: &cloudv1.TerminateInstances{
		Target: target(cmd.Target), ClusterId: cmd.ClusterID, Instances: refs(cmd.Instances),
	}}}
	return c.pub.Publish(ctx, messaging.SubjectCloudTerminate, "terminate."+setID(cmd.Instances), msg)
}

// Tag implements ports.Commands.
func (c *Commands) Tag(ctx context.Context, cmd ports.TagCommand) error {
	msg := &cloudv1.Command{Body: &cloudv1.Command_Tag{Tag: &cloudv1.TagInstances{
		RequestId: cmd.RequestID, Target: target(cmd.Target), ClusterId: cmd.ClusterID,
		Instances: refs(cmd.Instances), CheckOnly: cmd.CheckOnly,
	}}}
	return c.pub.Publish(ctx, messaging.SubjectCloudTag, "tag."+cmd.RequestID, msg)
}

// RunHook implements ports.Commands.
func (c *Commands) RunHook(ctx context.Context, cmd ports.HookCommand) error {
	msg := &hookv1.RunHook{
		InstanceId:    cmd.InstanceID,
		Attempt:       cmd.Attempt,
		Hook:          hookv1.HookKind(cmd.Kind),
		Group:         cmd.Group,
		Host:          cmd.Host,
		Port:          cmd.Port,
		Script:        cmd.Script,
		Env:           cmd.Env,
		RedactedEnv:   cmd.RedactedEnv,
		PinnedHostKey: cmd.PinnedHostKey,
		HookName:      cmd.HookName,
	}
	if cmd.Timeout > 0 {
		msg.Timeout = durationpb.New(cmd.Timeout)
	}
	return c.pub.Publish(ctx, messaging.SubjectHookRun, fmt.Sprintf("hook.%s.%d", cmd.InstanceID, cmd.Attempt), msg)
}

// ListInventory implements ports.Commands.
func (c *Commands) ListInventory(ctx context.Context, r ports.InventoryRequest) error {
	msg := &cloudv1.Command{Body: &cloudv1.Command_ListInventory{ListInventory: &cloudv1.ListInventory{
		Target: target(r.Target), ClusterId: r.ClusterID, RequestId: r.RequestID,
	}}}
	return c.pub.Publish(ctx, messaging.SubjectCloudInventory, "inventory."+r.RequestID, msg)
}
