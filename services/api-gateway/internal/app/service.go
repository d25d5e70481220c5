package app

import (
	"cmp"
	"context"
	"crypto/rand"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/domain"
	"github.com/nodesmith/nodesmith/services/api-gateway/internal/ports"
)

// GroupLabel is set on template nodes (and may be set on real ones) so a
// node CA prices by its template can be traced back to its group.
const GroupLabel = "nodesmith.io/node-group"

// Config tunes the use cases.
type Config struct {
	// OpTimeout bounds one mutation end to end: the lifecycle round trip
	// and the wait until its writes are visible here. It must stay below
	// CA's grpc_timeout (5s by default) so CA gets our error, not its own
	// timeout.
	OpTimeout time.Duration
	// GPULabel is the node label whose value names a node's GPU type.
	GPULabel string
	// Now is the clock offerings marks are compared with (time.Now when
	// nil).
	Now func() time.Time
}

// Service implements the gateway's use cases on a ReadModel and lifecycle.
// Every error it returns is a *domain.Error.
type Service struct {
	rm  *ReadModel
	lc  ports.Lifecycle
	cfg Config
	log *slog.Logger
}

// NewService returns a Service.
func NewService(rm *ReadModel, lc ports.Lifecycle, cfg Config, log *slog.Logger) *Service {
	if log == nil {
		log = slog.Default()
	}
	if cfg.OpTimeout <= 0 {
		cfg.OpTimeout = 4 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Service{rm: rm, lc: lc, cfg: cfg, log: log}
}

// ReadModel returns the service's read model.
func (s *Service) ReadModel() *ReadModel { return s.rm }

// NodeRef is a node as CA names it.
type NodeRef struct {
	ProviderID  string
	Name        string
	Labels      map[string]string
	Annotations map[string]string
}

// CAInstance is one instance as NodeGroupNodes reports it.
type CAInstance struct {
	ID    string
	State domain.CAState
	// ErrorCode is empty unless the instance's creation failed.
	ErrorCode    string
	ErrorMessage string
	ErrorClass   int32
}

func (s *Service) ready() error {
	if !s.rm.Synced() {
		return domain.Errorf(contract.CodeUnavailable, "the gateway is still loading state from NATS")
	}
	return nil
}

// Refresh is CA's per-loop call: it fails only while the read model has not
// loaded its initial state, because CA aborts the loop on any error and a
// loop on an empty model would see no groups.
func (s *Service) Refresh() error { return s.ready() }

// NodeGroups returns every group, sorted by id.
func (s *Service) NodeGroups() ([]GroupView, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	return s.rm.Groups(), nil
}

// GroupForNode returns the group managing node; found is false for nodes
// nodesmith does not manage (which is not an error).
func (s *Service) GroupForNode(node NodeRef) (g GroupView, found bool, err error) {
	if err := s.ready(); err != nil {
		return GroupView{}, false, err
	}
	g, found = s.rm.GroupForNode(node.ProviderID, node.Name)
	return g, found, nil
}

// Group returns the group with id: InvalidArgument for an empty id,
// NotFound for an unknown one.
func (s *Service) Group(id string) (GroupView, error) {
	if err := domain.ValidateGroupID(id); err != nil {
		return GroupView{}, err
	}
	if err := s.ready(); err != nil {
		return GroupView{}, err
	}
	g, ok := s.rm.Group(id)
	if !ok {
		return GroupView{}, domain.Errorf(contract.CodeNotFound, "node group %q not found", id)
	}
	return g, nil
}

// TargetSize returns the group's target size.
func (s *Service) TargetSize(id string) (int32, error) {
	g, err := s.Group(id)
	if err != nil {
		return 0, err
	}
	return g.Record.TargetSize, nil
}

// Nodes returns every instance of the group CA must see: all states but
// DELETED, each under the id CA matches against node.spec.providerID, with
// errorInfo for creations that failed.
func (s *Service) Nodes(id string) ([]CAInstance, error) {
	if _, err := s.Group(id); err != nil {
		return nil, err
	}
	views := s.rm.GroupInstances(id, nil)
	out := make([]CAInstance, 0, len(views))
	for _, v := range views {
		st, reported := domain.CAStateOf(v.State())
		if !reported {
			continue
		}
		ci := CAInstance{ID: v.ReportedID, State: st}
		if v.Record.CreationFailed {
			var le domain.ErrorInfo
			if v.Record.LastError != nil {
				le = *v.Record.LastError
			}
			ci.ErrorCode = cmp.Or(le.Code, domain.CreationFailedCode)
			ci.ErrorMessage = cmp.Or(le.Message, "instance creation failed")
			ci.ErrorClass = domain.ErrorClass(le.Class)
		}
		out = append(out, ci)
	}
	return out, nil
}

// Options resolves the group's autoscaling options onto CA's defaults.
// Unimplemented when neither gives anything, so CA keeps its own.
func (s *Service) Options(id string, defaults domain.PartialOptions) (domain.Options, error) {
	g, err := s.Group(id)
	if err != nil {
		return domain.Options{}, err
	}
	return GroupOptions(g, defaults)
}

// GroupOptions is Options for a group already read: the answer for exactly
// that revision of the group (the gRPC adapter keeps it per revision).
func GroupOptions(g GroupView, defaults domain.PartialOptions) (domain.Options, error) {
	opts, ok := domain.ResolveOptions(defaults, overridesOf(g.Record))
	if !ok {
		return domain.Options{}, domain.Errorf(contract.CodeUnimplemented, "node group %q has no autoscaling options and the request carries no defaults", g.Record.ID)
	}
	return opts, nil
}

func overridesOf(g *domain.NodeGroup) domain.PartialOptions {
	if g.AutoscalingOptions == nil {
		return domain.PartialOptions{}
	}
	return *g.AutoscalingOptions
}

// hourlyPrice is the price of a VM of g, zero when unknown.
func hourlyPrice(g *domain.NodeGroup) float64 {
	if g.InstanceTemplate == nil {
		return 0
	}
	return g.InstanceTemplate.HourlyPrice
}

// noNodeTemplate stands in for a group's missing node template.
var noNodeTemplate = &domain.NodeTemplate{}

// nodeTemplate is g's node template, an empty one if it has none.
func nodeTemplate(g *domain.NodeGroup) *domain.NodeTemplate {
	if g.NodeTemplate == nil {
		return noNodeTemplate
	}
	return g.NodeTemplate
}

// NodePrice prices a node of a nodesmith group for the period. The node is
// resolved like NodeGroupForNode, and a template node (which has no
// providerID) by GroupLabel.
func (s *Service) NodePrice(node NodeRef, start, end time.Time) (float64, error) {
	if err := s.ready(); err != nil {
		return 0, err
	}
	g, ok := s.rm.GroupForNode(node.ProviderID, node.Name)
	if !ok {
		if id := node.Labels[GroupLabel]; id != "" {
			g, ok = s.rm.Group(id)
		}
	}
	if !ok {
		return 0, domain.Errorf(contract.CodeNotFound, "node %q (providerID %q) is not managed by nodesmith", node.Name, node.ProviderID)
	}
	return domain.NodePrice(hourlyPrice(g.Record), start, end)
}

// PodPrice prices a pod requesting podMilliCPU for the period at the
// cheapest CPU-hour of any priced group.
func (s *Service) PodPrice(podMilliCPU int64, start, end time.Time) (float64, error) {
	if err := s.ready(); err != nil {
		return 0, err
	}
	var offers []domain.CPUOffer
	for _, g := range s.rm.Groups() {
		price := hourlyPrice(g.Record)
		if price <= 0 {
			continue
		}
		q, err := resource.ParseQuantity(nodeTemplate(g.Record).Capacity["cpu"])
		if err != nil {
			continue
		}
		offers = append(offers, domain.CPUOffer{HourlyPrice: price, MilliCPU: q.MilliValue()})
	}
	return domain.PodPrice(offers, podMilliCPU, start, end)
}

// GPULabel is the label carrying a node's GPU type.
func (s *Service) GPULabel() string { return s.cfg.GPULabel }

// GPUTypes lists the GPU types the groups' node templates declare under
// the GPU label, sorted.
func (s *Service) GPUTypes() ([]string, error) {
	if err := s.ready(); err != nil {
		return nil, err
	}
	var types []string
	for _, g := range s.rm.Groups() {
		if t := nodeTemplate(g.Record).Labels[s.cfg.GPULabel]; t != "" {
			types = append(types, t)
		}
	}
	slices.Sort(types)
	return slices.Compact(types), nil
}

// IncreaseSize asks lifecycle to add delta instances to the group and
// returns once the new target is visible here, so CA's next TargetSize
// (often in its very next loop) already counts them.
func (s *Service) IncreaseSize(ctx context.Context, id string, delta int32) error {
	if err := domain.ValidateGroupID(id); err != nil {
		return err
	}
	if err := domain.ValidateIncrease(delta); err != nil {
		return err
	}
	if _, err := s.Group(id); err != nil {
		return err
	}
	_, err := s.do(ctx, ports.IncreaseSize{Group: id, Delta: delta}, slog.String("group", id), slog.Int("delta", int(delta)))
	return err
}

// DecreaseTargetSize asks lifecycle to cancel unfulfilled capacity (never
// a registered node); lifecycle rejects it when that is not enough.
func (s *Service) DecreaseTargetSize(ctx context.Context, id string, delta int32) error {
	if err := domain.ValidateGroupID(id); err != nil {
		return err
	}
	if err := domain.ValidateDecrease(delta); err != nil {
		return err
	}
	if _, err := s.Group(id); err != nil {
		return err
	}
	_, err := s.do(ctx, ports.DecreaseTargetSize{Group: id, Delta: delta}, slog.String("group", id), slog.Int("delta", int(delta)))
	return err
}

// DeleteNodes asks lifecycle to delete nodes of the group (CA often sends
// fake nodes for instances that never registered: name == providerID ==
// our reported id). A node that belongs to another group is rejected here,
// before anything is sent; nodes unknown to this replica are passed on,
// lifecycle being the authority.
func (s *Service) DeleteNodes(ctx context.Context, id string, nodes []NodeRef) error {
	if err := domain.ValidateGroupID(id); err != nil {
		return err
	}
	if len(nodes) == 0 {
		return domain.Errorf(contract.CodeInvalidArgument, "no nodes to delete")
	}
	if _, err := s.Group(id); err != nil {
		return err
	}
	refs := make([]ports.NodeRef, 0, len(nodes))
	ids := make([]string, 0, len(nodes))
	for i, n := range nodes {
		if n.ProviderID == "" && n.Name == "" {
			return domain.Errorf(contract.CodeInvalidArgument, "node %d has neither providerID nor name", i)
		}
		ref := ports.NodeRef{ProviderID: n.ProviderID, Name: n.Name, Labels: n.Labels, Annotations: n.Annotations}
		if v, ok := s.rm.InstanceForNode(n.ProviderID, n.Name); ok {
			if v.Group() != id {
				return domain.Errorf(contract.CodeInvalidArgument, "node %q (providerID %q) belongs to node group %q, not %q", n.Name, n.ProviderID, v.Group(), id)
			}
			if ref.ProviderID == "" {
				ref.ProviderID = v.ReportedID
			}
			ids = append(ids, v.Record.ID)
		}
		refs = append(refs, ref)
	}
	_, err := s.do(ctx, ports.DeleteNodes{Group: id, Nodes: refs}, slog.String("group", id), slog.Int("nodes", len(nodes)), slog.Any("instances", ids))
	return err
}

// SetTargetSize sets the group's target explicitly (operators); the
// target must lie within the group's bounds.
func (s *Service) SetTargetSize(ctx context.Context, id string, target int32) (GroupView, error) {
	g, err := s.Group(id)
	if err != nil {
		return GroupView{}, err
	}
	if err := domain.ValidateTargetSize(target, g.Record.MinSize, g.Record.MaxSize); err != nil {
		return GroupView{}, err
	}
	if _, err := s.do(ctx, ports.SetTargetSize{Group: id, TargetSize: target}, slog.String("group", id), slog.Int("target", int(target))); err != nil {
		return GroupView{}, err
	}
	return s.Group(id)
}

// GroupCounts counts the group's instances per state.
func (s *Service) GroupCounts(id string) map[domain.InstanceState]int {
	c, _ := s.rm.GroupCounts(id)
	return c
}

// Watch subscribes to the changes of group (every group when empty; an
// unknown group is NotFound) with a buffer of buffer changes, and returns
// the snapshot they start from (see ReadModel.Watch). The caller must
// Close the Watch.
func (s *Service) Watch(group string, buffer int) (*Watch, []GroupSnapshot, error) {
	if err := s.ready(); err != nil {
		return nil, nil, err
	}
	if group != "" {
		if _, ok := s.rm.Group(group); !ok {
			return nil, nil, domain.Errorf(contract.CodeNotFound, "node group %q not found", group)
		}
	}
	w, snap := s.rm.Watch(group, buffer)
	return w, snap, nil
}

// PutGroup creates or replaces a group definition (operators). With
// expectedRevision zero it only creates (AlreadyExists if the group
// exists) unless upsert; otherwise it replaces the group only if its
// revision is still expectedRevision (FailedPrecondition if not). The check
// is made here first and authoritatively by lifecycle's compare-and-set.
func (s *Service) PutGroup(ctx context.Context, g *domain.NodeGroup, expectedRevision uint64, upsert bool) (view GroupView, created bool, err error) {
	if err := domain.ValidateNewGroupID(g.ID); err != nil {
		return GroupView{}, false, err
	}
	if err := domain.ValidateBounds(g.MinSize, g.MaxSize, g.TargetSize); err != nil {
		return GroupView{}, false, err
	}
	if err := s.ready(); err != nil {
		return GroupView{}, false, err
	}
	cur, exists := s.rm.Group(g.ID)
	switch {
	case expectedRevision != 0 && !exists:
		return GroupView{}, false, domain.Errorf(contract.CodeNotFound, "node group %q not found", g.ID)
	case expectedRevision != 0 && cur.Revision != expectedRevision:
		return GroupView{}, false, domain.Errorf(contract.CodeFailedPrecondition, "node group %q is at revision %d, not %d", g.ID, cur.Revision, expectedRevision)
	case expectedRevision == 0 && exists && !upsert:
		return GroupView{}, false, domain.Errorf(contract.CodeAlreadyExists, "node group %q already exists", g.ID)
	}
	if _, err := s.do(ctx, ports.PutGroup{Group: g, ExpectedRevision: expectedRevision, Upsert: upsert}, slog.String("group", g.ID), slog.Bool("create", !exists)); err != nil {
		return GroupView{}, false, err
	}
	view, err = s.Group(g.ID)
	return view, !exists, err
}

// DeleteGroup deletes a group definition if it is still at
// expectedRevision; lifecycle decides what happens to its instances.
func (s *Service) DeleteGroup(ctx context.Context, id string, expectedRevision uint64) error {
	cur, err := s.Group(id)
	if err != nil {
		return err
	}
	if expectedRevision == 0 {
		expectedRevision = cur.Revision
	}
	if cur.Revision != expectedRevision {
		return domain.Errorf(contract.CodeFailedPrecondition, "node group %q is at revision %d, not %d", id, cur.Revision, expectedRevision)
	}
	_, err = s.do(ctx, ports.DeleteGroup{ID: id, ExpectedRevision: expectedRevision}, slog.String("group", id))
	return err
}

// Instance returns the instance with id.
func (s *Service) Instance(id string) (InstanceView, error) {
	if id == "" {
		return InstanceView{}, domain.Errorf(contract.CodeInvalidArgument, "instance id is required")
	}
	if err := s.ready(); err != nil {
		return InstanceView{}, err
	}
	v, ok := s.rm.Instance(id)
	if !ok {
		return InstanceView{}, domain.Errorf(contract.CodeNotFound, "instance %q not found", id)
	}
	return v, nil
}

// InstanceAction asks lifecycle to act on one instance (retry its current
// step, force-delete it) and returns the instance as it is afterwards.
func (s *Service) InstanceAction(ctx context.Context, id string, action ports.InstanceActionKind) (InstanceView, error) {
	v, err := s.Instance(id)
	if err != nil {
		return InstanceView{}, err
	}
	if _, err := s.do(ctx, ports.InstanceAction{InstanceID: id, Action: action}, slog.String("group", v.Group()), slog.String("instance", id), slog.String("action", action.String())); err != nil {
		return InstanceView{}, err
	}
	return s.Instance(id)
}

// ReleaseOrphans confirms to lifecycle that the tagged VMs its reconciler
// holds back are orphans: those created before now may be terminated (at
// most --max-orphan-terminations per pass). It writes no state.
func (s *Service) ReleaseOrphans(ctx context.Context) error {
	_, err := s.do(ctx, ports.ReleaseOrphans{},
		slog.String("op", "release_orphans"))
	return err
}

// AdoptTimeout bounds an AdoptVMs request end to end: lifecycle asks the
// cloud adapter about the VMs and then for their tags, and bounds its own
// part with its --op-timeout (15s by default).
const AdoptTimeout = 20 * time.Second

// AdoptVMs hands running VMs nodesmith did not create to a group (or, with
// dryRun, plans it) and returns the outcome per VM, in the request's
// order. Refused as a whole when the new VMs would take the target beyond
// the group's max size.
func (s *Service) AdoptVMs(ctx context.Context, op ports.AdoptVMs) ([]ports.AdoptOutcome, error) {
	if _, err := s.Group(op.Group); err != nil {
		return nil, err
	}
	revs, err := s.doWithin(ctx, AdoptTimeout, op,
		slog.String("op", "adopt_vms"), slog.String("group", op.Group), slog.Int("vms", len(op.VMs)), slog.Bool("dry_run", op.DryRun))
	if err != nil {
		return nil, err
	}
	return revs.Adopted, nil
}

// do runs one lifecycle operation within OpTimeout and waits until the
// read model has applied what it wrote (read-your-writes).
//
// The request gets its request_id here, one per call (CA's or an
// operator's), so the logs name the id every retry of it carries.
func (s *Service) do(ctx context.Context, op ports.Operation, attrs ...any) (ports.Revisions, error) {
	return s.doWithin(ctx, s.cfg.OpTimeout, op, attrs...)
}

func (s *Service) doWithin(ctx context.Context, timeout time.Duration, op ports.Operation, attrs ...any) (ports.Revisions, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req := ports.Request{ID: rand.Text(), Op: op}
	attrs = append(attrs, slog.String("request_id", req.ID))
	revs, err := s.lc.Do(ctx, req)
	if err != nil {
		s.log.LogAttrs(ctx, levelFor(err), "lifecycle operation failed", slog.Group("op", attrs...), slog.String("code", domain.CodeOf(err).String()), slog.String("err", err.Error()))
		if domain.CodeOf(err) == contract.CodeUnknown {
			err = domain.Errorf(contract.CodeInternal, "lifecycle operation: %v", err)
		}
		return revs, err
	}
	if err := s.rm.WaitFor(ctx, revs.Groups, revs.Instances); err != nil {
		s.log.WarnContext(ctx, "operation applied but not yet visible", slog.Group("op", attrs...), "groups_revision", revs.Groups, "instances_revision", revs.Instances, "err", err)
		return revs, domain.Errorf(contract.CodeDeadlineExceeded,
			"the operation was applied (groups revision %d, instances revision %d) but is not yet visible to this gateway", revs.Groups, revs.Instances)
	}
	if revs.Catalog != 0 {
		if err := s.rm.WaitForCatalog(ctx, revs.Catalog); err != nil {
			s.log.WarnContext(ctx, "operation applied but not yet visible", slog.Group("op", attrs...), "catalog_revision", revs.Catalog, "err", err)
			return revs, domain.Errorf(contract.CodeDeadlineExceeded,
				"the operation was applied (catalog revision %d) but is not yet visible to this gateway", revs.Catalog)
		}
	}
	s.log.InfoContext(ctx, "lifecycle operation applied", slog.Group("op", attrs...), "groups_revision", revs.Groups, "instances_revision", revs.Instances, "catalog_revision", revs.Catalog)
	return revs, nil
}

func levelFor(err error) slog.Level {
	switch domain.CodeOf(err) {
	case contract.CodeInvalidArgument, contract.CodeNotFound, contract.CodeFailedPrecondition, contract.CodeAlreadyExists, contract.CodeAborted, contract.CodeOutOfRange:
		return slog.LevelInfo // a rejection, not a fault
	}
	return slog.LevelWarn
}

// InstanceQuery filters and pages ListInstances.
type InstanceQuery struct {
	// Group restricts to one group when non-empty.
	Group string
	// States restricts to these states when not empty.
	States []domain.InstanceState
	// After is the KV key the previous page ended with.
	After string
	// Limit is the page size (1..MaxPageSize).
	Limit int
}

// MaxPageSize bounds one ListInstances page.
const MaxPageSize = 1000

// InstancePage is one page of instances, sorted by KV key.
type InstancePage struct {
	Items []InstanceView
	// Next is the key to pass as After for the next page; empty on the last.
	Next string
	// Revision is the instances revision the page was read at.
	Revision uint64
}

// ListInstances returns instances matching q, sorted by key.
func (s *Service) ListInstances(q InstanceQuery) (InstancePage, error) {
	if err := s.ready(); err != nil {
		return InstancePage{}, err
	}
	if q.Limit < 1 || q.Limit > MaxPageSize {
		return InstancePage{}, domain.Errorf(contract.CodeInvalidArgument, "limit must be between 1 and %d, got %d", MaxPageSize, q.Limit)
	}
	_, rev := s.rm.Revisions()
	var items []InstanceView
	keep := func(v InstanceView) bool {
		return (q.Group == "" || v.Group() == q.Group) &&
			(len(q.States) == 0 || slices.Contains(q.States, v.State())) &&
			v.Key > q.After
	}
	if q.Group != "" {
		for _, v := range s.rm.GroupInstances(q.Group, nil) {
			if keep(v) {
				items = append(items, v)
			}
		}
	} else {
		items = s.rm.Instances(keep)
	}
	slices.SortFunc(items, func(a, b InstanceView) int { return strings.Compare(a.Key, b.Key) })
	page := InstancePage{Items: items, Revision: rev}
	if len(items) > q.Limit {
		page.Items = items[:q.Limit]
		page.Next = page.Items[q.Limit-1].Key
	}
	return page, nil
}

// GroupStatus summarises one group.
type GroupStatus struct {
	Group GroupView
	// Counts is the number of instances per state.
	Counts map[domain.InstanceState]int
	// CreationFailed counts instances whose creation failed.
	CreationFailed int
}

// Status summarises the whole read model.
type Status struct {
	Stats  Stats
	Groups []GroupStatus
	// Totals is the number of instances per state across groups
	// (including instances of groups that no longer exist).
	Totals map[domain.InstanceState]int
	// Orphans is lifecycle's orphan hold; nil when none is stored.
	Orphans *OrphanHold
}

// Status returns a summary per group and state. It works before the read
// model is synced (Stats says so), since operators look at it exactly then.
func (s *Service) Status() Status {
	st := Status{Stats: s.rm.Stats()}
	for _, g := range s.rm.Groups() {
		gs := GroupStatus{Group: g}
		gs.Counts, gs.CreationFailed = s.rm.GroupCounts(g.Record.ID)
		st.Groups = append(st.Groups, gs)
	}
	st.Totals = s.rm.Counts()
	if h, ok := s.rm.OrphanHold(); ok {
		st.Orphans = &h
	}
	return st
}
