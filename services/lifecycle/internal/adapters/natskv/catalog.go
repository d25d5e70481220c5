package natskv

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/protoconv"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

var _ ports.CatalogStore = (*Store)(nil)

// ListCatalog implements ports.CatalogStore.
func (s *Store) ListCatalog(ctx context.Context) ([]ports.VersionedCatalogEntry, error) {
	return list(ctx, s.js, s.catalog, noSkip, func(b []byte, rev uint64) (ports.VersionedCatalogEntry, error) {
		e, err := protoconv.UnmarshalCatalog(b)
		return ports.VersionedCatalogEntry{Entry: e, Revision: rev}, err
	})
}

// GetCatalogEntry implements ports.CatalogStore.
func (s *Store) GetCatalogEntry(ctx context.Context, ref domain.CatalogRef) (ports.VersionedCatalogEntry, error) {
	key, err := protoconv.CheckedCatalogKey(ref)
	if err != nil {
		return ports.VersionedCatalogEntry{}, err
	}
	e, err := s.catalog.Get(ctx, key)
	if err != nil {
		return ports.VersionedCatalogEntry{}, mapErr("getting catalog entry", key, err)
	}
	ce, err := protoconv.UnmarshalCatalog(e.Value())
	if err != nil {
		return ports.VersionedCatalogEntry{}, fmt.Errorf("decoding catalog entry %s: %w", key, err)
	}
	return ports.VersionedCatalogEntry{Entry: ce, Revision: e.Revision()}, nil
}

// CreateCatalogEntry implements ports.CatalogStore.
func (s *Store) CreateCatalogEntry(ctx context.Context, e domain.CatalogEntry) (uint64, error) {
	key, err := protoconv.CheckedCatalogKey(e.Ref())
	if err != nil {
		return 0, err
	}
	data, err := proto.Marshal(protoconv.CatalogToProto(e))
	if err != nil {
		return 0, fmt.Errorf("encoding catalog entry %s: %w", key, err)
	}
	rev, err := s.catalog.Create(ctx, key, data)
	return rev, mapErr("creating catalog entry", key, err)
}

// UpdateCatalogEntry implements ports.CatalogStore.
func (s *Store) UpdateCatalogEntry(ctx context.Context, e domain.CatalogEntry, revision uint64) (uint64, error) {
	key, err := protoconv.CheckedCatalogKey(e.Ref())
	if err != nil {
		return 0, err
	}
	data, err := proto.Marshal(protoconv.CatalogToProto(e))
	if err != nil {
		return 0, fmt.Errorf("encoding catalog entry %s: %w", key, err)
	}
	rev, err := s.catalog.Update(ctx, key, data, revision)
	return rev, mapErr("updating catalog entry", key, err)
}

// DeleteCatalogEntry implements ports.CatalogStore.
func (s *Store) DeleteCatalogEntry(ctx context.Context, ref domain.CatalogRef, revision uint64) (uint64, error) {
	key, err := protoconv.CheckedCatalogKey(ref)
	if err != nil {
		return 0, err
	}
	if err := s.catalog.Delete(ctx, key, jetstream.LastRevision(revision)); err != nil {
		return 0, mapErr("deleting catalog entry", key, err)
	}
	return lastRevision(ctx, s.catalog), nil
}
