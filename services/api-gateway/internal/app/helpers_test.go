package app

import (
	"github.com/nodesmith/nodesmith/libs/providerid"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

func testGroup(id string, minSize, maxSize, target int32) *domain.NodeGroup {
	return &domain.NodeGroup{
		ID: id, MinSize: minSize, MaxSize: maxSize, TargetSize: target,
		InstanceTemplate: &domain.InstanceTemplate{Name: id + "-tpl", Provider: "tencentcloud", Region: "ap-guangzhou", Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4", HourlyPrice: 0.4},
		NodeTemplate:     &domain.NodeTemplate{Capacity: map[string]string{"cpu": "2", "memory": "4Gi"}},
	}
}

func testInstance(group, id string, state domain.InstanceState) *domain.Instance {
	return &domain.Instance{ID: id, Group: group, State: state, ProviderID: providerid.Placeholder(group, id)}
}

const (
	statePending  = domain.StatePending
	stateCreating = domain.StateCreating
	stateRunning  = domain.StateRunning
	stateDeleting = domain.StateDeleting
	stateDeleted  = domain.StateDeleted
)

// syncedModel returns a model with both buckets marked synced.
func syncedModel() *ReadModel {
	m := NewReadModel()
	m.MarkSynced(BucketGroups, nil)
	m.MarkSynced(BucketInstances, nil)
	m.MarkSynced(BucketCatalog, nil)
	return m
}
