// Package ports declares what the lifecycle application needs from the
// outside world. Each interface documents its error contract; adapters in
// internal/adapters implement them and fakes live beside the real ones.
package ports

import (
	"context"
	"errors"
	"time"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// Store errors. Implementations wrap them; test with errors.Is.
var (
	// ErrNotFound: the key does not exist (or was deleted).
	ErrNotFound = errors.New("not found")
	// ErrConflict: a compare-and-set failed: the key exists on Create, or
	// its revision is not the expected one on Update or Delete.
	ErrConflict = errors.New("revision conflict")
)

// VersionedGroup is a group with the store revision it was read or written at.
type VersionedGroup struct {
	Group    domain.NodeGroup
	Revision uint64
}

// VersionedInstance is an instance with its store revision.
type VersionedInstance struct {
	Instance domain.Instance
	Revision uint64
}

// Store persists groups and instances. Every write is a compare-and-set:
// Create fails with ErrConflict if the key exists, Update and Delete fail
// with ErrConflict unless the stored revision equals the given one.
// Revisions increase monotonically per store (bucket). Other errors mean the
// store is unavailable and the call may be retried.
type Store interface {
	ListGroups(ctx context.Context) ([]VersionedGroup, error)
	GetGroup(ctx context.Context, id string) (VersionedGroup, error)
	CreateGroup(ctx context.Context, g domain.NodeGroup) (uint64, error)
	UpdateGroup(ctx context.Context, g domain.NodeGroup, revision uint64) (uint64, error)
	// DeleteGroup returns the revision of the deletion.
	DeleteGroup(ctx context.Context, id string, revision uint64) (uint64, error)

	// ListInstances returns every instance record, each its own
	// allocation, the caller's to keep: a load caches them as they are
	// rather than copying 100,000 of them (issue 20).
	ListInstances(ctx context.Context) ([]*VersionedInstance, error)
	GetInstance(ctx context.Context, group, id string) (VersionedInstance, error)
	CreateInstance(ctx context.Context, i domain.Instance) (uint64, error)
	UpdateInstance(ctx context.Context, i domain.Instance, revision uint64) (uint64, error)
	// DeleteInstance removes a record (purge of Deleted records) and returns
	// the revision of the deletion.
	DeleteInstance(ctx context.Context, group, id string, revision uint64) (uint64, error)
}

// VersionedCatalogEntry is a catalog entry with its store revision.
type VersionedCatalogEntry struct {
	Entry    domain.CatalogEntry
	Revision uint64
}

// CatalogStore persists the catalog (named instance templates, cloud
// accounts and hooks) with the same compare-and-set and revision
// semantics as Store, in its own bucket (own revision sequence). Keys are
// domain.CatalogRef values.
type CatalogStore interface {
	ListCatalog(ctx context.Context) ([]VersionedCatalogEntry, error)
	GetCatalogEntry(ctx context.Context, ref domain.CatalogRef) (VersionedCatalogEntry, error)
	CreateCatalogEntry(ctx context.Context, e domain.CatalogEntry) (uint64, error)
	UpdateCatalogEntry(ctx context.Context, e domain.CatalogEntry, revision uint64) (uint64, error)
	// DeleteCatalogEntry returns the revision of the deletion.
	DeleteCatalogEntry(ctx context.Context, ref domain.CatalogRef, revision uint64) (uint64, error)
}

// OrphanHold is the persisted state of the reconciler's start-up hold and
// of the operator's release (app/reconcile.go), so that a new leader or a
// restart keeps holding and a release outlives a restart.
type OrphanHold struct {
	// Since and Until bound the start-up hold; zero when none was taken.
	Since, Until time.Time
	// InstancesBucket identifies the instances store the hold was taken
	// on (HoldStore.InstancesBucketID).
	InstancesBucket string
	// HadRecords: instance records were seen since the hold was taken.
	HadRecords bool
	// ReleasedAt is the operator's latest release (zero: none), Released
	// the cloud ids it confirmed: those held back when it was given.
	ReleasedAt time.Time
	Released   []string
	// Held and Waiting are what the latest comparisons held back (see
	// OrphanStatus), for operators.
	Held      map[string]int
	Waiting   []string
	UpdatedAt time.Time
}

// HoldStore persists the orphan hold beside the groups (it must survive
// the loss of the instances), with compare-and-set like Store.
type HoldStore interface {
	// GetOrphanHold returns the hold and its revision, or ErrNotFound.
	GetOrphanHold(ctx context.Context) (OrphanHold, uint64, error)
	// PutOrphanHold writes h if the stored revision is revision (0: if
	// none is stored), else fails with ErrConflict.
	PutOrphanHold(ctx context.Context, h OrphanHold, revision uint64) (uint64, error)
	// InstancesBucketID identifies the store of the instances: it changes
	// when that store is deleted and recreated (state lost).
	InstancesBucketID(ctx context.Context) (string, error)
}

// FeedPos is a position in the instance records' history: the store (a
// recreated store is another one) and the revision read up to.
type FeedPos struct {
	Store string
	Rev   uint64
}

// InstanceChanges are the instance records changed after a FeedPos.
type InstanceChanges struct {
	// Changed are the records written since, at their revision.
	Changed []VersionedInstance
	// Removed are the ids of the records removed since, with the revision
	// of their removal.
	Removed map[string]uint64
	// Pos is where the next InstancesSince continues from.
	Pos FeedPos
}

// ErrFeedGap: the changes since a FeedPos can no longer be known (the
// store was recreated): list everything again.
var ErrFeedGap = errors.New("changes since that position are no longer known")

// InstanceFeed is an optional capability of a Store: what changed since a
// position, so that a standby replica keeps the instance records it loaded
// current, and a promotion reads only what changed rather than every record.
type InstanceFeed interface {
	// InstancesPos returns the current position; a ListInstances made
	// after it, followed by InstancesSince(pos), misses no change.
	InstancesPos(ctx context.Context) (FeedPos, error)
	// InstancesSince returns the changes after pos, or ErrFeedGap. A
	// change written while it runs may be returned now or by the next
	// call (never by neither).
	InstancesSince(ctx context.Context, pos FeedPos) (InstanceChanges, error)
	// RemovalsKept is how long a removal stays known to InstancesSince
	// (0: forever): a position older than that may miss removals.
	RemovalsKept() time.Duration
}
