package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodesmith/nodesmith/cmd/nodesmithctl/client"
	"github.com/nodesmith/nodesmith/libs/backoff"
	"github.com/nodesmith/nodesmith/libs/restapi"
)

func newWatchCommand(env *Env) *cobra.Command {
	var o watchOptions
	cmd := &cobra.Command{
		Use:   "watch",
		Short: "Follow scale-ups and scale-downs live: a progress line per group and each transition",
		Long: `watch follows the gateway's event stream (GET /api/v1/watch, server-sent
events; no polling): a progress line per node group whenever its target or
instance counts change (Running against the target, and the instances on
their way in or out) and every instance transition as it happens.

--until-stable exits 0 once every watched group has its target number of
instances Running and none on their way in or out. --timeout bounds the
wait: with --until-stable, running out of time exits 6; without, it just
ends the watch. A dropped stream is resumed (the server sends a fresh
snapshot).`,
		Example: `  nodesmithctl scale web --to 5
  nodesmithctl watch --group web --until-stable --timeout 10m`,
		Args: noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.timeout < 0 {
				return usagef(errors.New("--timeout must not be negative"))
			}
			c, err := env.client()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			if ctx == nil {
				ctx = context.Background()
			}
			return runWatch(ctx, c, env.Out, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.group, "group", "", "watch only this node group")
	f.BoolVar(&o.untilStable, "until-stable", false, "exit 0 once every watched group has its target Running and nothing in flight")
	f.DurationVar(&o.timeout, "timeout", 0, "stop after this long (with --until-stable: exit 6); 0: no limit")
	return cmd
}

type watchOptions struct {
	group       string
	untilStable bool
	timeout     time.Duration
	// reconnectDelay is the first pause before resuming a dropped stream.
	reconnectDelay time.Duration
}

// maxReconnects bounds consecutive failed attempts to (re)open the stream.
const maxReconnects = 5

// watcher holds what the stream told so far.
type watcher struct {
	out     io.Writer
	o       watchOptions
	groups  map[string]restapi.Group
	printed map[string]string // the last progress line printed per group
	synced  bool              // a snapshot arrived
}

func runWatch(ctx context.Context, c *client.Client, out io.Writer, o watchOptions) error {
	if o.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, o.timeout)
		defer cancel()
	}
	if o.reconnectDelay <= 0 {
		o.reconnectDelay = 500 * time.Millisecond
	}
	w := &watcher{out: out, o: o, groups: map[string]restapi.Group{}, printed: map[string]string{}}
	failures := 0
	retry := backoff.Policy{Initial: o.reconnectDelay, Max: 10 * time.Second, Jitter: backoff.JitterNone}.New()
	for {
		events := 0
		err := c.Watch(ctx, o.group, func(ev client.Event) error {
			events++
			return w.handle(ev)
		})
		switch {
		case err == nil:
			return nil // stable
		case ctx.Err() != nil:
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				if o.untilStable {
					return fmt.Errorf("%w after %s waiting for %s", ErrTimeout, o.timeout, w.pending())
				}
				return nil
			}
			return nil // interrupted
		case errors.Is(err, errGroupNotFound):
			return err
		}
		var ae *client.APIError
		if errors.As(err, &ae) || errors.Is(err, client.ErrNotEventStream) {
			return err // refused: retrying will not help
		}
		if events > 0 {
			failures = 0
			retry.Reset()
		}
		failures++
		if failures > maxReconnects {
			return fmt.Errorf("watch stream: %w (gave up after %d attempts)", err, maxReconnects)
		}
		delay := retry.Next()
		fmt.Fprintf(w.out, "# stream interrupted (%v); resuming in %s\n", err, delay)
		_ = backoff.Wait(ctx, delay) // a cancelled ctx is reported by the next round's ctx.Err check
	}
}

var errGroupNotFound = fmt.Errorf("%w: no such node group", client.ErrNotFound)

