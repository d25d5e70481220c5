package app

import (
	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
)

// OfferingStatus is one offering of a group's template with its capacity
// type resolved (the offering's, else the template's, else on-demand) and
// the live mark that makes it unavailable, if any.
type OfferingStatus struct {
	Offering domain.Offering
	// Unavailable is nil while the offering may be used.
	Unavailable *domain.OfferingMark
}

// OfferingRef names offering o of template t as its mark does: the
// template's cloud account and region, o's zone and type, and o's capacity
// type resolved against the template's (cloudspec.Offering.WithCapacity,
// the rule lifecycle and the cloud adapter name marks by).
func OfferingRef(t *domain.InstanceTemplate, o domain.Offering) domain.OfferingRef {
	r := cloudspec.Offering{Zone: o.Zone, SubnetID: o.SubnetID, InstanceType: o.InstanceType, CapacityType: o.CapacityType}.WithCapacity(t.CapacityType)
	return domain.OfferingRef{
		Provider: t.Provider, Account: t.Account, Region: t.Region,
		Zone: r.Zone, InstanceType: r.InstanceType, CapacityType: r.CapacityType,
	}
}

// GroupOfferings returns the offerings of template t (a group's) in the
// order written, each with its live mark; nil when t has none. It works
// before the offerings bucket is loaded (nothing is marked then).
func (s *Service) GroupOfferings(t *domain.InstanceTemplate) []OfferingStatus {
	if t == nil || len(t.Offerings) == 0 {
		return nil
	}
	now := s.cfg.Now()
	out := make([]OfferingStatus, 0, len(t.Offerings))
	for _, o := range t.Offerings {
		ref := OfferingRef(t, o)
		st := OfferingStatus{Offering: o}
		st.Offering.CapacityType = ref.CapacityType
		if m, ok := s.rm.OfferingMark(ref, now); ok {
			st.Unavailable = &m
		}
		out = append(out, st)
	}
	return out
}

// UnavailableOfferings returns every live mark, soonest to end first:
// Unavailable until the offerings bucket is loaded.
func (s *Service) UnavailableOfferings() ([]OfferingMarkView, error) {
	if !s.rm.OfferingsSynced() {
		return nil, domain.Errorf(contract.CodeUnavailable, "the gateway is still loading the offerings marked unavailable from NATS")
	}
	return s.rm.OfferingMarks(s.cfg.Now()), nil
}
