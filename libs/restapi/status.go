package restapi

// StatusView summarises the gateway's view (GET /status).
type StatusView struct {
	// Role is what the caller's token may do: "read-only" or "admin" (the
	// status page shows its write controls to admins only).
	Role      string            `json:"role"`
	Synced    bool              `json:"synced"`
	Revisions map[string]uint64 `json:"revisions"`
	Groups    []GroupStatus     `json:"groups"`
	// Totals counts instances per state across all groups.
	Totals map[string]int `json:"totals"`
	// Orphans is what lifecycle's orphan reconciler holds back instead of
	// terminating; absent until lifecycle stored its hold.
	Orphans *OrphansView `json:"orphans,omitempty"`
}

// OrphansView is the orphan reconciler's hold: after lifecycle started
// from empty state (a fresh install, or the instances were lost), tagged
// VMs without a record created before the hold started are reported, not
// terminated, until an operator releases them or the hold ends.
type OrphansView struct {
	// Holding: the start-up hold is on.
	Holding bool `json:"holding"`
	// HoldSince and HoldUntil bound the start-up hold.
	HoldSince string `json:"holdSince,omitempty"`
	HoldUntil string `json:"holdUntil,omitempty"`
	// ReleasedAt is the operator's last release.
	ReleasedAt string `json:"releasedAt,omitempty"`
	// Held counts the orphans held back by reason: empty_start (the
	// start-up hold), implausible (too many to be orphans), cap (over the
	// per-pass cap, terminated in later passes).
	Held map[string]int `json:"held,omitempty"`
	// Waiting are the cloud ids held until an operator releases them
	// (oldest first, at most 50).
	Waiting []string `json:"waiting"`
	// Release is the admin call that releases them (terminated from the
	// next reconciler pass on, at most the per-pass cap each pass).
	Release string `json:"release"`
	// UpdatedAt is when lifecycle last wrote the hold.
	UpdatedAt string `json:"updatedAt,omitempty"`
}

// GroupStatus summarises one group.
type GroupStatus struct {
	ID             string         `json:"id"`
	MinSize        int32          `json:"minSize"`
	MaxSize        int32          `json:"maxSize"`
	TargetSize     int32          `json:"targetSize"`
	Instances      map[string]int `json:"instances"`
	CreationFailed int            `json:"creationFailed"`
}

// OrphanRelease is the answer of POST /reconciler/release-orphans.
type OrphanRelease struct {
	Released bool `json:"released"`
}
