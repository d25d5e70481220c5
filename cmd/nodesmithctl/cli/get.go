package cli

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/nodesmith/nodesmith/cmd/nodesmithctl/client"
	"github.com/nodesmith/nodesmith/libs/restapi"
)

// resource kinds of get, with their aliases.
const (
	resGroups    = "groups"
	resInstances = "instances"
	resTemplates = "templates"
	resAccounts  = "accounts"
	resHooks     = "hooks"
)

var resourceAliases = map[string]string{
	"groups": resGroups, "group": resGroups, "nodegroups": resGroups, "nodegroup": resGroups, "ng": resGroups,
	"instances": resInstances, "instance": resInstances, "inst": resInstances,
	"templates": resTemplates, "template": resTemplates, "instancetemplates": resTemplates, "tpl": resTemplates,
	"accounts": resAccounts, "account": resAccounts, "cloudaccounts": resAccounts,
	"hooks": resHooks, "hook": resHooks,
}

func parseResource(s string) (string, error) {
	if r, ok := resourceAliases[strings.ToLower(s)]; ok {
		return r, nil
	}
	return "", usagef(fmt.Errorf("unknown resource %q: want groups, instances, templates, accounts or hooks", s))
}

type getOptions struct {
	output string
	group  string
	states []string
	labels []string
}

