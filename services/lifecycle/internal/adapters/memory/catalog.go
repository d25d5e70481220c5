package memory

import (
	"context"
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/protoconv"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

var _ ports.CatalogStore = (*Store)(nil)

// ListCatalog implements ports.CatalogStore.
func (s *Store) ListCatalog(context.Context) ([]ports.VersionedCatalogEntry, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []ports.VersionedCatalogEntry
	for _, k := range s.catalog.keys() {
		e, err := protoconv.UnmarshalCatalog(s.catalog.data[k].data)
		if err != nil {
			return nil, err
		}
		out = append(out, ports.VersionedCatalogEntry{Entry: e, Revision: s.catalog.data[k].rev})
	}
	return out, nil
}

// GetCatalogEntry implements ports.CatalogStore.
func (s *Store) GetCatalogEntry(_ context.Context, ref domain.CatalogRef) (ports.VersionedCatalogEntry, error) {
	key, err := protoconv.CheckedCatalogKey(ref)
	if err != nil {
		return ports.VersionedCatalogEntry{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e, ok := s.catalog.data[key]
	if !ok {
		return ports.VersionedCatalogEntry{}, fmt.Errorf("catalog %s: %w", key, ports.ErrNotFound)
	}
	ce, err := protoconv.UnmarshalCatalog(e.data)
	return ports.VersionedCatalogEntry{Entry: ce, Revision: e.rev}, err
}

// CreateCatalogEntry implements ports.CatalogStore.
func (s *Store) CreateCatalogEntry(_ context.Context, e domain.CatalogEntry) (uint64, error) {
	key, err := protoconv.CheckedCatalogKey(e.Ref())
	if err != nil {
		return 0, err
	}
	data, err := proto.Marshal(protoconv.CatalogToProto(e))
	if err != nil {
		return 0, err
	}
	return s.write(func() (uint64, error) { return s.catalog.create(key, data) })
}

// UpdateCatalogEntry implements ports.CatalogStore.
func (s *Store) UpdateCatalogEntry(_ context.Context, e domain.CatalogEntry, rev uint64) (uint64, error) {
	key, err := protoconv.CheckedCatalogKey(e.Ref())
	if err != nil {
		return 0, err
	}
	data, err := proto.Marshal(protoconv.CatalogToProto(e))
	if err != nil {
		return 0, err
	}
	return s.write(func() (uint64, error) { return s.catalog.update(key, data, rev) })
}

// DeleteCatalogEntry implements ports.CatalogStore.
func (s *Store) DeleteCatalogEntry(_ context.Context, ref domain.CatalogRef, rev uint64) (uint64, error) {
	key, err := protoconv.CheckedCatalogKey(ref)
	if err != nil {
		return 0, err
	}
	return s.write(func() (uint64, error) { return s.catalog.delete(key, rev) })
}
