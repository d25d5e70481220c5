package app

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// outboxItem is one command to publish and the (instance, attempt) pairs it
// settles once published.
type outboxItem struct {
	kind    domain.CommandKind
	publish func(ctx context.Context) error
	covers  map[string]uint32
}

// maxRefsPerCommand bounds the instances of one watch or terminate command
// (the cloud APIs take 100 ids per call).
const maxRefsPerCommand = 100

// publishOutbox publishes the command of every in-flight instance whose
// current attempt has not been published in this leadership term.
func (sc *scheduler) publishOutbox(ctx context.Context) {
	sc.mu.Lock()
	if !sc.loaded {
		sc.mu.Unlock()
		return
	}
	items, skipped := sc.outboxLocked()
	parents := sc.traceParentsLocked(items)
	sc.mu.Unlock()

	for _, s := range skipped {
		// The hook was removed from the group while the instance waited for
		// it: the step has nothing to run.
		ev := domain.HookFinished{Attempt: s.Attempt, Kind: s.Hook, Skipped: true}
		if _, _, err := sc.Apply(ctx, s.InstanceID, ev); err != nil {
			sc.log.Warn("skipping a hook that is no longer configured", "instance", s.InstanceID, "err", err)
		}
	}
	for i, it := range items {
		err := sc.publishTraced(ctx, it, parents[i])
		sc.obs.Published(it.kind, err)
		if errors.Is(err, ports.ErrCommandQueueFull) {
			// The stream refuses every command until the workers drain it:
			// the rest of the pass would only be refused too. Everything
			// unpublished stays in flight and is retried at the next pass.
			sc.log.Warn("command queue full, publishing paused until the next pass",
				"kind", it.kind.String(), "unpublished", len(items)-i, "err", err)
			break
		}
		if err != nil {
			// Retried at the next pass; the record stays in flight.
			sc.log.Warn("publishing a command failed, will retry", "kind", it.kind.String(), "instances", len(it.covers), "err", err)
			continue
		}
		sc.mu.Lock()
		for id, att := range it.covers {
			// An instance that settled meanwhile has nothing to remember.
			if r, ok := sc.insts[id]; ok && r.inst.InFlight {
				sc.published[id] = att
			}
		}
		sc.mu.Unlock()
	}
}

type targetKey struct {
	ports.Target
}

func (sc *scheduler) outboxLocked() ([]outboxItem, []domain.Command) {
	var (
		items     []outboxItem
		skipped   []domain.Command
		creates   = map[string][]domain.Instance{} // batch -> members waiting
		watches   = map[targetKey][]ports.InstanceRef{}
		terminate = map[targetKey][]ports.InstanceRef{}
	)
	// Only instances not at rest can have a command (PendingCommand needs
	// InFlight); setInstLocked forgets the publication of the others.
	ids := slices.Sorted(maps.Keys(sc.idx.active))
	for _, id := range ids {
		in := sc.insts[id].inst
		c, ok := domain.PendingCommand(in)
		if !ok {
			delete(sc.published, id)
			continue
		}
		if att, done := sc.published[id]; done && att == c.Attempt {
			continue
		}
		g, ok := sc.groups[in.Group]
		if !ok {
			sc.log.Warn("in-flight instance of an unknown group: command not published", "instance", id, "group", in.Group)
			continue
		}
		ref := ports.InstanceRef{InstanceID: in.ID, Group: in.Group, Attempt: in.Attempt, CloudID: in.CloudID, Adopted: in.Adopted}
		tk := targetKey{Target: targetOf(g.g.Template)}
		switch c.Kind {
		case domain.CmdCreate:
			creates[c.BatchID] = append(creates[c.BatchID], in)
		case domain.CmdWatch:
			// Only when no create command of this leadership term watches
			// the VM: a create command goes on to watch the VMs it
			// created, under the attempt its publication is remembered by.
			watches[tk] = append(watches[tk], ref)
		case domain.CmdTerminate:
			terminate[tk] = append(terminate[tk], ref)
		case domain.CmdRunHook:
			hc, ok := sc.hookCommandLocked(in, g.g, c.Hook)
			if !ok {
				skipped = append(skipped, c)
				continue
			}
			hc = spotHook(hc, in, sc.clock.Now())
			items = append(items, outboxItem{
				kind:    c.Kind,
				publish: func(ctx context.Context) error { return sc.cmds.RunHook(ctx, hc) },
				covers:  map[string]uint32{in.ID: in.Attempt},
			})
		}
	}
	for _, batch := range slices.Sorted(maps.Keys(creates)) {
		items = append(items, sc.createItemLocked(batch, creates[batch]))
	}
	items = append(items, refItems(domain.CmdWatch, watches, func(ctx context.Context, t ports.Target, refs []ports.InstanceRef) error {
		return sc.cmds.Watch(ctx, ports.WatchCommand{Target: t, Instances: refs})
	})...)
	items = append(items, refItems(domain.CmdTerminate, terminate, func(ctx context.Context, t ports.Target, refs []ports.InstanceRef) error {
		return sc.cmds.Terminate(ctx, ports.TerminateCommand{Target: t, ClusterID: sc.opts.ClusterID, Instances: refs})
	})...)
	return items, skipped
}

