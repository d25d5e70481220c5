package app

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// CatalogView is one entry of the catalog bucket (a named instance
// template, cloud account or hook) as the read model holds it. Entry is
// shared: callers must not modify it.
type CatalogView struct {
	Key      string
	Entry    *domain.CatalogEntry
	Revision uint64
}

// PutCatalog applies a catalog record written at rev under key.
func (m *ReadModel) PutCatalog(key string, rev uint64, rec *domain.CatalogEntry) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.catalog[key]; ok && old.Revision > rev {
		return
	}
	m.catalog[key] = CatalogView{Key: key, Entry: rec, Revision: rev}
	m.advance(BucketCatalog, rev)
}

// DeleteCatalog applies a delete or purge of key at rev.
func (m *ReadModel) DeleteCatalog(key string, rev uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.catalog, key)
	m.advance(BucketCatalog, rev)
}

// CatalogEntry returns the catalog entry under key ("<kind>.<name>").
func (m *ReadModel) CatalogEntry(key string) (CatalogView, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	v, ok := m.catalog[key]
	return v, ok
}

// Catalog returns the entries whose key starts with prefix ("" = all),
// sorted by key.
func (m *ReadModel) Catalog(prefix string) []CatalogView {
	m.mu.RLock()
	out := make([]CatalogView, 0, len(m.catalog))
	for k, v := range m.catalog {
		if strings.HasPrefix(k, prefix) {
			out = append(out, v)
		}
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b CatalogView) int { return strings.Compare(a.Key, b.Key) })
	return out
}

// CatalogSynced reports whether the catalog's initial values are loaded.
func (m *ReadModel) CatalogSynced() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.synced[BucketCatalog]
}

// WaitForCatalog blocks until the catalog is synced and has applied at
// least revision rev, or ctx ends.
func (m *ReadModel) WaitForCatalog(ctx context.Context, rev uint64) error {
	if err := m.waitUntil(ctx, func() bool { return m.synced[BucketCatalog] && m.rev[BucketCatalog] >= rev }); err != nil {
		return fmt.Errorf("waiting for catalog revision %d: %w", rev, err)
	}
	return nil
}
