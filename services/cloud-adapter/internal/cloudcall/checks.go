package cloudcall

import (
	"context"
	"fmt"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// CheckCreate refuses, before any call, a create request no cloud should
// see: a count out of 1..MaxBatch, or no usable ClientToken (without one,
// a retry could create duplicates).
func CheckCreate(req ports.CreateRequest) error {
	switch {
	case req.Count < 1 || req.Count > ports.MaxBatch:
		return ports.NewInvalidParametersError("InvalidInstanceCount", fmt.Sprintf("instance count %d is not in 1..%d", req.Count, ports.MaxBatch))
	case req.ClientToken == "":
		return ports.NewInvalidParametersError("MissingClientToken", "RunInstances without a ClientToken could create duplicates")
	case len(req.ClientToken) > domain.MaxClientTokenLen:
		return ports.NewInvalidParametersError("InvalidClientToken.TooLong", fmt.Sprintf("client token longer than %d characters", domain.MaxClientTokenLen))
	}
	return nil
}

// CheckIDs refuses more ids than one Describe, Terminate or Tag takes.
func CheckIDs(ids []string) error {
	if len(ids) > ports.MaxBatch {
		return ports.NewInvalidParametersError("TooManyInstanceIds", fmt.Sprintf("%d ids, at most %d per call", len(ids), ports.MaxBatch))
	}
	return nil
}

// terminator is one cloud's terminate call and how it refuses a set with
// a VM already gone or going.
type terminator struct {
	// Terminate terminates ids in one call (all or nothing).
	Terminate func(ctx context.Context, ids []string) error
	// Gone says err refused the call because some VM is already gone or
	// terminating.
	Gone func(err error) bool
	// Describe is the adapter's Describe.
	Describe func(ctx context.Context, ids []string) ([]domain.Status, error)
}

// terminateAll implements ports.Cloud's Terminate for clouds whose
// terminate call refuses the whole set when any VM is already gone or
// terminating: on such an answer it describes the VMs and terminates only
// those still there and not terminating. Each round removes at least the
// VMs that made the previous one fail; three rounds cover VMs vanishing
// while it looks.
func (x terminator) terminateAll(ctx context.Context, ids []string) error {
	if err := CheckIDs(ids); err != nil {
		return err
	}
	remaining := ids
	for range 3 {
		if len(remaining) == 0 {
			return nil
		}
		err := x.Terminate(ctx, remaining)
		if err == nil {
			return nil
		}
		if !x.Gone(err) {
			return err
		}
		sts, derr := x.Describe(ctx, remaining)
		if derr != nil {
			return derr
		}
		remaining = remaining[:0:0]
		for _, st := range sts {
			if st.State != domain.StateTerminating {
				remaining = append(remaining, st.CloudID)
			}
		}
	}
	if len(remaining) == 0 {
		return nil
	}
	return ports.NewTransientError("TerminateIncomplete", fmt.Sprintf("%d instances still not terminating", len(remaining)))
}