func targetOf(t domain.InstanceTemplate) ports.Target {
	return ports.Target{Provider: t.Provider, Account: t.Account, Region: t.Region}
}

func refItems(kind domain.CommandKind, byTarget map[targetKey][]ports.InstanceRef,
	send func(context.Context, ports.Target, []ports.InstanceRef) error) []outboxItem {
	keys := slices.SortedFunc(maps.Keys(byTarget), func(x, y targetKey) int {
		return strings.Compare(x.Provider+"/"+x.Account+"/"+x.Region, y.Provider+"/"+y.Account+"/"+y.Region)
	})
	var items []outboxItem
	for _, k := range keys {
		refs := byTarget[k]
		for len(refs) > 0 {
			chunk := refs[:min(len(refs), maxRefsPerCommand)]
			refs = refs[len(chunk):]
			covers := map[string]uint32{}
			for _, r := range chunk {
				covers[r.InstanceID] = r.Attempt
			}
			t := k.Target
			items = append(items, outboxItem{
				kind:    kind,
				publish: func(ctx context.Context) error { return send(ctx, t, chunk) },
				covers:  covers,
			})
		}
	}
	return items
}

// createItemLocked builds the create command of a batch. Its members are
// every record of the batch, whatever its state or progress, so a
// re-publication always describes the same request as the first one (a
// ClientToken is only idempotent for an identical request; results for
// members that already have their VM are ignored as duplicates).
func (sc *scheduler) createItemLocked(batch string, waiting []domain.Instance) outboxItem {
	// A batch is one group's: its members are found among the group's
	// records (once per publication of the batch's command).
	var members []domain.Instance
	for id := range sc.idx.byGroup[waiting[0].Group] {
		if in := sc.insts[id].inst; in.BatchID == batch {
			members = append(members, in)
		}
	}
	sort.Slice(members, func(i, j int) bool { return members[i].ID < members[j].ID })
	first := waiting[0]
	g := sc.groups[first.Group].g
	cmd := ports.CreateCommand{
		BatchID:     batch,
		ClientToken: first.ClientToken,
		Group:       first.Group,
		ClusterID:   sc.opts.ClusterID,
		Template:    g.Template,
		// In the order the batch was formed with (its id carries it).
		Offerings: domain.BatchOfferings(g.Template, domain.OfferingOrderOf(batch)),
		MaxPrice:  g.Template.MaxPrice,
	}
	covers := map[string]uint32{}
	for _, m := range members {
		cmd.Instances = append(cmd.Instances, ports.InstanceRef{InstanceID: m.ID, Group: m.Group, Attempt: m.Attempt})
	}
	// The publication is named by the attempt of the members waiting for
	// it, so re-publishing the same attempt is deduplicated.
	for _, w := range waiting {
		covers[w.ID] = w.Attempt
		cmd.Attempt = max(cmd.Attempt, w.Attempt)
	}
	return outboxItem{
		kind:    domain.CmdCreate,
		publish: func(ctx context.Context) error { return sc.cmds.Create(ctx, cmd) },
		covers:  covers,
	}
}

// hookCommandLocked builds a hook command; false when the group no longer
// has the hook (or the instance has no address, which the state machine
// never allows for a hook step).
func (sc *scheduler) hookCommandLocked(in domain.Instance, g domain.NodeGroup, kind domain.HookKind) (ports.HookCommand, bool) {
	spec := g.Hooks.AfterCreated
	if kind == domain.HookBeforeDelete {
		spec = g.Hooks.BeforeDelete
	}
	if spec == nil || in.PrivateIP == "" {
		return ports.HookCommand{}, false
	}
	env := map[string]string{}
	maps.Copy(env, g.Template.HookEnv)
	maps.Copy(env, spec.Env)
	standard := map[string]string{
		"NODE_NAME":   in.Node(),
		"NODE_IP":     in.PrivateIP,
		"PROVIDER_ID": in.ProviderID,
		"INSTANCE_ID": in.ID,
		"NODE_GROUP":  in.Group,
		"CLOUD_ID":    in.CloudID,
	}
	// The operator's values may be secrets (a join token): the runner
	// redacts them from the output it logs and returns. The standard
	// variables are not secret and win over the operator's: scripts rely
	// on them.
	var redacted []string
	for name := range env {
		if _, std := standard[name]; !std {
			redacted = append(redacted, name)
		}
	}
	sort.Strings(redacted)
	maps.Copy(env, standard)
	return ports.HookCommand{
		InstanceID:    in.ID,
		Group:         in.Group,
		Attempt:       in.Attempt,
		Kind:          kind,
		HookName:      spec.Name,
		Host:          in.PrivateIP,
		Port:          g.Template.SSHPort,
		Script:        spec.Script,
		Env:           env,
		RedactedEnv:   redacted,
		Timeout:       spec.Timeout,
		PinnedHostKey: in.SSHHostKey,
	}, true
}
