package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodesmith/nodesmith/cmd/nodesmithctl/client"
	"github.com/nodesmith/nodesmith/libs/restapi"
)

func newDescribeCommand(env *Env) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "describe (instance|group) ID",
		Short: "Show an instance or a node group in detail",
		Long: `describe instance shows an instance's state, cloud id, node, last error, the
trace id of the operation that created or released it, its history with
reasons and (admin tokens only) the tail of its last hook's output.
describe group shows a group's bounds, template, hooks, instances per state,
its offerings (which are unavailable until when), its instances and their
recent transitions.`,
		Example: `  nodesmithctl describe instance web-7f3k
  nodesmithctl describe group web`,
		Args:              exactArgs(2),
		ValidArgsFunction: env.completeKindThenName([]string{"instance", "group"}),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := parseResource(args[0])
			if err != nil {
				return err
			}
			c, err := env.client()
			if err != nil {
				return err
			}
			ctx, cancel := requestContext(cmd)
			defer cancel()
			now := time.Now()
			switch res {
			case resInstances:
				in, err := c.GetInstance(ctx, args[1])
				if err != nil {
					return err
				}
				return describeInstance(env.Out, in, now)
			case resGroups:
				g, _, err := c.GetGroup(ctx, args[1])
				if err != nil {
					return err
				}
				insts, err := c.ListInstances(ctx, client.InstanceQuery{Group: g.ID})
				if err != nil {
					return err
				}
				trans, err := c.Transitions(ctx, g.ID, 20)
				if err != nil {
					return err
				}
				return describeGroup(env.Out, g, insts, trans, now)
			}
			return usagef(fmt.Errorf("describe takes instance or group, not %q", args[0]))
		},
	}
	return cmd
}

func field(tw io.Writer, name, value string) {
	if value == "" {
		value = "-"
	}
	fmt.Fprintf(tw, "%s:\t%s\n", name, value)
}

func since(ts string, now time.Time) string {
	if ts == "" {
		return ""
	}
	return ts + " (" + age(ts, now) + " ago)"
}

func describeInstance(w io.Writer, in restapi.Instance, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	field(tw, "ID", in.ID)
	field(tw, "Group", in.Group)
	field(tw, "State", in.State)
	field(tw, "State since", since(in.StateSince, now))
	field(tw, "Cloud ID", in.CloudID)
	field(tw, "Provider ID", in.ProviderID)
	field(tw, "Node", in.NodeName)
	field(tw, "Private IP", in.PrivateIP)
	field(tw, "Zone", in.Zone)
	field(tw, "Instance type", in.InstanceType)
	field(tw, "Capacity", in.CapacityType)
	field(tw, "Created", since(in.CreatedAt, now))
	field(tw, "Batch", in.BatchID)
	field(tw, "Attempt", fmt.Sprintf("%d (retries %d)", in.Attempt, in.Retries))
	var flags []string
	for _, f := range []struct {
		on   bool
		name string
	}{{in.InFlight, "in-flight"}, {in.CreationFailed, "creation-failed"}, {in.Released, "released"}, {in.Adopted, "adopted"}} {
		if f.on {
			flags = append(flags, f.name)
		}
	}
	field(tw, "Flags", strings.Join(flags, ", "))
	field(tw, "Deadline", in.Deadline)
	field(tw, "Next retry", in.NextRetryAt)
	if e := in.LastError; e != nil {
		retry := "not retryable"
		if e.Retryable {
			retry = "retryable"
		}
		field(tw, "Last error", fmt.Sprintf("%s: %s (class %d, %s, at %s)", e.Code, e.Message, e.Class, retry, orDash(e.At)))
	} else {
		field(tw, "Last error", "")
	}
	field(tw, "Trace ID", in.TraceID)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "History:")
	if len(in.History) == 0 {
		fmt.Fprintln(w, "  (none)")
	} else {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  TIME\tFROM\tTO\tREASON")
		for _, t := range in.History {
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\n", orDash(t.At), t.From, t.To, orDash(oneLine(t.Reason, 120)))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	switch {
	case in.HookOutputTail == nil:
		fmt.Fprintln(w, "Last hook output: (hidden: needs an admin token)")
	case *in.HookOutputTail == "":
		fmt.Fprintln(w, "Last hook output: (none)")
	default:
		fmt.Fprintln(w, "Last hook output:")
		for _, l := range strings.Split(strings.TrimRight(*in.HookOutputTail, "\n"), "\n") {
			fmt.Fprintln(w, "  "+l)
		}
	}
	return nil
}

