package app

import (
	"context"
	"fmt"
	"slices"

	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// TagInstances serves an explicit adoption: it describes the command's VMs
// and, unless CheckOnly, tags those that exist and belong to no other
// cluster with the cluster id, their group and their instance id (see
// domain.AdoptionTags). One InstancesTagged answers the command: a result
// per VM, or the error of the whole call. A retryable failure is retried
// through a redelivery first; tagging again is harmless.
func (s *Service) TagInstances(ctx context.Context, c *cloudv1.TagInstances, d Delivery) error {
	if c.GetClusterId() == "" || c.GetRequestId() == "" {
		return fmt.Errorf("%w: tag command without cluster id or request id", ErrInvalidCommand)
	}
	ev := &cloudv1.InstancesTagged{RequestId: c.GetRequestId(), Target: c.GetTarget(), CheckOnly: c.GetCheckOnly()}
	results, err := s.tag(ctx, c)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !reportable(err, d) {
			return fmt.Errorf("tagging for request %s: %w", c.GetRequestId(), err)
		}
		ev.Error = protoError(err)
	} else {
		ev.Results = results
	}
	out := &cloudv1.Event{Body: &cloudv1.Event_Tagged{Tagged: ev}}
	if err := s.events.Publish(ctx, taggedID(c.GetRequestId(), c.GetCheckOnly()), out); err != nil {
		return fmt.Errorf("publishing tag results %s: %w", c.GetRequestId(), err)
	}
	s.log.Info("instances tagged", "request", c.GetRequestId(), "check_only", c.GetCheckOnly(),
		"vms", len(ev.GetResults()), "error", ev.GetError().GetCode())
	return nil
}

func (s *Service) tag(ctx context.Context, c *cloudv1.TagInstances) ([]*cloudv1.TagResult, error) {
	cloud, target, err := s.cloud(c.GetTarget())
	if err != nil {
		return nil, err
	}
	var out []*cloudv1.TagResult
	for refs := range slices.Chunk(c.GetInstances(), ports.MaxBatch) {
		ids := make([]string, 0, len(refs))
		for _, r := range refs {
			if r.GetCloudId() == "" {
				return nil, ports.NewInvalidParametersError("MissingCloudId", "an instance to tag has no cloud id")
			}
			ids = append(ids, r.GetCloudId())
		}
		found, err := cloud.Describe(ctx, target, ids)
		if err != nil {
			return nil, err
		}
		byID := make(map[string]domain.Status, len(found))
		for _, st := range found {
			byID[st.CloudID] = st
		}
		var tagged []*cloudv1.TagResult
		for _, r := range refs {
			res := &cloudv1.TagResult{Instance: r, State: cloudv1.CloudState_CLOUD_STATE_NOT_FOUND}
			out = append(out, res)
			st, ok := byID[r.GetCloudId()]
			if !ok || st.State == domain.StateTerminating {
				res.Error = &cloudv1.CloudError{Kind: cloudv1.ErrorKind_ERROR_KIND_NOT_FOUND, Code: "InstanceNotFound",
					Message: "no VM " + r.GetCloudId() + " in " + target.Account + "/" + target.Region}
				continue
			}
			res.State, res.PrivateIp, res.Zone = protoState(st.State), st.PrivateIP, st.Zone
			if got := st.Tags[domain.TagCluster]; got != "" && got != c.GetClusterId() {
				res.Error = &cloudv1.CloudError{Kind: cloudv1.ErrorKind_ERROR_KIND_INVALID_PARAMETERS, Code: domain.CodeNotInCluster,
					Message: "the VM belongs to cluster " + got + " (tag " + domain.TagCluster + ")"}
				continue
			}
			if !c.GetCheckOnly() {
				tagged = append(tagged, res)
			}
		}
		// One call per group and instance: each VM gets its own instance tag.
		for _, res := range tagged {
			r := res.GetInstance()
			tags := domain.AdoptionTags(c.GetClusterId(), r.GetGroup(), r.GetInstanceId())
			if err := cloud.Tag(ctx, target, []string{r.GetCloudId()}, tags); err != nil {
				if ctx.Err() != nil || ports.IsRetryable(err) {
					return nil, err
				}
				res.Error = protoError(err)
			}
		}
	}
	return out, nil
}
