package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/nodesmith/nodesmith/libs/logging"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// Terminate deletes VMs in sets of at most ports.MaxBatch and publishes
// InstancesTerminated for each set (a VM already gone counts as done; an
// instance that never got a cloud id has nothing to delete and is reported
// done too). A definitive failure is published as TerminateFailed for that
// set; a retryable one returns an error so the command is redelivered,
// except on the last delivery.
//
// Only this cluster's VMs are terminated: each set is described first and
// a VM that does not carry the command's cluster tag (domain.MayTerminate;
// an adopted instance's VM may carry none) is refused with a definitive
// TerminateFailed (code domain.CodeNotInCluster) and left alone, while the
// rest of the set proceeds. Whatever a command names, a bug or a mix-up of
// ids can then never delete another cluster's machine.
func (s *Service) Terminate(ctx context.Context, t *domain.TerminateInstances, d Delivery) error {
	if len(t.Instances) == 0 {
		return fmt.Errorf("%w: terminate without instances", ErrInvalidCommand)
	}
	cloud, target, err := s.cloud(t.Target)
	if err != nil {
		return s.terminateFailed(ctx, t.Instances, err)
	}
	log := logging.WithTrace(ctx, s.log).With("account", target.Account, "region", target.Region, "delivery", d.Attempt)

	// Sets of refs sharing ports.MaxBatch distinct cloud ids; refs without
	// a cloud id ride along with the first set.
	type set struct {
		ids  []string
		refs []domain.InstanceRef
	}
	sets := []*set{{}}
	seen := map[string]*set{}
	for _, r := range t.Instances {
		id := r.CloudID
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
		done := st.refs
		if len(st.ids) > 0 {
			v, err := s.vet(ctx, cloud, target, t.ClusterID, st.refs)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if !reportable(err, d) {
					return fmt.Errorf("describing %d instances before terminating them: %w", len(st.ids), err)
				}
				if err := s.terminateFailed(ctx, st.refs, err); err != nil {
					return err
				}
				continue
			}
			if len(v.refused) > 0 {
				if err := s.refuse(ctx, log, t.ClusterID, v.refused, v.why); err != nil {
					return err
				}
			}
			if len(v.terminate) > 0 {
				err := cloud.Terminate(ctx, target, v.terminate)
				if err != nil {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					if !reportable(err, d) {
						return fmt.Errorf("terminating %d instances: %w", len(v.terminate), err)
					}
					if err := s.terminateFailed(ctx, v.done, err); err != nil {
						return err
					}
					continue
				}
			}
			done = v.done
		}
		if len(done) == 0 {
			continue
		}
		ev := &domain.InstancesTerminated{Instances: done}
		if err := s.events.Publish(ctx, terminatedID(done), ev); err != nil {
			return fmt.Errorf("publishing terminated instances: %w", err)
		}
		for _, r := range done {
			log.Info("instance terminated", "instance", r.InstanceID, "group", r.Group, "cloud_id", r.CloudID)
		}
	}
	return nil
}

// vetted splits one set of refs by what Describe says of their VMs.
type vetted struct {
	// terminate are the cloud ids to terminate: this cluster's VMs that
	// are not already terminating.
	terminate []string
	// done are the refs reported terminated once terminate succeeded:
	// those of terminate, of VMs already terminating or gone, and refs
	// without a cloud id.
	done []domain.InstanceRef
	// refused are the refs of VMs that are not this cluster's; why says
	// why, by cloud id.
	refused []domain.InstanceRef
	why     map[string]string
}

// vet describes the VMs of refs (at most ports.MaxBatch distinct cloud ids)
// and sorts them with domain.MayTerminate. A VM Describe does not list is
// gone: it counts as terminated, as it always has (nothing is deleted for
// it). A VM is refused when any ref naming it may not terminate it.
func (s *Service) vet(ctx context.Context, cloud ports.Cloud, target ports.Target, clusterID string, refs []domain.InstanceRef) (vetted, error) {
	var ids []string
	seen := map[string]bool{}
	for _, r := range refs {
		if id := r.CloudID; id != "" && !seen[id] {
			seen[id] = true
			ids = append(ids, id)
		}
	}
	v := vetted{why: map[string]string{}}
	var found []domain.Status
	if clusterID != "" {
		// Without a cluster id nothing may be terminated: no call needed.
		var err error
		if found, err = cloud.Describe(ctx, target, ids); err != nil {
			return vetted{}, err
		}
	}
	byID := make(map[string]domain.Status, len(found))
	for _, st := range found {
		byID[st.CloudID] = st
	}
	for _, r := range refs {
		id := r.CloudID
		st, listed := byID[id]
		if id == "" || (clusterID != "" && !listed) {
			continue // nothing to delete, or gone
		}
		if may, why := domain.MayTerminate(st.Tags, clusterID, r.Adopted); !may {
			v.why[id] = why
		}
	}
	queued := map[string]bool{}
	for _, r := range refs {
		id := r.CloudID
		if _, refused := v.why[id]; refused {
			v.refused = append(v.refused, r)
			continue
		}
		v.done = append(v.done, r)
		if st, ok := byID[id]; ok && st.State != domain.StateTerminating && !queued[id] {
			queued[id] = true
			v.terminate = append(v.terminate, id)
		}
	}
	return v, nil
}

// refuse reports refs whose VMs are not this cluster's: one definitive
// TerminateFailed for them and an error log per VM. Lifecycle keeps such an
// instance Deleting and retries with backoff, showing the error.
func (s *Service) refuse(ctx context.Context, log *slog.Logger, clusterID string, refs []domain.InstanceRef, why map[string]string) error {
	var parts []string
	reported := map[string]bool{}
	for _, r := range refs {
		id := r.CloudID
		log.Error("refusing to terminate a VM that is not this cluster's", "instance", r.InstanceID, "group", r.Group,
			"cloud_id", id, "cluster", clusterID, "adopted", r.Adopted, "why", why[id])
		if !reported[id] {
			reported[id] = true
			parts = append(parts, id+": "+why[id])
		}
	}
	cause := ports.NewInvalidParametersError(domain.CodeNotInCluster,
		fmt.Sprintf("not terminated, not cluster %q's: %s", clusterID, strings.Join(parts, "; ")))
	ev := &domain.TerminateFailed{Instances: refs, Error: eventError(cause)}
	if err := s.events.Publish(ctx, terminateFailedID(refs), ev); err != nil {
		return fmt.Errorf("publishing refused terminations: %w", err)
	}
	return nil
}

func (s *Service) terminateFailed(ctx context.Context, refs []domain.InstanceRef, cause error) error {
	ev := &domain.TerminateFailed{Instances: refs, Error: eventError(cause)}
	if err := s.events.Publish(ctx, terminateFailedID(refs), ev); err != nil {
		return fmt.Errorf("publishing terminate failure: %w", err)
	}
	for _, r := range refs {
		s.log.Warn("terminate failed", "instance", r.InstanceID, "group", r.Group, "cloud_id", r.CloudID,
			"kind", ports.KindOf(cause).String(), "err", cause)
	}
	return nil
}
