package messaging

import (
	"encoding/json"
	"strings"
	"time"
)

// KeyOrphanHold is the reserved key of the groups bucket (BucketGroups)
// that holds lifecycle's orphan hold (OrphanHold, JSON): the reconciler's
// start-up hold after a start from empty state, the operator's release and
// what it holds back. It lives in the groups bucket so that it survives
// the loss of the instances bucket, which is what it guards against, and
// so that every lifecycle replica and every gateway sees it. No group id
// can start with "_" (group ids are DNS labels): readers of the groups
// bucket skip reserved keys (IsReservedGroupKey) or decode them as what
// they are.
const KeyOrphanHold = "_orphan-hold"

// IsReservedGroupKey reports whether a key of the groups bucket holds
// something other than a group (KeyOrphanHold).
func IsReservedGroupKey(key string) bool { return strings.HasPrefix(key, "_") }

// ReleaseOrphansCall is the admin call that releases the VMs the orphan
// reconciler holds back (the gateway's REST API).
const ReleaseOrphansCall = "POST /api/v1/reconciler/release-orphans"

// OrphanHold is the value of KeyOrphanHold. Lifecycle's leader writes it
// (compare-and-set) when a hold starts, when it is released or ends, and
// when what it holds back changes; the gateway shows it.
type OrphanHold struct {
	// Since and Until bound the start-up hold: tagged VMs without a
	// record created before Since are only reported until an operator
	// releases them or Until passes. Zero when no hold is active.
	Since time.Time `json:"since,omitzero"`
	Until time.Time `json:"until,omitzero"`
	// InstancesBucket identifies the instances bucket the hold was taken
	// on (its stream's creation time): a later start from an empty bucket
	// that is another one (deleted and recreated: state lost again) is a
	// new state loss, which holds again and forgets the old release.
	InstancesBucket string `json:"instancesBucket,omitempty"`
	// HadRecords says the leader has seen instance records since the hold
	// was taken: a later start that finds none lost them (even with the
	// same bucket, emptied key by key), which holds again too.
	HadRecords bool `json:"hadRecords,omitempty"`
	// ReleasedAt is the operator's latest release; Released lists the cloud
	// ids it confirmed as orphans: those held back (Waiting) when it was
	// given, bounded. Only they skip the plausibility valve (terminated, at
	// most the per-pass cap each pass); other VMs created before the release
	// are not confirmed by it.
	ReleasedAt time.Time `json:"releasedAt,omitzero"`
	Released   []string  `json:"released,omitempty"`
	// Held counts the orphans the latest comparisons held back, by reason
	// ("empty_start", "implausible", "cap"); Waiting lists the cloud ids
	// held until an operator releases them, oldest first, bounded.
	Held    map[string]int `json:"held,omitempty"`
	Waiting []string       `json:"waiting,omitempty"`
	// UpdatedAt is when the leader last wrote the record.
	UpdatedAt time.Time `json:"updatedAt,omitzero"`
}

// Active reports whether the start-up hold is on at now.
func (h OrphanHold) Active(now time.Time) bool {
	return !h.Since.IsZero() && now.Before(h.Until)
}

// MarshalOrphanHold encodes h for KeyOrphanHold.
func MarshalOrphanHold(h OrphanHold) ([]byte, error) { return json.Marshal(h) }

// UnmarshalOrphanHold decodes the value of KeyOrphanHold.
func UnmarshalOrphanHold(b []byte) (OrphanHold, error) {
	var h OrphanHold
	err := json.Unmarshal(b, &h)
	return h, err
}
