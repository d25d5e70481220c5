package app

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/types/known/timestamppb"

	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
)

// ListInventory lists every VM tagged with the command's cluster id and
// publishes them as one Inventory, the reconciler's view of the cloud. A
// failure is published in the Inventory's error unless it is retryable and
// a redelivery will follow.
func (s *Service) ListInventory(ctx context.Context, l *cloudv1.ListInventory, d Delivery) error {
	if l.GetClusterId() == "" {
		return fmt.Errorf("%w: inventory without cluster id", ErrInvalidCommand)
	}
	inv := &cloudv1.Inventory{RequestId: l.GetRequestId(), Target: l.GetTarget()}
	cloud, target, err := s.cloud(l.GetTarget())
	var vms []domain.Status
	if err == nil {
		vms, err = cloud.ListByTag(ctx, target, l.GetClusterId())
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !reportable(err, d) {
			return fmt.Errorf("listing cluster %s: %w", l.GetClusterId(), err)
		}
		inv.Error = protoError(err)
	}
	for _, vm := range vms {
		item := &cloudv1.InventoryItem{
			CloudId:    vm.CloudID,
			InstanceId: vm.Tags[domain.TagInstance],
			Group:      vm.Tags[domain.TagGroup],
			BatchId:    vm.Tags[domain.TagBatch],
			State:      protoState(vm.State),
			PrivateIp:  vm.PrivateIP,
			Zone:       vm.Zone,
		}
		if !vm.CreatedAt.IsZero() {
			item.CreatedAt = timestamppb.New(vm.CreatedAt)
		}
		inv.Items = append(inv.Items, item)
	}
	ev := &cloudv1.Event{Body: &cloudv1.Event_Inventory{Inventory: inv}}
	if err := s.events.Publish(ctx, inventoryID(l.GetRequestId()), ev); err != nil {
		return fmt.Errorf("publishing inventory %s: %w", l.GetRequestId(), err)
	}
	s.log.Info("inventory listed", "request", l.GetRequestId(), "cluster", l.GetClusterId(), "vms", len(inv.Items), "error", inv.GetError().GetCode())
	return nil
}
