package app

import (
	"github.com/nodesmith/nodesmith/libs/providerid"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
)

func testGroup(id string, minSize, maxSize, target int32) *statev1.NodeGroup {
	return &statev1.NodeGroup{
		Id: id, MinSize: minSize, MaxSize: maxSize, TargetSize: target,
		InstanceTemplate: &statev1.InstanceTemplate{Name: id + "-tpl", Provider: "tencentcloud", Region: "ap-guangzhou", Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4", HourlyPrice: 0.4},
		NodeTemplate:     &statev1.NodeTemplate{Capacity: map[string]string{"cpu": "2", "memory": "4Gi"}},
	}
}

func testInstance(group, id string, state statev1.InstanceState) *statev1.Instance {
	return &statev1.Instance{Id: id, Group: group, State: state, ProviderId: providerid.Placeholder(group, id)}
}

const (
	statePending  = statev1.InstanceState_INSTANCE_STATE_PENDING
	stateCreating = statev1.InstanceState_INSTANCE_STATE_CREATING
	stateRunning  = statev1.InstanceState_INSTANCE_STATE_RUNNING
	stateDeleting = statev1.InstanceState_INSTANCE_STATE_DELETING
	stateDeleted  = statev1.InstanceState_INSTANCE_STATE_DELETED
)

// syncedModel returns a model with both buckets marked synced.
func syncedModel() *ReadModel {
	m := NewReadModel()
	m.MarkSynced(BucketGroups, nil)
	m.MarkSynced(BucketInstances, nil)
	m.MarkSynced(BucketCatalog, nil)
	return m
}
