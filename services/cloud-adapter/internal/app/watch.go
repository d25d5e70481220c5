package app

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nodesmith/nodesmith/libs/logging"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// Watch watches VMs of an earlier create: lifecycle sends it when no create
// command is watching them (after its own restart, for instance); a create
// command watches the VMs it created itself (Create). It polls the cloud (Describe in sets of at most ports.MaxBatch), every
// FastPollInterval while VMs are likely to change and every PollInterval
// once nothing changed for FastPollFor (Options.PollAfter), until
// every instance has settled (domain.Watch says when), publishing
// InstanceObserved for each state change. It gives up after MaxWatch:
// lifecycle's deadlines cover instances that never settle. Throttled and
// transient Describe failures just wait for the next round; invalid
// parameters (malformed ids) make the command invalid; other failures
// (auth) return an error so the command is redelivered.
//
// The command's message is heartbeated by the worker meanwhile. On
// shutdown the watch returns ErrHandedBack: its command goes to another
// replica, which re-publishes observations already made under the same
// message ids (deduplicated).
func (s *Service) Watch(ctx context.Context, w *domain.WatchInstances, d Delivery) error {
	var refs []domain.InstanceRef
	for _, r := range w.Instances {
		if r.CloudID == "" {
			s.log.Warn("cannot watch an instance without a cloud id", "instance", r.InstanceID, "group", r.Group)
			continue
		}
		refs = append(refs, r)
	}
	if len(refs) == 0 {
		return fmt.Errorf("%w: watch without any cloud id", ErrInvalidCommand)
	}
	cloud, target, err := s.cloud(w.Target)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidCommand, err)
	}
	log := logging.WithTrace(ctx, s.log).With("account", target.Account, "region", target.Region, "delivery", d.Attempt)
	return s.watch(ctx, log, cloud, target, refs, nil)
}

// watch is the polling loop of Watch and of Create (which watches the VMs
// it created); every ref has a cloud id. rl, set for a create with
// offerings, relaunches a VM that fails to launch for capacity on another
// offering and watches the new VM instead.
func (s *Service) watch(ctx context.Context, log *slog.Logger, cloud ports.Cloud, target ports.Target, refs []domain.InstanceRef, rl *relaunches) error {
	byCloud := map[string][]domain.InstanceRef{}
	var ids []string
	for _, r := range refs {
		if _, seen := byCloud[r.CloudID]; !seen {
			ids = append(ids, r.CloudID)
		}
		byCloud[r.CloudID] = append(byCloud[r.CloudID], r)
	}
	log = log.With("watched", len(ids))

	watch := domain.NewWatch(ids, s.o.NotFoundGrace)
	start := s.o.Now()
	deadline := start.Add(s.o.MaxWatch)
	lastChange := start
	for {
		found, err := s.describe(ctx, cloud, target, watch.Pending())
		switch {
		case err == nil:
			now := s.o.Now()
			changes := watch.Observe(now, found)
			if len(changes) > 0 {
				lastChange = now
			}
			for _, ch := range changes {
				if rl != nil && ch.Status.State == domain.StateLaunchFailed && len(byCloud[ch.CloudID]) == 1 {
					next, ok, err := rl.relaunch(ctx, log, byCloud[ch.CloudID][0], ch.Status)
					if err != nil {
						return err
					}
					if ok {
						byCloud[next.CloudID] = []domain.InstanceRef{next}
						watch.Add(next.CloudID)
						lastChange = now
						continue
					}
				}
				for _, ref := range byCloud[ch.CloudID] {
					if err := s.observed(ctx, ref, ch.Status, rl.observedSuffix(ch.CloudID)); err != nil {
						return err
					}
				}
			}
			if watch.Done() {
				return rl.terminateFailed(ctx, log)
			}
		case ctx.Err() != nil:
			return ctx.Err()
		case ports.IsInvalidParametersError(err):
			// Malformed ids never become valid: drop the command.
			return fmt.Errorf("%w: describing watched instances: %w", ErrInvalidCommand, err)
		case !ports.IsRetryable(err):
			return fmt.Errorf("describing watched instances: %w", err)
		default:
			log.Warn("describe failed, retrying next round", "err", err)
		}
		if !s.o.Now().Before(deadline) {
			log.Warn("giving up watch: instances did not settle in time", "unsettled", len(watch.Pending()), "max_watch", s.o.MaxWatch)
			return rl.terminateFailed(ctx, log)
		}
		if err := s.sleep(ctx, s.o.UntilNextRound(s.o.Now(), lastChange)); err != nil {
			return err
		}
	}
}

func (s *Service) describe(ctx context.Context, cloud ports.Cloud, t ports.Target, ids []string) (map[string]domain.Status, error) {
	found := make(map[string]domain.Status, len(ids))
	for start := 0; start < len(ids); start += ports.MaxBatch {
		part := ids[start:min(start+ports.MaxBatch, len(ids))]
		sts, err := cloud.Describe(ctx, t, part)
		if err != nil {
			return nil, err
		}
		for _, st := range sts {
			found[st.CloudID] = st
		}
	}
	return found, nil
}

// observed publishes st for ref; idSuffix ends the message id (a
// relaunched VM's, see relaunches.observedSuffix).
func (s *Service) observed(ctx context.Context, ref domain.InstanceRef, st domain.Status, idSuffix string) error {
	ev := &domain.InstanceObserved{
		Instance:   ref,
		State:      st.State,
		PrivateIP:  st.PrivateIP,
		ObservedAt: s.o.Now(),
		Zone:       st.Zone,
	}
	if st.State == domain.StateLaunchFailed && st.LaunchError != nil {
		le := st.LaunchError
		ev.LaunchError = &domain.CloudError{Kind: le.Kind, Code: le.Code, Message: le.Message}
	}
	if err := s.events.Publish(ctx, observedID(ref.InstanceID, ref.Attempt, st.State)+idSuffix, ev); err != nil {
		return fmt.Errorf("publishing observation of instance %s: %w", ref.InstanceID, err)
	}
	if ev.LaunchError == nil {
		s.log.Info("instance observed", "instance", ref.InstanceID, "group", ref.Group,
			"cloud_id", ref.CloudID, "state", st.State.String(), "private_ip", st.PrivateIP)
	} else {
		s.log.Warn("instance failed to launch", "instance", ref.InstanceID, "group", ref.Group, "cloud_id", ref.CloudID,
			"zone", st.Zone, "kind", ev.LaunchError.Kind.String(), "code", ev.LaunchError.Code, "reason", ev.LaunchError.Message)
	}
	return nil
}