func describeGroup(w io.Writer, g restapi.Group, insts []restapi.Instance, trans []restapi.TransitionEntry, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	field(tw, "Name", g.ID)
	field(tw, "Size", fmt.Sprintf("min %d, max %d, target %d", g.MinSize, g.MaxSize, g.TargetSize))
	field(tw, "Source", g.Source)
	field(tw, "Revision", fmt.Sprint(g.Revision))
	field(tw, "Updated", since(g.UpdatedAt, now))
	field(tw, "Adopt existing", fmt.Sprint(g.AdoptExisting))
	if t := g.InstanceTemplate; t != nil {
		field(tw, "Template", fmt.Sprintf("%s (provider %s, account %s, region %s, zone %s, type %s)",
			orDash(t.Name), orDash(t.Provider), orDash(t.Account), orDash(t.Region), orDash(t.Zone), orDash(t.InstanceType)))
	}
	if n := g.NodeTemplate; n != nil {
		field(tw, "Labels", keyValues(n.Labels))
		var taints []string
		for _, t := range n.Taints {
			taints = append(taints, t.Key+"="+t.Value+":"+t.Effect)
		}
		field(tw, "Taints", strings.Join(taints, ", "))
		field(tw, "Capacity", keyValues(n.Capacity))
	}
	var phases []string
	for p := range g.Hooks {
		phases = append(phases, p)
	}
	sort.Strings(phases)
	for _, p := range phases {
		h := g.Hooks[p]
		field(tw, "Hook "+p, fmt.Sprintf("%s (timeout %s, on failure %s)", orDash(h.Name), orDash(h.Timeout), orDash(h.OnFailure)))
	}
	if p := g.Parallelism; p != nil {
		field(tw, "Parallelism", fmt.Sprintf("create %d, delete %d", p.Create, p.Delete))
	}
	var counts []string
	for _, s := range states {
		if n := g.Instances[s]; n > 0 {
			counts = append(counts, fmt.Sprintf("%s %d", s, n))
		}
	}
	field(tw, "Instances", strings.Join(counts, ", "))
	field(tw, "Progress", progressBar(g, 20))
	if err := tw.Flush(); err != nil {
		return err
	}
	if err := describeOfferings(w, g.Offerings, now); err != nil {
		return err
	}
	fmt.Fprintln(w, "Instances:")
	if len(insts) == 0 {
		fmt.Fprintln(w, "  (none)")
	} else {
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  ID\tSTATE\tNODE\tCLOUD-ID\tZONE\tTYPE\tCAPACITY\tAGE\tLAST-ERROR")
		for _, in := range insts {
			lastErr := "-"
			if in.LastError != nil {
				lastErr = oneLine(in.LastError.Message, 60)
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", in.ID, in.State, orDash(in.NodeName), orDash(in.CloudID),
				orDash(in.Zone), orDash(in.InstanceType), orDash(in.CapacityType), age(in.StateSince, now), lastErr)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintln(w, "Recent transitions:")
	if len(trans) == 0 {
		fmt.Fprintln(w, "  (none)")
		return nil
	}
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  TIME\tINSTANCE\tFROM\tTO\tREASON")
	for _, t := range trans {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", orDash(t.At), t.Instance, t.From, t.To, orDash(oneLine(t.Reason, 100)))
	}
	return tw.Flush()
}

// describeOfferings writes the Offerings section: the template's
// offerings in order, each available or unavailable until when and why.
func describeOfferings(w io.Writer, o *restapi.GroupOfferings, now time.Time) error {
	if o == nil || len(o.Items) == 0 {
		fmt.Fprintln(w, "Offerings:")
		fmt.Fprintln(w, "  (none: the template's zone and instance type only)")
		return nil
	}
	fmt.Fprintf(w, "Offerings (%s):\n", o.Strategy)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  ZONE\tSUBNET\tTYPE\tCAPACITY\tSTATE")
	for _, it := range o.Items {
		state := "available"
		if !it.Available {
			state = "unavailable until " + orDash(it.UnavailableUntil)
			if t, err := time.Parse(time.RFC3339Nano, it.UnavailableUntil); err == nil {
				state += " (in " + age(now.Format(time.RFC3339Nano), t) + ")"
			}
			if r := it.Reason; r != nil {
				state += ": " + orDash(r.Code)
				if r.Message != "" {
					state += " " + oneLine(r.Message, 60)
				}
			}
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%s\t%s\n", it.Zone, orDash(it.SubnetID), it.InstanceType, orDash(it.CapacityType), state)
	}
	return tw.Flush()
}

// progressBar renders a group's Running instances against its target:
// "[#####-----]  3/5 running, 2 provisioning".
func progressBar(g restapi.Group, width int) string {
	target := int(g.TargetSize)
	running := g.Instances["RUNNING"]
	prov := provisioning(g.Instances)
	del := deleting(g.Instances)
	filled, pending := 0, 0
	if target > 0 {
		filled = min(running, target) * width / target
		pending = min(running+prov, target)*width/target - filled
	} else if running == 0 {
		filled = width
	}
	bar := strings.Repeat("#", filled) + strings.Repeat("+", pending) + strings.Repeat("-", max(width-filled-pending, 0))
	s := fmt.Sprintf("[%s] %d/%d running", bar, running, target)
	if prov > 0 {
		s += fmt.Sprintf(", %d provisioning", prov)
	}
	if del > 0 {
		s += fmt.Sprintf(", %d deleting", del)
	}
	return s
}
