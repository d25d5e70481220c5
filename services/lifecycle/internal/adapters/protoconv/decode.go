package protoconv

import (
	"google.golang.org/protobuf/proto"

	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// The decoders of the stores' values: the protobuf bytes of a KV record to
// the domain type, shared by the NATS KV store and the in-memory one.

// UnmarshalGroup decodes a nodesmith_groups value.
func UnmarshalGroup(b []byte) (domain.NodeGroup, error) {
	var p statev1.NodeGroup
	if err := proto.Unmarshal(b, &p); err != nil {
		return domain.NodeGroup{}, err
	}
	return GroupFromProto(&p), nil
}

// UnmarshalInstance decodes a nodesmith_instances value.
func UnmarshalInstance(b []byte) (domain.Instance, error) {
	var p statev1.Instance
	if err := proto.Unmarshal(b, &p); err != nil {
		return domain.Instance{}, err
	}
	return InstanceFromProto(&p), nil
}

// UnmarshalCatalog decodes a nodesmith_catalog value.
func UnmarshalCatalog(b []byte) (domain.CatalogEntry, error) {
	var p statev1.CatalogEntry
	if err := proto.Unmarshal(b, &p); err != nil {
		return domain.CatalogEntry{}, err
	}
	return CatalogFromProto(&p), nil
}
