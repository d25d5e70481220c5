package app

import (
	"context"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"
	"github.com/nodesmith/nodesmith/libs/logging"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// Spot interruptions (issue 16): the node agent taints and annotates the
// Node of a spot VM the cloud is about to reclaim (libs/contract spot.go);
// the node check turns that into domain.SpotInterrupted, which drains the
// instance (before_delete, deadline = the termination time) and releases
// it, so the dispatcher starts a replacement at once.

// ReasonSpotInterrupted is the notice (Kubernetes Event) recorded on a Node
// whose spot VM is reclaimed.
const ReasonSpotInterrupted = "SpotInterrupted"

// EnvHookDeadline is the standard hook variable telling a before_delete
// hook of an interrupted instance when it must be done (RFC 3339, UTC):
// a drain script can pass what is left as its own timeout.
const EnvHookDeadline = "NODESMITH_HOOK_DEADLINE"

// SpotObserver is implemented by Observers that also record spot
// interruptions (optional, so other Observers need not change).
type SpotObserver interface {
	// SpotInterrupted counts an instance of group whose VM the cloud
	// reclaims.
	SpotInterrupted(group string)
	// SpotReplacementRunning records the time from a notice to the
	// Running of the group's next instance created after it (its
	// replacement).
	SpotReplacementRunning(group string, d time.Duration)
}

// maxSpotNotices bounds the notices waiting for a replacement, per group
// (a group scaled down meanwhile never replaces them).
const maxSpotNotices = 1000

// hasSpotTaint reports whether the node agent marked n as reclaimed.
func hasSpotTaint(n ports.Node) bool {
	for _, t := range n.Taints {
		if t.Key == contract.TaintSpotInterruption {
			return true
		}
	}
	return false
}

// spotTime parses a spot annotation of n (zero when absent or malformed:
// the agent writes RFC 3339).
func spotTime(n ports.Node, key string) time.Time {
	v, ok := n.Annotations[key]
	if !ok {
		return time.Time{}
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}
	}
	return t
}

// spotNoticeLocked returns the event for a live instance whose Node (the
// one carrying its providerID: a Node merely named like it proves
// nothing) carries the spot-interruption taint. An instance already being
// deleted needs nothing: repeated Node events and restarts change nothing.
func (nd *nodes) spotNoticeLocked(in domain.Instance) (domain.Event, bool) {
	switch in.State {
	case domain.StateCreated, domain.StateJoined, domain.StateRunning:
	default:
		return nil, false
	}
	n, ok := nd.known.byProviderID(in.ProviderID)
	if !ok || !hasSpotTaint(n) {
		return nil, false
	}
	return domain.SpotInterrupted{NodeName: n.Name, TerminationTime: spotTime(n, contract.AnnotationSpotTerminationTime)}, true
}

// observeSpotLocked counts interruptions and times their replacements:
// a notice waits, per group, for the next instance created after it to
// reach Running (the replacement the dispatcher creates at once; which
// instance replaces which is not recorded, so with several notices the
// oldest pairs with the first such Running). Called with the cache lock held, for every committed result.
func (c *cache) observeSpotLocked(ctx context.Context, res domain.Result) {
	in := res.Instance
	so, _ := c.obs.(SpotObserver)
	for _, m := range res.Moves {
		switch {
		case m.Cause == domain.EventName(domain.SpotInterrupted{}) && m.To == domain.StatePendingDeletion:
			at := c.clock.Now()
			n, ok := c.known.byProviderID(in.ProviderID)
			if ok {
				if t := spotTime(n, contract.AnnotationSpotNoticeObservedAt); !t.IsZero() && t.Before(at) {
					at = t
				}
			}
			c.known.pushSpotNotice(in.Group, at)
			// The group is one short now: the next pass, at once, creates
			// the replacement.
			c.Wake()
			if so != nil {
				so.SpotInterrupted(in.Group)
			}
			logging.WithTrace(ctx, c.log).Warn("spot interruption: draining and replacing the instance",
				"instance", in.ID, "group", in.Group, "node", in.Node(), "cloud_id", in.CloudID,
				"termination_time", spotTime(n, contract.AnnotationSpotTerminationTime), "notice_at", at, "hook_deadline", in.Deadline)
		case m.To == domain.StateRunning:
			at, ok := c.known.popSpotNotice(in.Group, in.CreatedAt)
			if !ok {
				continue
			}
			d := c.clock.Now().Sub(at)
			if so != nil {
				so.SpotReplacementRunning(in.Group, d)
			}
			logging.WithTrace(ctx, c.log).Info("spot interruption: replacement Running",
				"instance", in.ID, "group", in.Group, "since_notice", d)
		}
	}
}

func (c *nodeCache) pushSpotNotice(group string, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.spotNotices == nil {
		c.spotNotices = map[string][]time.Time{}
	}
	c.spotNotices[group] = append(c.spotNotices[group], at)
	if q := c.spotNotices[group]; len(q) > maxSpotNotices {
		c.spotNotices[group] = q[len(q)-maxSpotNotices:]
	}
}

// popSpotNotice returns and forgets the group's oldest notice, if an
// instance created at createdAt can be its replacement: an instance
// created before the notice (a scale-up already under way) is not.
func (c *nodeCache) popSpotNotice(group string, createdAt time.Time) (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.spotNotices[group]
	if len(q) == 0 || createdAt.Before(q[0]) {
		return time.Time{}, false
	}
	at := q[0]
	if len(q) == 1 {
		delete(c.spotNotices, group)
	} else {
		c.spotNotices[group] = q[1:]
	}
	return at, true
}

// spotHook adapts the before_delete hook command of an interrupted
// instance: its timeout ends by the record's deadline (the termination
// time, or sooner), and the script is told that deadline.
func spotHook(hc ports.HookCommand, in domain.Instance, now time.Time) ports.HookCommand {
	if hc.Kind != domain.HookBeforeDelete || in.State != domain.StatePendingDeletion || in.Deadline.IsZero() || !in.Interrupted() {
		return hc
	}
	left := in.Deadline.Sub(now).Truncate(time.Second)
	if left < time.Second {
		left = time.Second
	}
	if hc.Timeout <= 0 || hc.Timeout > left {
		hc.Timeout = left
	}
	hc.Env[EnvHookDeadline] = now.Add(hc.Timeout).UTC().Format(time.RFC3339)
	return hc
}