// handle processes one event; ErrStopWatch once stable (--until-stable).
func (w *watcher) handle(ev client.Event) error {
	switch ev.Type {
	case restapi.EventSnapshot:
		var s restapi.WatchSnapshot
		if err := json.Unmarshal(ev.Data, &s); err != nil {
			return fmt.Errorf("watch stream: bad snapshot: %w", err)
		}
		w.groups = map[string]restapi.Group{}
		for _, g := range s.Groups {
			if w.o.group == "" || g.ID == w.o.group {
				w.groups[g.ID] = g
			}
		}
		w.synced = true
		if w.o.group != "" && len(w.groups) == 0 {
			return fmt.Errorf("%w: %q", errGroupNotFound, w.o.group)
		}
		ids := make([]string, 0, len(w.groups))
		for id := range w.groups {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			w.progress(w.groups[id])
		}
	case restapi.EventGroup:
		var g restapi.Group
		if err := json.Unmarshal(ev.Data, &g); err != nil {
			return fmt.Errorf("watch stream: bad group event: %w", err)
		}
		if w.o.group != "" && g.ID != w.o.group {
			return nil
		}
		w.groups[g.ID] = g
		w.progress(g)
	case restapi.EventTransition:
		var t restapi.TransitionEntry
		if err := json.Unmarshal(ev.Data, &t); err != nil {
			return fmt.Errorf("watch stream: bad transition event: %w", err)
		}
		if w.o.group != "" && t.Group != w.o.group {
			return nil
		}
		at := t.At
		if ts, err := time.Parse(time.RFC3339Nano, t.At); err == nil {
			at = ts.Local().Format("15:04:05")
		}
		line := fmt.Sprintf("%s  instance/%s (%s): %s -> %s", orDash(at), t.Instance, t.Group, t.From, t.To)
		if t.Reason != "" {
			line += ": " + oneLine(t.Reason, 160)
		}
		fmt.Fprintln(w.out, line)
	case restapi.EventDeletedGroup:
		var d restapi.WatchDeletedGroup
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return fmt.Errorf("watch stream: bad deleted-group event: %w", err)
		}
		if _, ok := w.groups[d.ID]; ok {
			delete(w.groups, d.ID)
			delete(w.printed, d.ID)
			fmt.Fprintf(w.out, "group/%s deleted\n", d.ID)
		}
		if w.o.group != "" && d.ID == w.o.group && w.o.untilStable {
			return fmt.Errorf("%w: %q was deleted", errGroupNotFound, d.ID)
		}
	case restapi.EventBye:
		fmt.Fprintln(w.out, "# the gateway is shutting down")
		return nil
	default:
		return nil // unknown events: newer servers may add some
	}
	if w.o.untilStable && w.synced && w.stable() {
		fmt.Fprintln(w.out, "stable: "+w.summary())
		return client.ErrStopWatch
	}
	return nil
}

// progress prints a group's progress line when it changed.
func (w *watcher) progress(g restapi.Group) {
	line := progressLine(g)
	if w.printed[g.ID] == line {
		return
	}
	w.printed[g.ID] = line
	fmt.Fprintln(w.out, line)
}

// progressLine is "group/web [#####+++------------] 2/5 running | pending
// 1 creating 1 created 0 joined 1 | deleting 0".
func progressLine(g restapi.Group) string {
	c := g.Instances
	return fmt.Sprintf("group/%s %s | pending %d creating %d created %d joined %d | deleting %d",
		g.ID, progressBar(g, 20), c["PENDING"], c["CREATING"], c["CREATED"], c["JOINED"], deleting(c))
}

func groupStable(g restapi.Group) bool {
	return g.Instances["RUNNING"] == int(g.TargetSize) && provisioning(g.Instances) == 0 && deleting(g.Instances) == 0
}

func (w *watcher) stable() bool {
	for _, g := range w.groups {
		if !groupStable(g) {
			return false
		}
	}
	return true
}

func (w *watcher) sortedIDs() []string {
	ids := make([]string, 0, len(w.groups))
	for id := range w.groups {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}

func (w *watcher) summary() string {
	var parts []string
	for _, id := range w.sortedIDs() {
		g := w.groups[id]
		parts = append(parts, fmt.Sprintf("%s %d/%d running", id, g.Instances["RUNNING"], g.TargetSize))
	}
	if len(parts) == 0 {
		return "no node groups"
	}
	return strings.Join(parts, ", ")
}

// pending names the groups not yet stable.
func (w *watcher) pending() string {
	if !w.synced {
		return "the first snapshot"
	}
	var parts []string
	for _, id := range w.sortedIDs() {
		if g := w.groups[id]; !groupStable(g) {
			parts = append(parts, fmt.Sprintf("%s (%d/%d running, %d provisioning, %d deleting)", id, g.Instances["RUNNING"], g.TargetSize, provisioning(g.Instances), deleting(g.Instances)))
		}
	}
	return strings.Join(parts, ", ")
}
