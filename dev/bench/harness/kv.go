package harness

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/messaging"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
)

// ReadInstances returns every instance record in the KV bucket.
func ReadInstances(ctx context.Context, js jetstream.JetStream) ([]*statev1.Instance, error) {
	kv, err := js.KeyValue(ctx, messaging.BucketInstances)
	if err != nil {
		return nil, err
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	var out []*statev1.Instance
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("instances watch closed")
			}
			if e == nil {
				return out, nil
			}
			in := &statev1.Instance{}
			if err := proto.Unmarshal(e.Value(), in); err != nil {
				return nil, fmt.Errorf("decoding %s: %w", e.Key(), err)
			}
			out = append(out, in)
		}
	}
}

// ReadGroups returns every group record in the KV bucket.
func ReadGroups(ctx context.Context, js jetstream.JetStream) ([]*statev1.NodeGroup, error) {
	kv, err := js.KeyValue(ctx, messaging.BucketGroups)
	if err != nil {
		return nil, err
	}
	keys, err := kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []*statev1.NodeGroup
	for k := range keys.Keys() {
		if messaging.IsReservedGroupKey(k) {
			continue // not a group (the orphan hold)
		}
		e, err := kv.Get(ctx, k)
		if err != nil {
			return nil, fmt.Errorf("reading group %s: %w", k, err)
		}
		g := &statev1.NodeGroup{}
		if err := proto.Unmarshal(e.Value(), g); err != nil {
			return nil, fmt.Errorf("decoding group %s: %w", k, err)
		}
		out = append(out, g)
	}
	return out, nil
}

// ReachedAt returns when the instance's history says it entered state
// (the last such transition), and whether it did.
func ReachedAt(in *statev1.Instance, state statev1.InstanceState) (t int64, ok bool) {
	for i := len(in.GetHistory()) - 1; i >= 0; i-- {
		if tr := in.GetHistory()[i]; tr.GetTo() == state {
			return tr.GetAt().AsTime().UnixNano(), true
		}
	}
	return 0, false
}
