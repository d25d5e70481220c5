package app

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// OfferingMarkView is one mark of the offerings bucket as the read model
// holds it. Mark is shared: callers must not modify it.
type OfferingMarkView struct {
	Key      string
	Mark     *domain.OfferingMark
	Revision uint64
}

// PutOffering applies an offerings mark written at rev under key. Marks
// are kept until deleted (the bucket's MaxAge removes them); readers
// ignore those whose until has passed.
func (m *ReadModel) PutOffering(key string, rev uint64, mark *domain.OfferingMark) {
	m.mu.Lock()
	defer m.mu.Unlock()
	old, ok := m.offerings[key]
	if ok && old.Revision > rev {
		return
	}
	if ok {
		m.unindexOffering(old)
	}
	v := OfferingMarkView{Key: key, Mark: mark, Revision: rev}
	m.offerings[key] = v
	keys := m.offeringsByRef[mark.Ref]
	if keys == nil {
		keys = map[string]struct{}{}
		m.offeringsByRef[mark.Ref] = keys
	}
	keys[key] = struct{}{}
	m.advance(BucketOfferings, rev)
}

// unindexOffering removes v from the maps. Called with mu held for
// writing.
func (m *ReadModel) unindexOffering(v OfferingMarkView) {
	delete(m.offerings, v.Key)
	if keys := m.offeringsByRef[v.Mark.Ref]; keys != nil {
		delete(keys, v.Key)
		if len(keys) == 0 {
			delete(m.offeringsByRef, v.Mark.Ref)
		}
	}
}

// DeleteOffering applies a delete or purge of key at rev.
func (m *ReadModel) DeleteOffering(key string, rev uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if old, ok := m.offerings[key]; ok {
		m.unindexOffering(old)
	}
	m.advance(BucketOfferings, rev)
}

// OfferingMark returns the live mark (until after now) of ref, if any.
// Should two keys name the same offering, the one lasting longest wins.
func (m *ReadModel) OfferingMark(ref domain.OfferingRef, now time.Time) (domain.OfferingMark, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	var best *domain.OfferingMark
	for key := range m.offeringsByRef[ref] {
		if v := m.offerings[key].Mark; v.Live(now) && (best == nil || v.Until.After(best.Until)) {
			best = v
		}
	}
	if best == nil {
		return domain.OfferingMark{}, false
	}
	return *best, true
}

// OfferingMarks returns the marks live at now, soonest to end first (ties
// by key).
func (m *ReadModel) OfferingMarks(now time.Time) []OfferingMarkView {
	m.mu.RLock()
	out := make([]OfferingMarkView, 0, len(m.offerings))
	for _, v := range m.offerings {
		if v.Mark.Live(now) {
			out = append(out, v)
		}
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b OfferingMarkView) int {
		return cmp.Or(a.Mark.Until.Compare(b.Mark.Until), cmp.Compare(a.Key, b.Key))
	})
	return out
}

// OfferingsSynced reports whether the offerings bucket's initial values
// are loaded.
func (m *ReadModel) OfferingsSynced() bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.synced[BucketOfferings]
}

// WaitForOfferings blocks until the offerings bucket is synced and has
// applied at least revision rev, or ctx ends.
func (m *ReadModel) WaitForOfferings(ctx context.Context, rev uint64) error {
	if err := m.waitUntil(ctx, func() bool { return m.synced[BucketOfferings] && m.rev[BucketOfferings] >= rev }); err != nil {
		return fmt.Errorf("waiting for offerings revision %d: %w", rev, err)
	}
	return nil
}
