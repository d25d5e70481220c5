package app

import (
	"context"
	"fmt"
	"slices"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// TagInstances serves an explicit adoption: it describes the command's VMs
// and, unless CheckOnly, tags those that exist and belong to no other
// cluster with the cluster id, their group and their instance id (see
// domain.AdoptionTags). One InstancesTagged answers the command: a result
// per VM, or the error of the whole call. A retryable failure is retried
// through a redelivery first; tagging again is harmless.
func (s *Service) TagInstances(ctx context.Context, c *domain.TagInstances, d Delivery) error {
	if c.ClusterID == "" || c.RequestID == "" {
		return fmt.Errorf("%w: tag command without cluster id or request id", ErrInvalidCommand)
	}
	ev := &domain.InstancesTagged{RequestID: c.RequestID, Target: c.Target, CheckOnly: c.CheckOnly}
	results, err := s.tag(ctx, c)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !reportable(err, d) {
			return fmt.Errorf("tagging for request %s: %w", c.RequestID, err)
		}
		ev.Error = eventError(err)
	} else {
		ev.Results = results
	}
	if err := s.events.Publish(ctx, taggedID(c.RequestID, c.CheckOnly), ev); err != nil {
		return fmt.Errorf("publishing tag results %s: %w", c.RequestID, err)
	}
	s.log.Info("instances tagged", "request", c.RequestID, "check_only", c.CheckOnly,
		"vms", len(ev.Results), "error", errorCode(ev.Error))
	return nil
}

func (s *Service) tag(ctx context.Context, c *domain.TagInstances) ([]domain.TagResult, error) {
	cloud, target, err := s.cloud(c.Target)
	if err != nil {
		return nil, err
	}
	var out []domain.TagResult
	for refs := range slices.Chunk(c.Instances, ports.MaxBatch) {
		ids := make([]string, 0, len(refs))
		for _, r := range refs {
			if r.CloudID == "" {
				return nil, ports.NewInvalidParametersError("MissingCloudId", "an instance to tag has no cloud id")
			}
			ids = append(ids, r.CloudID)
		}
		found, err := cloud.Describe(ctx, target, ids)
		if err != nil {
			return nil, err
		}
		byID := make(map[string]domain.Status, len(found))
		for _, st := range found {
			byID[st.CloudID] = st
		}
		var tagged []*domain.TagResult
		chunk := make([]domain.TagResult, len(refs))
		for i, r := range refs {
			res := &chunk[i]
			*res = domain.TagResult{Instance: r, State: domain.StateNotFound}
			st, ok := byID[r.CloudID]
			if !ok || st.State == domain.StateTerminating {
				res.Error = &domain.CloudError{Kind: ports.ErrorKindNotFound, Code: "InstanceNotFound",
					Message: "no VM " + r.CloudID + " in " + target.Account + "/" + target.Region}
				continue
			}
			res.State, res.PrivateIP, res.Zone = st.State, st.PrivateIP, st.Zone
			if got := st.Tags[domain.TagCluster]; got != "" && got != c.ClusterID {
				res.Error = &domain.CloudError{Kind: ports.ErrorKindInvalidParameters, Code: domain.CodeNotInCluster,
					Message: "the VM belongs to cluster " + got + " (tag " + domain.TagCluster + ")"}
				continue
			}
			if !c.CheckOnly {
				tagged = append(tagged, res)
			}
		}
		// One call per group and instance: each VM gets its own instance tag.
		for _, res := range tagged {
			r := res.Instance
			tags := domain.AdoptionTags(c.ClusterID, r.Group, r.InstanceID)
			if err := cloud.Tag(ctx, target, []string{r.CloudID}, tags); err != nil {
				if ctx.Err() != nil || ports.IsRetryable(err) {
					return nil, err
				}
				res.Error = eventError(err)
			}
		}
		out = append(out, chunk...)
	}
	return out, nil
}
