package domain

import "time"

// Offering is one place a template's VMs may be created: a zone, the
// subnet there ("" for the parameters'), an instance type and a capacity
// type ("" for the template's).
type Offering struct {
	Zone, SubnetID, InstanceType, CapacityType string
}

// OfferingRef names an offering as its unavailable mark does: per cloud
// account, region, zone, instance type and resolved capacity type (a
// stock-out is not per subnet).
type OfferingRef struct {
	Provider, Account, Region        string
	Zone, InstanceType, CapacityType string
}

// OfferingMark is an offering a cloud adapter found out of capacity (a
// value of the offerings bucket): adapters skip it until Until.
type OfferingMark struct {
	Ref       OfferingRef
	At, Until time.Time
	// Code and Message are the cloud's answer that marked it.
	Code, Message string
}

// Live reports whether the mark still holds at now.
func (m *OfferingMark) Live(now time.Time) bool { return m != nil && now.Before(m.Until) }
