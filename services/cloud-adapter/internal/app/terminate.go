package app

import (
	"context"
	"fmt"

	"github.com/nodesmith/nodesmith/libs/logging"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// Terminate deletes VMs in sets of at most ports.MaxBatch and publishes
// InstancesTerminated for each set (a VM already gone counts as done; an
// instance that never got a cloud id has nothing to delete and is reported
// done too). A definitive failure is published as TerminateFailed for that
// set; a retryable one returns an error so the command is redelivered,
// except on the last delivery.
func (s *Service) Terminate(ctx context.Context, t *cloudv1.TerminateInstances, d Delivery) error {
	if len(t.GetInstances()) == 0 {
		return fmt.Errorf("%w: terminate without instances", ErrInvalidCommand)
	}
	cloud, target, err := s.cloud(t.GetTarget())
	if err != nil {
		return s.terminateFailed(ctx, t.GetInstances(), err)
	}
	log := logging.WithTrace(ctx, s.log).With("account", target.Account, "region", target.Region, "delivery", d.Attempt)

	// Sets of refs sharing ports.MaxBatch distinct cloud ids; refs without
	// a cloud id ride along with the first set.
	type set struct {
		ids  []string
		refs []*cloudv1.InstanceRef
	}
	sets := []*set{{}}
	seen := map[string]*set{}
	for _, r := range t.GetInstances() {
		id := r.GetCloudId()
		if id == "" {
			sets[0].refs = append(sets[0].refs, r)
			continue
		}
		if st, ok := seen[id]; ok {
			st.refs = append(st.refs, r)
			continue
		}
		cur := sets[len(sets)-1]
		if len(cur.ids) == ports.MaxBatch {
			cur = &set{}
			sets = append(sets, cur)
		}
		cur.ids = append(cur.ids, id)
		cur.refs = append(cur.refs, r)
		seen[id] = cur
	}

	for _, st := range sets {
		if len(st.ids) > 0 {
			err := cloud.Terminate(ctx, target, st.ids)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if !reportable(err, d) {
					return fmt.Errorf("terminating %d instances: %w", len(st.ids), err)
				}
				if err := s.terminateFailed(ctx, st.refs, err); err != nil {
					return err
				}
				continue
			}
		}
		ev := &cloudv1.Event{Body: &cloudv1.Event_Terminated{Terminated: &cloudv1.InstancesTerminated{Instances: st.refs}}}
		if err := s.events.Publish(ctx, terminatedID(st.refs), ev); err != nil {
			return fmt.Errorf("publishing terminated instances: %w", err)
		}
		for _, r := range st.refs {
			log.Info("instance terminated", "instance", r.GetInstanceId(), "group", r.GetGroup(), "cloud_id", r.GetCloudId())
		}
	}
	return nil
}

func (s *Service) terminateFailed(ctx context.Context, refs []*cloudv1.InstanceRef, cause error) error {
	ev := &cloudv1.Event{Body: &cloudv1.Event_TerminateFailed{TerminateFailed: &cloudv1.TerminateFailed{
		Instances: refs, Error: protoError(cause),
	}}}
	if err := s.events.Publish(ctx, terminateFailedID(refs), ev); err != nil {
		return fmt.Errorf("publishing terminate failure: %w", err)
	}
	for _, r := range refs {
		s.log.Warn("terminate failed", "instance", r.GetInstanceId(), "group", r.GetGroup(), "cloud_id", r.GetCloudId(),
			"kind", ports.KindOf(cause).String(), "err", cause)
	}
	return nil
}
