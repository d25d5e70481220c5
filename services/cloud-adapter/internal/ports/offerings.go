package ports

import (
	"context"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
)

// OfferingMarks are the offerings found out of capacity, shared by every
// cloud adapter replica (libs/messaging BucketOfferings). A mark names an
// offering by target (provider, account, region), zone, instance type and
// capacity type: the subnet is not part of a stock-out. Implementations
// are safe for concurrent use.
type OfferingMarks interface {
	// Unavailable returns the mark of offering o in target t from a local
	// view (no I/O), expired or not: the caller compares its Until with
	// its clock (domain.OfferingMark.Live).
	Unavailable(t domain.Target, o domain.Offering) (domain.OfferingMark, bool)
	// Mark stores m for every replica (replacing the offering's earlier
	// mark) and puts it in the local view at once. An error means it may
	// not have been stored.
	Mark(ctx context.Context, m domain.OfferingMark) error
}

// OfferingMetrics counts what the offerings of create commands did.
// Implementations accept a nil receiver or are no-ops (NoMetrics).
type OfferingMetrics interface {
	// OfferingMarked counts an offering marked unavailable.
	OfferingMarked(provider string, o domain.Offering)
	// OfferingFallback counts VMs created on another offering than the
	// first one tried (at create, or relaunching a VM that failed to
	// launch).
	OfferingFallback(provider string, relaunch bool)
	// OfferingsExhausted counts a create (or relaunch) that found every
	// offering unavailable.
	OfferingsExhausted(provider string, relaunch bool)
}

// NoMetrics is an OfferingMetrics that records nothing.
type NoMetrics struct{}

func (NoMetrics) OfferingMarked(string, domain.Offering) {}
func (NoMetrics) OfferingFallback(string, bool)          {}
func (NoMetrics) OfferingsExhausted(string, bool)        {}