func newGetCommand(env *Env) *cobra.Command {
	var o getOptions
	cmd := &cobra.Command{
		Use:   "get (groups|instances|templates|accounts|hooks) [NAME]",
		Short: "List objects, or show one",
		Long: `List node groups, instances, instance templates, cloud accounts or hooks, or
show one by name. -o json|yaml prints documents apply reads back (kind, name,
metadata.resourceVersion, spec, and the full view as status); write-only
fields (provider parameters, scripts, environments, credentials) are never
returned by the API.`,
		Example: `  nodesmithctl get groups
  nodesmithctl get instances --group web --state PENDING,CREATING -o wide
  nodesmithctl get groups -l pool=batch
  nodesmithctl get templates small -o yaml > small.yaml`,
		Args: func(cmd *cobra.Command, args []string) error {
			return usagef(cobra.RangeArgs(1, 2)(cmd, args))
		},
		ValidArgsFunction: env.completeKindThenName([]string{resGroups, resInstances, resTemplates, resAccounts, resHooks}),
		RunE: func(cmd *cobra.Command, args []string) error {
			res, err := parseResource(args[0])
			if err != nil {
				return err
			}
			if err := checkOutput(o.output); err != nil {
				return err
			}
			if len(o.states) > 0 && res != resInstances {
				return usagef(fmt.Errorf("--state applies to instances only"))
			}
			if len(o.labels) > 0 && res != resGroups && res != resInstances {
				return usagef(fmt.Errorf("-l applies to groups and instances (their node template's labels) only"))
			}
			sel, err := parseSelector(o.labels)
			if err != nil {
				return err
			}
			name := ""
			if len(args) == 2 {
				name = args[1]
			}
			c, err := env.client()
			if err != nil {
				return err
			}
			ctx, cancel := requestContext(cmd)
			defer cancel()
			g := &getter{env: env, c: c, o: o, sel: sel, now: time.Now()}
			switch res {
			case resGroups:
				return g.groups(ctx, name)
			case resInstances:
				return g.instances(ctx, name)
			case resTemplates:
				return g.templates(ctx, name)
			case resAccounts:
				return g.accounts(ctx, name)
			}
			return g.hooks(ctx, name)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.output, "output", "o", "", "output format: wide, json or yaml")
	f.StringVar(&o.group, "group", "", "only this node group's objects")
	f.StringSliceVar(&o.states, "state", nil, "instances in these states only (PENDING, CREATING, CREATED, JOINED, RUNNING, PENDING_DELETION, DELETING, DELETED; comma separated)")
	f.StringArrayVarP(&o.labels, "selector", "l", nil, "node template label selector: key=value, key!=value or key (comma separated, all must match)")
	return cmd
}

// selector is a conjunction of label requirements.
type selector []requirement

type requirement struct {
	key, value string
	op         string // "=", "!=", "exists"
}

func parseSelector(exprs []string) (selector, error) {
	var s selector
	for _, e := range exprs {
		for _, term := range strings.Split(e, ",") {
			term = strings.TrimSpace(term)
			if term == "" {
				continue
			}
			var r requirement
			switch {
			case strings.Contains(term, "!="):
				k, v, _ := strings.Cut(term, "!=")
				r = requirement{key: strings.TrimSpace(k), value: strings.TrimSpace(v), op: "!="}
			case strings.Contains(term, "="):
				k, v, _ := strings.Cut(strings.Replace(term, "==", "=", 1), "=")
				r = requirement{key: strings.TrimSpace(k), value: strings.TrimSpace(v), op: "="}
			default:
				r = requirement{key: term, op: "exists"}
			}
			if r.key == "" {
				return nil, usagef(fmt.Errorf("-l %q: a requirement needs a label key", e))
			}
			s = append(s, r)
		}
	}
	return s, nil
}

func (s selector) matches(labels map[string]string) bool {
	for _, r := range s {
		v, ok := labels[r.key]
		switch r.op {
		case "=":
			if !ok || v != r.value {
				return false
			}
		case "!=":
			if ok && v == r.value {
				return false
			}
		default:
			if !ok {
				return false
			}
		}
	}
	return true
}

type getter struct {
	env *Env
	c   *client.Client
	o   getOptions
	sel selector
	now time.Time
}

func (g *getter) table() *tabwriter.Writer {
	return tabwriter.NewWriter(g.env.Out, 0, 4, 3, ' ', 0)
}

// none says, on standard error, that nothing matched (kubectl style).
func (g *getter) none(what string) error {
	_, err := fmt.Fprintf(g.env.ErrOut, "No %s found.\n", what)
	return err
}

func (g *getter) structured() bool { return g.o.output == outJSON || g.o.output == outYAML }

func groupLabels(gr restapi.Group) map[string]string {
	if gr.NodeTemplate == nil {
		return nil
	}
	return gr.NodeTemplate.Labels
}

func (g *getter) groups(ctx context.Context, name string) error {
	var groups []restapi.Group
	if name != "" {
		gr, _, err := g.c.GetGroup(ctx, name)
		if err != nil {
			return err
		}
		groups = []restapi.Group{gr}
	} else {
		all, err := g.c.ListGroups(ctx)
		if err != nil {
			return err
		}
		for _, gr := range all {
			if (g.o.group == "" || gr.ID == g.o.group) && g.sel.matches(groupLabels(gr)) {
				groups = append(groups, gr)
			}
		}
		sort.Slice(groups, func(i, j int) bool { return groups[i].ID < groups[j].ID })
	}
	if g.structured() {
		docs := make([]Document, 0, len(groups))
		for _, gr := range groups {
			docs = append(docs, groupDocument(gr))
		}
		return printDocuments(g.env.Out, g.o.output, docs, name != "")
	}
	if len(groups) == 0 {
		return g.none("node groups")
	}
	tw := g.table()
	head := "NAME\tMIN\tMAX\tTARGET\tRUNNING\tPROVISIONING\tDELETING\tTEMPLATE"
	if g.o.output == outWide {
		head += "\tPROVIDER\tZONE\tINSTANCE-TYPE\tLABELS\tSOURCE\tREVISION"
	}
	fmt.Fprintln(tw, head)
	for _, gr := range groups {
		tpl := "-"
		var it restapi.InstanceTemplate
		if gr.InstanceTemplate != nil {
			it = *gr.InstanceTemplate
			tpl = orDash(it.Name)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%d\t%s", gr.ID, gr.MinSize, gr.MaxSize, gr.TargetSize,
			gr.Instances["RUNNING"], provisioning(gr.Instances), deleting(gr.Instances), tpl)
		if g.o.output == outWide {
			fmt.Fprintf(tw, "\t%s\t%s\t%s\t%s\t%s\t%d", orDash(it.Provider), orDash(it.Zone), orDash(it.InstanceType),
				keyValues(groupLabels(gr)), orDash(gr.Source), gr.Revision)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func groupDocument(gr restapi.Group) Document {
	return Document{Kind: string(client.KindNodeGroup), Name: gr.ID,
		Metadata: &Metadata{ResourceVersion: strconv.FormatUint(gr.Revision, 10)}, Spec: groupSpec(gr), Status: gr}
}

func (g *getter) instances(ctx context.Context, name string) error {
	var insts []restapi.Instance
	if name != "" {
		in, err := g.c.GetInstance(ctx, name)
		if err != nil {
			return err
		}
		insts = []restapi.Instance{in}
	} else {
		var states []string
		for _, s := range g.o.states {
			states = append(states, strings.ToUpper(strings.TrimSpace(s)))
		}
		all, err := g.c.ListInstances(ctx, client.InstanceQuery{Group: g.o.group, States: states})
		if err != nil {
			return err
		}
		keep := func(restapi.Instance) bool { return true }
		if len(g.sel) > 0 {
			groups, err := g.c.ListGroups(ctx)
			if err != nil {
				return err
			}
			match := map[string]bool{}
			for _, gr := range groups {
				match[gr.ID] = g.sel.matches(groupLabels(gr))
			}
			keep = func(in restapi.Instance) bool { return match[in.Group] }
		}
		for _, in := range all {
			if keep(in) {
				insts = append(insts, in)
			}
		}
	}
	if g.structured() {
		docs := make([]Document, 0, len(insts))
		for _, in := range insts {
			docs = append(docs, Document{Kind: "Instance", Name: in.ID,
				Metadata: &Metadata{ResourceVersion: strconv.FormatUint(in.Revision, 10)}, Status: in})
		}
		return printDocuments(g.env.Out, g.o.output, docs, name != "")
	}
	if len(insts) == 0 {
		return g.none("instances")
	}
	tw := g.table()
	head := "ID\tGROUP\tSTATE\tNODE\tCLOUD-ID\tAGE"
	if g.o.output == outWide {
		// Where the VM was created (issue 16) comes last: the columns
		// scripts read by position keep theirs.
		head += "\tPRIVATE-IP\tPROVIDER-ID\tATTEMPT\tRETRIES\tIN-FLIGHT\tLAST-ERROR\tZONE\tINSTANCE-TYPE\tCAPACITY"
	}
	fmt.Fprintln(tw, head)
	for _, in := range insts {
		state := in.State
		if in.CreationFailed {
			state += "(failed)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s", in.ID, in.Group, state, orDash(in.NodeName), orDash(in.CloudID), age(in.StateSince, g.now))
		if g.o.output == outWide {
			lastErr := "-"
			if in.LastError != nil {
				lastErr = oneLine(in.LastError.Code+": "+in.LastError.Message, 60)
			}
			fmt.Fprintf(tw, "\t%s\t%s\t%d\t%d\t%t\t%s\t%s\t%s\t%s", orDash(in.PrivateIP), orDash(in.ProviderID), in.Attempt, in.Retries, in.InFlight, lastErr,
				orDash(in.Zone), orDash(in.InstanceType), orDash(in.CapacityType))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// oneLine flattens s and cuts it at n runes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}

// resourceVersion reads an object's ETag for -o json|yaml of lists, whose
// items carry none.
func (g *getter) resourceVersion(ctx context.Context, kind client.Kind, name string) (*Metadata, error) {
	tag, found, err := g.c.ResourceETag(ctx, kind, name)
	if err != nil || !found || tag == "" {
		return nil, err
	}
	return &Metadata{ResourceVersion: client.ResourceVersion(tag)}, nil
}

func (g *getter) templates(ctx context.Context, name string) error {
	var items []restapi.TemplateInfo
	tags := map[string]string{}
	if name != "" {
		t, tag, err := g.c.GetTemplate(ctx, name)
		if err != nil {
			return err
		}
		items, tags[t.Name] = []restapi.TemplateInfo{t}, tag
	} else {
		all, err := g.c.ListTemplates(ctx)
		if err != nil {
			return err
		}
		for _, t := range all {
			if g.o.group == "" || slices.Contains(t.Groups, g.o.group) {
				items = append(items, t)
			}
		}
		sort.Slice(items, func(i, j int) bool { return items[i].Name < items[j].Name })
	}
	if g.structured() {
		docs := make([]Document, 0, len(items))
		for _, t := range items {
			d := Document{Kind: string(client.KindInstanceTemplate), Name: t.Name, Spec: templateSpec(t), Status: t}
			if err := g.metadata(ctx, &d, client.KindInstanceTemplate, tags[t.Name], name != "" || t.Source == "group"); err != nil {
				return err
			}
			docs = append(docs, d)
		}
		return printDocuments(g.env.Out, g.o.output, docs, name != "")
	}
	if len(items) == 0 {
		return g.none("instance templates")
	}
	tw := g.table()
	head := "NAME\tPROVIDER\tACCOUNT\tREGION\tZONE\tINSTANCE-TYPE\tGROUPS\tSOURCE"
	if g.o.output == outWide {
		head += "\tARCH\tOS\tHOURLY-PRICE\tPARAMETERS\tDIVERGENT\tCAPACITY\tOFFERINGS"
	}
	fmt.Fprintln(tw, head)
	for _, t := range items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s", t.Name, orDash(t.Provider), orDash(t.Account), orDash(t.Region), orDash(t.Zone),
			orDash(t.InstanceType), joinOrDash(t.Groups), orDash(t.Source))
		if g.o.output == outWide {
			fmt.Fprintf(tw, "\t%s\t%s\t%g\t%t\t%t\t%s\t%s", orDash(t.Arch), orDash(t.OS), t.HourlyPrice, t.HasParameters, t.Divergent,
				capacityOf(t.InstanceTemplate), offeringsOf(t.InstanceTemplate))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// metadata fills d's resource version from tag, or (for list items)
// reads it; known says no read is needed (a single object read with its
// ETag, or an entry without one).
func (g *getter) metadata(ctx context.Context, d *Document, kind client.Kind, tag string, known bool) error {
	if tag != "" {
		d.Metadata = &Metadata{ResourceVersion: client.ResourceVersion(tag)}
		return nil
	}
	if known {
		return nil
	}
	m, err := g.resourceVersion(ctx, kind, d.Name)
	d.Metadata = m
	return err
}

func (g *getter) accounts(ctx context.Context, name string) error {
	var items []restapi.Account
	tags := map[string]string{}
	if name != "" {
		a, tag, err := g.c.GetAccount(ctx, name)
		if err != nil {
			return err
		}
		items, tags[a.Name] = []restapi.Account{a}, tag
	} else {
		all, err := g.c.ListAccounts(ctx)
		if err != nil {
			return err
		}
		for _, a := range all {
			if g.o.group == "" || slices.Contains(a.Groups, g.o.group) {
				items = append(items, a)
			}
		}
		sort.Slice(items, func(i, j int) bool { return items[i].Name < items[j].Name })
	}
	if g.structured() {
		docs := make([]Document, 0, len(items))
		for _, a := range items {
			d := Document{Kind: string(client.KindCloudAccount), Name: a.Name, Spec: accountSpec(a), Status: a}
			if err := g.metadata(ctx, &d, client.KindCloudAccount, tags[a.Name], name != "" || a.Source == "group"); err != nil {
				return err
			}
			docs = append(docs, d)
		}
		return printDocuments(g.env.Out, g.o.output, docs, name != "")
	}
	if len(items) == 0 {
		return g.none("cloud accounts")
	}
	tw := g.table()
	head := "NAME\tPROVIDER\tREGIONS\tCREDENTIALS\tGROUPS\tSOURCE"
	if g.o.output == outWide {
		head += "\tTEMPLATES\tKEY-ID"
	}
	fmt.Fprintln(tw, head)
	for _, a := range items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s", a.Name, orDash(a.Provider), joinOrDash(a.Regions), orDash(a.Credentials.Source), joinOrDash(a.Groups), orDash(a.Source))
		if g.o.output == outWide {
			fmt.Fprintf(tw, "\t%s\t%s", joinOrDash(a.Templates), orDash(a.Credentials.KeyID))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

func (g *getter) hooks(ctx context.Context, name string) error {
	var items []restapi.HookInfo
	tags := map[string]string{}
	if name != "" {
		h, tag, err := g.c.GetHook(ctx, name)
		if err != nil {
			return err
		}
		items, tags[h.Name] = []restapi.HookInfo{h}, tag
	} else {
		all, err := g.c.ListHooks(ctx)
		if err != nil {
			return err
		}
		for _, h := range all {
			if g.o.group == "" || slices.Contains(h.Groups, g.o.group) {
				items = append(items, h)
			}
		}
		sort.Slice(items, func(i, j int) bool { return items[i].Name < items[j].Name })
	}
	if g.structured() {
		docs := make([]Document, 0, len(items))
		for _, h := range items {
			d := Document{Kind: string(client.KindHook), Name: h.Name, Spec: hookSpec(h), Status: h}
			if err := g.metadata(ctx, &d, client.KindHook, tags[h.Name], name != "" || h.Source == "group"); err != nil {
				return err
			}
			docs = append(docs, d)
		}
		return printDocuments(g.env.Out, g.o.output, docs, name != "")
	}
	if len(items) == 0 {
		return g.none("hooks")
	}
	tw := g.table()
	head := "NAME\tPHASE\tTIMEOUT\tON-FAILURE\tGROUPS\tSOURCE"
	if g.o.output == outWide {
		head += "\tENV\tDIVERGENT"
	}
	fmt.Fprintln(tw, head)
	for _, h := range items {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s", h.Name, orDash(h.Phase), orDash(h.Timeout), orDash(h.OnFailure), joinOrDash(h.Groups), orDash(h.Source))
		if g.o.output == outWide {
			var env []string
			for k := range h.Env {
				env = append(env, k)
			}
			sort.Strings(env)
			fmt.Fprintf(tw, "\t%s\t%t", joinOrDash(env), h.Divergent)
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// capacityOf is a template's capacity type, with its max price.
func capacityOf(t restapi.InstanceTemplate) string {
	if t.MaxPrice != "" {
		return orDash(t.CapacityType) + " (max " + t.MaxPrice + ")"
	}
	return orDash(t.CapacityType)
}

// offeringsOf lists a template's offerings, zone/type[/capacity] in order,
// with the strategy: "ap-guangzhou-3/S5.MEDIUM4,ap-guangzhou-4/S5.MEDIUM4
// (balanced)".
func offeringsOf(t restapi.InstanceTemplate) string {
	if len(t.Offerings) == 0 {
		return "-"
	}
	parts := make([]string, len(t.Offerings))
	for i, o := range t.Offerings {
		parts[i] = o.Zone + "/" + o.InstanceType
		if o.CapacityType != "" {
			parts[i] += "/" + o.CapacityType
		}
	}
	return strings.Join(parts, ",") + " (" + cmp.Or(t.OfferingStrategy, "priority") + ")"
}
