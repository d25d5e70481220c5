package app

import "time"

// OrphanHold is lifecycle's orphan hold as the groups bucket holds it (a
// reserved key, not a group): the reconciler's start-up hold after a
// start from empty state, the operator's release, and the tagged VMs it
// holds back, for operators (the status API and page).
type OrphanHold struct {
	// Since and Until bound the start-up hold (zero: none was taken).
	Since, Until time.Time
	// ReleasedAt is the operator's last release (zero: none).
	ReleasedAt time.Time
	// Held counts the held-back orphans by reason ("empty_start",
	// "implausible", "cap"); Waiting are the cloud ids held until an
	// operator releases them, oldest first, bounded.
	Held    map[string]int
	Waiting []string
	// UpdatedAt is when lifecycle last wrote it.
	UpdatedAt time.Time
}

// Holding reports whether the start-up hold is on at now.
func (h OrphanHold) Holding(now time.Time) bool {
	return !h.Since.IsZero() && now.Before(h.Until)
}

// SetOrphanHold applies the orphan hold written at rev (nil: none).
func (m *ReadModel) SetOrphanHold(rev uint64, h *OrphanHold) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.orphanHold = h
	m.advance(BucketGroups, rev)
}

// OrphanHold returns the orphan hold, if lifecycle stored one.
func (m *ReadModel) OrphanHold() (OrphanHold, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if m.orphanHold == nil {
		return OrphanHold{}, false
	}
	return *m.orphanHold, true
}

// ResetBucket forgets everything the model holds of b, its revision
// included: the bucket was deleted and recreated (state lost), so its
// revisions start over and its new initial values follow.
func (m *ReadModel) ResetBucket(b Bucket) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch b {
	case BucketGroups:
		clear(m.groups)
		m.orphanHold = nil
	case BucketInstances:
		for _, e := range m.instances {
			m.unindex(e)
		}
	case BucketCatalog:
		clear(m.catalog)
	case BucketOfferings:
		clear(m.offerings)
		clear(m.offeringsByRef)
	}
	m.rev[b] = 0
	m.reloading[b] = true
	m.notify()
}
