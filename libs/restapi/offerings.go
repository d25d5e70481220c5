package restapi

// GroupOfferings are where a group's VMs may be created (its template's
// offerings, in the order written) and which of them cloud adapters found
// out of capacity. Absent when the template has no offerings.
type GroupOfferings struct {
	// Strategy orders them per batch: "priority" (as written) or
	// "balanced" (the zone with the fewest live instances first).
	Strategy string           `json:"strategy"`
	Items    []OfferingStatus `json:"items"`
}

// OfferingStatus is one offering of a group's template.
type OfferingStatus struct {
	Zone string `json:"zone"`
	// SubnetID is empty for the template parameters' subnet.
	SubnetID     string `json:"subnetId,omitempty"`
	InstanceType string `json:"instanceType"`
	// CapacityType is resolved: the offering's, else the template's,
	// else "on-demand".
	CapacityType string `json:"capacityType"`
	// Available is false while a cloud adapter's mark holds: it is then
	// skipped until UnavailableUntil (RFC 3339), for Reason.
	Available        bool            `json:"available"`
	UnavailableUntil string          `json:"unavailableUntil,omitempty"`
	Reason           *OfferingReason `json:"reason,omitempty"`
}

// OfferingReason is the cloud's answer that marked an offering.
type OfferingReason struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

// UnavailableOffering is one live mark (GET /offerings/unavailable): an
// offering of a cloud account and region out of capacity until Until.
type UnavailableOffering struct {
	Provider     string         `json:"provider"`
	Account      string         `json:"account"`
	Region       string         `json:"region"`
	Zone         string         `json:"zone"`
	InstanceType string         `json:"instanceType"`
	CapacityType string         `json:"capacityType"`
	At           string         `json:"at,omitempty"`
	Until        string         `json:"until"`
	Reason       OfferingReason `json:"reason"`
}

// UnavailableOfferingList is every live mark, soonest to end first (GET
// /offerings/unavailable).
type UnavailableOfferingList struct {
	Items []UnavailableOffering `json:"items"`
}
