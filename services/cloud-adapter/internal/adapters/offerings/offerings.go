// Package offerings keeps the offerings found out of capacity in the NATS
// KV bucket messaging.BucketOfferings (the ports.OfferingMarks adapter):
// every replica watches the bucket into a local view, and a mark is put
// there for the others (one key per messaging.OfferingKey, the value a
// cloudv1.OfferingUnavailable).
package offerings

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nodesmith/nodesmith/libs/messaging"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/protoconv"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

var _ ports.OfferingMarks = (*Marks)(nil)

// Marks is the ports.OfferingMarks adapter on a NATS KV bucket. Run keeps
// its view in step with the bucket.
type Marks struct {
	js     jetstream.JetStream
	bucket string
	log    *slog.Logger

	mu     sync.RWMutex
	marks  map[string]domain.OfferingMark // by key
	synced chan struct{}
	once   sync.Once
}

// New returns marks kept in js's messaging.BucketOfferings.
func New(js jetstream.JetStream, log *slog.Logger) *Marks {
	if log == nil {
		log = slog.Default()
	}
	return &Marks{js: js, bucket: messaging.BucketOfferings, log: log,
		marks: map[string]domain.OfferingMark{}, synced: make(chan struct{})}
}

// Key is the key of offering o's mark in target t.
func Key(t domain.Target, o domain.Offering) string {
	return messaging.OfferingKey(t.Provider, t.Account, t.Region, o.Zone, o.InstanceType, o.CapacityType)
}

// Synced is closed once the view holds the bucket's marks.
func (m *Marks) Synced() <-chan struct{} { return m.synced }

// Run watches the bucket into the view until ctx ends; a watch that breaks
// (NATS restarting, the bucket recreated) is re-established
// (messaging.WatchKV).
func (m *Marks) Run(ctx context.Context) error {
	return messaging.WatchKV(ctx, m.js, m.bucket, ">", 200*time.Millisecond, messaging.KVMirror{
		Apply: m.apply,
		Synced: func(keys map[string]struct{}) {
			m.mu.Lock()
			for k := range m.marks {
				if _, ok := keys[k]; !ok {
					delete(m.marks, k)
				}
			}
			m.mu.Unlock()
			m.once.Do(func() { close(m.synced) })
		},
		Reset: func() {
			m.mu.Lock()
			clear(m.marks)
			m.mu.Unlock()
		},
		Restarting: func(err error, delay time.Duration) {
			m.log.Warn("offerings watch ended, re-establishing", "err", err, "in", delay)
		},
	})
}

func (m *Marks) apply(e jetstream.KeyValueEntry) {
	if op := e.Operation(); op == jetstream.KeyValueDelete || op == jetstream.KeyValuePurge {
		m.mu.Lock()
		delete(m.marks, e.Key())
		m.mu.Unlock()
		return
	}
	var v cloudv1.OfferingUnavailable
	if err := proto.Unmarshal(e.Value(), &v); err != nil {
		m.log.Error("skipping an undecodable offering mark", "key", e.Key(), "revision", e.Revision(), "err", err)
		return
	}
	mark := fromProto(&v)
	m.mu.Lock()
	defer m.mu.Unlock()
	// A mark put by this replica is in the view before its echo arrives;
	// the echo of an older put must not replace it.
	if cur, ok := m.marks[e.Key()]; ok && cur.At.After(mark.At) {
		return
	}
	m.marks[e.Key()] = mark
}

// Unavailable implements ports.OfferingMarks.
func (m *Marks) Unavailable(t domain.Target, o domain.Offering) (domain.OfferingMark, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	mk, ok := m.marks[Key(t, o)]
	return mk, ok
}

// Mark implements ports.OfferingMarks.
func (m *Marks) Mark(ctx context.Context, mark domain.OfferingMark) error {
	mark.Offering.SubnetID = "" // not part of a stock-out
	b, err := proto.Marshal(toProto(mark))
	if err != nil {
		return fmt.Errorf("encoding offering mark: %w", err)
	}
	kv, err := m.js.KeyValue(ctx, m.bucket)
	if err != nil {
		return fmt.Errorf("opening bucket %s: %w", m.bucket, err)
	}
	key := Key(mark.Target, mark.Offering)
	if _, err := kv.Put(ctx, key, b); err != nil {
		return fmt.Errorf("marking offering %s/%s unavailable: %w", mark.Offering.Zone, mark.Offering.InstanceType, err)
	}
	m.mu.Lock()
	m.marks[key] = mark
	m.mu.Unlock()
	return nil
}

func toProto(m domain.OfferingMark) *cloudv1.OfferingUnavailable {
	return &cloudv1.OfferingUnavailable{
		Target:   protoconv.ProtoTarget(m.Target),
		Offering: protoconv.ProtoOffering(&m.Offering),
		At:       timestamppb.New(m.At),
		Until:    timestamppb.New(m.Until),
		Reason:   protoconv.ProtoCloudError(m.Reason),
	}
}

func fromProto(v *cloudv1.OfferingUnavailable) domain.OfferingMark {
	return domain.OfferingMark{
		Target:   protoconv.Target(v.GetTarget()),
		Offering: protoconv.Offering(v.GetOffering()),
		At:       v.GetAt().AsTime(),
		Until:    v.GetUntil().AsTime(),
		Reason:   protoconv.CloudError(v.GetReason()),
	}
}
