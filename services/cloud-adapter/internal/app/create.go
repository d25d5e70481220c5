package app

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"

	"github.com/nodesmith/nodesmith/libs/logging"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// Create creates a batch's VMs, publishes which cloud id each instance got
// (InstancesCreated) as soon as each cloud call returns, then watches the
// created VMs until they settle, in the same command (see watch). The
// cloud ids are published before anything else: that mapping is what lets
// lifecycle find, watch and terminate the VMs, and an InstanceObserved of
// the watch is only ever published after the InstancesCreated naming its
// VM. If the handler dies after InstancesCreated, the command is
// redelivered: the same ClientTokens return the same VMs, the same events
// (same message ids, deduplicated) are published again, and the watch
// resumes. A batch bigger than one cloud call is split into chunks with
// derived ClientTokens (domain.SplitBatch), so a redelivered command
// returns the same VMs chunk by chunk.
//
// A definitive failure (capacity, invalid parameters, auth, or a retryable
// one on the last delivery) is published as CreateFailed for the failing
// chunk and every later one, and the VMs of the earlier chunks are still
// watched; a retryable failure otherwise returns an error so the command
// is redelivered with the same tokens.
func (s *Service) Create(ctx context.Context, c *domain.CreateInstances, d Delivery) error {
	if c.BatchID == "" || len(c.Instances) == 0 {
		return fmt.Errorf("%w: create without batch id or instances", ErrInvalidCommand)
	}
	log := logging.WithTrace(ctx, s.log).With("batch", c.BatchID, "group", c.Group, "template", c.TemplateName,
		"instances", len(c.Instances), "delivery", d.Attempt)
	attempt := batchAttempt(c.Instances)

	cloud, target, err := s.cloud(c.Target)
	if err == nil && c.ClientToken == "" {
		// Never create without a token: a redelivery would create the VMs again.
		err = ports.NewInvalidParametersError("MissingClientToken", "create command has no client token")
	}
	if err != nil {
		return s.createFailed(ctx, log, c, c.Instances, err, createFailedID(c.BatchID, attempt, 0, 1))
	}

	params, err := s.parameters(c)
	if err != nil {
		return s.createFailed(ctx, log, c, c.Instances, err, createFailedID(c.BatchID, attempt, 0, 1))
	}

	if len(c.Offerings) > 0 {
		return s.createOnOfferings(ctx, log, c, d, cloud, target, params)
	}

	chunks := domain.SplitBatch(c.ClientToken, len(c.Instances), ports.MaxBatch)
	var watched []domain.InstanceRef
	for _, ch := range chunks {
		refs := c.Instances[ch.Start:ch.End]
		instanceTag := ""
		if ch.Len() == 1 {
			instanceTag = refs[0].InstanceID
		}
		req := ports.CreateRequest{
			Target:      target,
			ClientToken: ch.Token,
			Template:    c.TemplateName,
			Parameters:  params,
			Count:       ch.Len(),
			Tags:        domain.CreationTags(c.ClusterID, c.Group, c.BatchID, instanceTag),
		}
		ids, err := cloud.CreateBatch(ctx, req)
		if err == nil && len(ids) != ch.Len() {
			// The cloud broke its contract. Retrying with the same token
			// returns the same answer, so this ends as CreateFailed on the
			// last delivery; any VMs it did create carry our tags and the
			// reconciler removes them.
			err = ports.NewTransientError("UnexpectedInstanceCount",
				fmt.Sprintf("asked for %d instances, cloud returned %d ids", ch.Len(), len(ids)))
		}
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if !reportable(err, d) {
				return fmt.Errorf("creating batch %s chunk %d/%d: %w", c.BatchID, ch.Index+1, len(chunks), err)
			}
			rest := c.Instances[ch.Start:]
			if err := s.createFailed(ctx, log, c, rest, err, createFailedID(c.BatchID, attempt, ch.Index, len(chunks))); err != nil {
				return err
			}
			break
		}

		created := make([]domain.InstanceRef, len(refs))
		for i, r := range refs {
			r.CloudID = ids[i]
			if r.Group == "" {
				r.Group = c.Group
			}
			created[i] = r
		}
		ev := &domain.InstancesCreated{BatchID: c.BatchID, Instances: created}
		if err := s.events.Publish(ctx, createdID(c.BatchID, attempt, ch.Index, len(chunks)), ev); err != nil {
			return fmt.Errorf("publishing created instances of batch %s: %w", c.BatchID, err)
		}
		for _, r := range created {
			log.Info("instance created", "instance", r.InstanceID, "cloud_id", r.CloudID)
		}
		watched = append(watched, created...)
	}
	if len(watched) == 0 {
		return nil
	}
	return s.watch(ctx, log, cloud, target, watched, nil)
}

func (s *Service) createFailed(ctx context.Context, log *slog.Logger, c *domain.CreateInstances, refs []domain.InstanceRef, cause error, msgID string) error {
	failed := make([]domain.InstanceRef, len(refs))
	for i, r := range refs {
		if r.Group == "" {
			r.Group = c.Group
		}
		failed[i] = r
	}
	ev := &domain.CreateFailed{BatchID: c.BatchID, Instances: failed, Error: eventError(cause)}
	if err := s.events.Publish(ctx, msgID, ev); err != nil {
		return fmt.Errorf("publishing create failure of batch %s: %w", c.BatchID, err)
	}
	log.Warn("create failed", "failed_instances", len(failed), "kind", ports.KindOf(cause).String(), "err", cause)
	return nil
}

// parameters returns the create parameters with the template's secret
// parameters opened and merged in (a secret parameter replaces a plain one
// of the same name). The opened values exist only here and in the cloud
// call: errors name parameters, never values.
func (s *Service) parameters(c *domain.CreateInstances) (string, error) {
	secret := c.SecretParameters
	if len(secret) == 0 {
		return c.ParametersJSON, nil
	}
	if s.o.OpenParameter == nil {
		return "", ports.NewInvalidParametersError("SecretParametersUnopenable",
			"the template has secret parameters and this cloud adapter has no --secrets-key-file")
	}
	merged := map[string]json.RawMessage{}
	if p := c.ParametersJSON; p != "" {
		if err := json.Unmarshal([]byte(p), &merged); err != nil {
			return "", ports.NewInvalidParametersError("InvalidParameters", "template parameters are not a JSON object")
		}
	}
	for _, name := range slices.Sorted(maps.Keys(secret)) {
		v, err := s.o.OpenParameter(name, secret[name])
		if err != nil {
			return "", ports.NewInvalidParametersError("SecretParameterUnopenable", fmt.Sprintf("secret parameter %q: %v", name, err))
		}
		if !json.Valid([]byte(v)) {
			return "", ports.NewInvalidParametersError("SecretParameterUnopenable", fmt.Sprintf("secret parameter %q is not JSON", name))
		}
		merged[name] = json.RawMessage(v)
	}
	b, err := json.Marshal(merged)
	if err != nil {
		return "", ports.NewInvalidParametersError("InvalidParameters", "encoding parameters")
	}
	return string(b), nil
}
