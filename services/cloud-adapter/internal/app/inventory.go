package app

import (
	"context"
	"fmt"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
)

// ListInventory lists every VM tagged with the command's cluster id and
// publishes them as one Inventory, the reconciler's view of the cloud. A
// failure is published in the Inventory's error unless it is retryable and
// a redelivery will follow.
func (s *Service) ListInventory(ctx context.Context, l *domain.ListInventory, d Delivery) error {
	if l.ClusterID == "" {
		return fmt.Errorf("%w: inventory without cluster id", ErrInvalidCommand)
	}
	inv := &domain.Inventory{RequestID: l.RequestID, Target: l.Target}
	cloud, target, err := s.cloud(l.Target)
	var vms []domain.Status
	if err == nil {
		vms, err = cloud.ListByTag(ctx, target, l.ClusterID)
	}
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !reportable(err, d) {
			return fmt.Errorf("listing cluster %s: %w", l.ClusterID, err)
		}
		inv.Error = eventError(err)
	}
	for _, vm := range vms {
		inv.Items = append(inv.Items, domain.InventoryItem{
			CloudID:    vm.CloudID,
			InstanceID: vm.Tags[domain.TagInstance],
			Group:      vm.Tags[domain.TagGroup],
			BatchID:    vm.Tags[domain.TagBatch],
			State:      vm.State,
			CreatedAt:  vm.CreatedAt,
			PrivateIP:  vm.PrivateIP,
			Zone:       vm.Zone,
		})
	}
	if err := s.events.Publish(ctx, inventoryID(l.RequestID), inv); err != nil {
		return fmt.Errorf("publishing inventory %s: %w", l.RequestID, err)
	}
	s.log.Info("inventory listed", "request", l.RequestID, "cluster", l.ClusterID, "vms", len(inv.Items), "error", errorCode(inv.Error))
	return nil
}

// errorCode is e's code for logs, "" without an error.
func errorCode(e *domain.CloudError) string {
	if e == nil {
		return ""
	}
	return e.Code
}
