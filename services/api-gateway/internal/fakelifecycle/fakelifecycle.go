// Package fakelifecycle is a stand-in for the lifecycle service in tests:
// it answers lifecycle operations on messaging.SubjectLifecycleOps the way
// lifecycle does (compare-and-set writes to the real KV buckets, a Reply
// carrying the revisions written) with just enough state-machine logic for
// the gateway's contract. Like lifecycle, it applies an operation at most
// once per Request.request_id and answers a repeat with the first outcome.
// It is not a lifecycle implementation, but its answers are held to
// lifecycle's: the opstest suite runs against it (contract_test.go) and
// against the real lifecycle (dev/opscontract). A new rule in lifecycle
// gets a scenario there first.
package fakelifecycle

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/nodesmith/nodesmith/libs/providerid"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nodesmith/nodesmith/libs/messaging"
	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
)

// Responder answers lifecycle requests.
type Responder struct {
	nc        *nats.Conn
	groups    jetstream.KeyValue
	instances jetstream.KeyValue
	catalog   jetstream.KeyValue
	sub       *nats.Subscription

	mu       sync.Mutex
	seq      int
	requests []*lifecyclev1.Request
	headers  []nats.Header
	nextErr  []*lifecyclev1.Status
	// outcomes are the replies given per request id (the dedup table).
	outcomes map[string]*lifecyclev1.Reply
	applied  int
	// dropReplies is how many of the next applied operations go
	// unanswered, as if the reply were lost or the leader died after
	// writing.
	dropReplies int
}

// Start subscribes on nc and returns a running Responder.
func Start(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (*Responder, error) {
	r, err := NewStore(ctx, nc, js)
	if err != nil {
		return nil, err
	}
	r.sub, err = nc.Subscribe(messaging.SubjectLifecycleOps, r.handle)
	if err != nil {
		return nil, fmt.Errorf("subscribing: %w", err)
	}
	return r, nc.Flush()
}

// NewStore returns a Responder that does not subscribe: for seeding KV.
func NewStore(ctx context.Context, nc *nats.Conn, js jetstream.JetStream) (*Responder, error) {
	g, err := js.KeyValue(ctx, messaging.BucketGroups)
	if err != nil {
		return nil, fmt.Errorf("opening groups bucket: %w", err)
	}
	i, err := js.KeyValue(ctx, messaging.BucketInstances)
	if err != nil {
		return nil, fmt.Errorf("opening instances bucket: %w", err)
	}
	c, err := js.KeyValue(ctx, messaging.BucketCatalog)
	if err != nil {
		return nil, fmt.Errorf("opening catalog bucket: %w", err)
	}
	return &Responder{nc: nc, groups: g, instances: i, catalog: c, outcomes: map[string]*lifecyclev1.Reply{}}, nil
}

// Stop unsubscribes and waits until the server knows, so a request sent
// afterwards finds no responders (instead of being routed to a
// subscription that is already gone and timing out).
func (r *Responder) Stop() {
	if r.sub != nil {
		_ = r.sub.Unsubscribe()
		// Bounded: a test may have stopped the server.
		_ = r.nc.FlushTimeout(time.Second)
	}
}

// Requests returns the requests received so far.
func (r *Responder) Requests() []*lifecyclev1.Request {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.requests)
}

// Headers returns the NATS headers of the requests received so far (trace
// context travels there).
func (r *Responder) Headers() []nats.Header {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.headers)
}

// FailNext makes the next request fail with code and message (nothing is
// written).
func (r *Responder) FailNext(code codes.Code, msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.nextErr = append(r.nextErr, &lifecyclev1.Status{Code: int32(code), Message: msg})
}

// DropNextReplies makes the next n requests that are applied (not
// answered from the dedup table) go unanswered after their writes.
func (r *Responder) DropNextReplies(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.dropReplies += n
}

// Applied is how many requests were applied (or rejected) rather than
// answered from the dedup table.
func (r *Responder) Applied() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.applied
}

// PutGroup writes g as lifecycle would and returns the revision.
func (r *Responder) PutGroup(ctx context.Context, g *statev1.NodeGroup) (uint64, error) {
	b, err := proto.Marshal(g)
	if err != nil {
		return 0, err
	}
	return r.groups.Put(ctx, g.GetId(), b)
}

// PutInstance writes in as lifecycle would and returns the revision.
func (r *Responder) PutInstance(ctx context.Context, in *statev1.Instance) (uint64, error) {
	b, err := proto.Marshal(in)
	if err != nil {
		return 0, err
	}
	return r.instances.Put(ctx, messaging.InstanceKey(in.GetGroup(), in.GetId()), b)
}

// PutCatalogEntry writes e as lifecycle would and returns the revision.
func (r *Responder) PutCatalogEntry(ctx context.Context, e *statev1.CatalogEntry) (uint64, error) {
	b, err := proto.Marshal(e)
	if err != nil {
		return 0, err
	}
	return r.catalog.Put(ctx, catalogKey(e), b)
}

// catalogKey is an entry's key in the catalog bucket ("" for none).
func catalogKey(e *statev1.CatalogEntry) string {
	switch x := e.GetEntry().(type) {
	case *statev1.CatalogEntry_Template:
		return messaging.CatalogKey("templates", x.Template.GetName())
	case *statev1.CatalogEntry_Account:
		return messaging.CatalogKey("accounts", x.Account.GetName())
	case *statev1.CatalogEntry_Hook:
		return messaging.CatalogKey("hooks", x.Hook.GetName())
	}
	return ""
}

type opError struct {
	code codes.Code
	msg  string
}

func (e *opError) Error() string { return e.msg }

func fail(code codes.Code, format string, args ...any) error {
	return &opError{code: code, msg: fmt.Sprintf(format, args...)}
}

func (r *Responder) handle(m *nats.Msg) {
	r.mu.Lock()
	r.headers = append(r.headers, m.Header)
	r.mu.Unlock()
	reply, drop := r.answer(m.Data)
	if drop {
		return
	}
	b, _ := proto.Marshal(reply)
	_ = m.Respond(b)
}

// answer decodes and applies one request; drop says to leave it
// unanswered. NATS calls handle serially, so a repeat waits for the
// first delivery's outcome, as it must.
func (r *Responder) answer(data []byte) (reply *lifecyclev1.Reply, drop bool) {
	var req lifecyclev1.Request
	if err := proto.Unmarshal(data, &req); err != nil {
		return &lifecyclev1.Reply{Error: &lifecyclev1.Status{Code: int32(codes.InvalidArgument), Message: err.Error()}}, false
	}
	id := req.GetRequestId()
	r.mu.Lock()
	r.requests = append(r.requests, proto.Clone(&req).(*lifecyclev1.Request))
	if prev, ok := r.outcomes[id]; ok && id != "" {
		r.mu.Unlock()
		return prev, false
	}
	r.applied++
	var injected *lifecyclev1.Status
	if len(r.nextErr) > 0 {
		injected, r.nextErr = r.nextErr[0], r.nextErr[1:]
	}
	r.mu.Unlock()

	reply = &lifecyclev1.Reply{}
	if injected != nil {
		reply.Error = injected
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var err error
		if pc := req.GetPutCatalogEntry(); pc != nil {
			reply.CatalogRevision, err = r.putCatalogEntry(ctx, pc)
		} else if dc := req.GetDeleteCatalogEntry(); dc != nil {
			reply.CatalogRevision, err = r.deleteCatalogEntry(ctx, dc)
		} else {
			reply.GroupsRevision, reply.InstancesRevision, err = r.apply(ctx, &req)
		}
		cancel()
		var oe *opError
		switch {
		case errors.As(err, &oe):
			reply = &lifecyclev1.Reply{Error: &lifecyclev1.Status{Code: int32(oe.code), Message: oe.msg}}
		case err != nil:
			reply = &lifecyclev1.Reply{Error: &lifecyclev1.Status{Code: int32(codes.Internal), Message: err.Error()}}
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if id != "" {
		r.outcomes[id] = reply
	}
	if r.dropReplies > 0 {
		r.dropReplies--
		return nil, true
	}
	return reply, false
}

type groupRec struct {
	g   *statev1.NodeGroup
	rev uint64
}

type instRec struct {
	in  *statev1.Instance
	rev uint64
}

func (r *Responder) group(ctx context.Context, id string) (groupRec, error) {
	e, err := r.groups.Get(ctx, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return groupRec{}, fail(codes.NotFound, "node group %q not found", id)
	}
	if err != nil {
		return groupRec{}, err
	}
	g := &statev1.NodeGroup{}
	if err := proto.Unmarshal(e.Value(), g); err != nil {
		return groupRec{}, err
	}
	return groupRec{g: g, rev: e.Revision()}, nil
}

func (r *Responder) groupInstances(ctx context.Context, group string) ([]instRec, error) {
	kl, err := r.instances.ListKeysFiltered(ctx, group+".*")
	if err != nil {
		return nil, err
	}
	var out []instRec
	for k := range kl.Keys() {
		e, err := r.instances.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		in := &statev1.Instance{}
		if err := proto.Unmarshal(e.Value(), in); err != nil {
			return nil, err
		}
		out = append(out, instRec{in: in, rev: e.Revision()})
	}
	slices.SortFunc(out, func(a, b instRec) int { return int(a.rev) - int(b.rev) })
	return out, nil
}

func (r *Responder) saveGroup(ctx context.Context, g groupRec) (uint64, error) {
	g.g.UpdatedAt = timestamppb.Now()
	b, _ := proto.Marshal(g.g)
	return r.groups.Update(ctx, g.g.GetId(), b, g.rev)
}

func (r *Responder) saveInstance(ctx context.Context, in instRec, to statev1.InstanceState, reason string) (uint64, error) {
	if in.in.GetState() != to {
		in.in.History = append(in.in.History, &statev1.Transition{From: in.in.GetState(), To: to, Reason: reason, At: timestamppb.Now()})
		in.in.State = to
		in.in.StateSince = timestamppb.Now()
	}
	b, _ := proto.Marshal(in.in)
	return r.instances.Update(ctx, messaging.InstanceKey(in.in.GetGroup(), in.in.GetId()), b, in.rev)
}

func (r *Responder) newInstances(ctx context.Context, group string, n int) (uint64, error) {
	var rev uint64
	for range n {
		r.mu.Lock()
		r.seq++
		id := fmt.Sprintf("i-%06d", r.seq)
		r.mu.Unlock()
		in := &statev1.Instance{
			Id: id, Group: group, State: statev1.InstanceState_INSTANCE_STATE_PENDING,
			ProviderId: providerid.Placeholder(group, id), CreatedAt: timestamppb.Now(), StateSince: timestamppb.Now(),
		}
		b, _ := proto.Marshal(in)
		var err error
		if rev, err = r.instances.Create(ctx, messaging.InstanceKey(group, id), b); err != nil {
			return 0, err
		}
	}
	return rev, nil
}

func (r *Responder) apply(ctx context.Context, req *lifecyclev1.Request) (groupsRev, instancesRev uint64, err error) {
	switch op := req.GetOp().(type) {
	case *lifecyclev1.Request_IncreaseSize:
		g, err := r.group(ctx, op.IncreaseSize.GetGroup())
		if err != nil {
			return 0, 0, err
		}
		d := op.IncreaseSize.GetDelta()
		if d <= 0 {
			return 0, 0, fail(codes.InvalidArgument, "delta must be positive")
		}
		if g.g.TargetSize+d > g.g.MaxSize {
			return 0, 0, fail(codes.OutOfRange, "size increase too large: target %d + %d exceeds max %d", g.g.TargetSize, d, g.g.MaxSize)
		}
		g.g.TargetSize += d
		if groupsRev, err = r.saveGroup(ctx, g); err != nil {
			return 0, 0, err
		}
		instancesRev, err = r.newInstances(ctx, g.g.GetId(), int(d))
		return groupsRev, instancesRev, err

	case *lifecyclev1.Request_DecreaseTargetSize:
		g, err := r.group(ctx, op.DecreaseTargetSize.GetGroup())
		if err != nil {
			return 0, 0, err
		}
		n := -int(op.DecreaseTargetSize.GetDelta())
		if n <= 0 {
			return 0, 0, fail(codes.InvalidArgument, "delta must be negative, got %d", -n)
		}
		if g.g.TargetSize-int32(n) < g.g.MinSize {
			return 0, 0, fail(codes.OutOfRange, "target %d would be below min size %d of %q", g.g.TargetSize-int32(n), g.g.MinSize, g.g.GetId())
		}
		return r.decreaseTo(ctx, g, g.g.TargetSize-int32(n), "target decreased")

	case *lifecyclev1.Request_DeleteNodes:
		g, err := r.group(ctx, op.DeleteNodes.GetGroup())
		if err != nil {
			return 0, 0, err
		}
		if len(op.DeleteNodes.GetNodes()) == 0 {
			return 0, 0, fail(codes.InvalidArgument, "no nodes given")
		}
		all, err := r.groupInstances(ctx, "*")
		if err != nil {
			return 0, 0, err
		}
		// Like lifecycle: every node is checked before anything is
		// written; one unknown node is NotFound, any other mix of
		// problems (a node of another group) InvalidArgument.
		var victims []instRec
		var problems []string
		notFound := false
		for _, n := range op.DeleteNodes.GetNodes() {
			i := slices.IndexFunc(all, func(in instRec) bool {
				return (n.GetProviderId() != "" && in.in.GetProviderId() == n.GetProviderId()) || (n.GetName() != "" && in.in.GetNodeName() == n.GetName())
			})
			switch {
			case i < 0:
				notFound = true
				problems = append(problems, fmt.Sprintf("node %q (providerID %q) is not an instance of any node group", n.GetName(), n.GetProviderId()))
			case all[i].in.GetGroup() != g.g.GetId():
				problems = append(problems, fmt.Sprintf("node %q (providerID %q) belongs to node group %q, not %q", n.GetName(), n.GetProviderId(), all[i].in.GetGroup(), g.g.GetId()))
			case all[i].in.GetReleased() || slices.ContainsFunc(victims, func(v instRec) bool { return v.in.GetId() == all[i].in.GetId() }):
				// Already being deleted (CA repeats calls): idempotent.
			default:
				victims = append(victims, all[i])
			}
		}
		if len(problems) > 0 {
			code := codes.InvalidArgument
			if notFound && len(problems) == 1 {
				code = codes.NotFound
			}
			return 0, 0, fail(code, "%s", strings.Join(problems, "; "))
		}
		if len(victims) == 0 {
			return 0, 0, nil
		}
		// The target never goes below the min size: a failed creation is
		// then replaced instead; any other node fails the call.
		failed := 0
		for _, v := range victims {
			if v.in.GetCreationFailed() {
				failed++
			}
		}
		normal, room := len(victims)-failed, int(g.g.TargetSize-g.g.MinSize)
		if normal > room {
			return 0, 0, fail(codes.OutOfRange, "deleting %d nodes would take %q below its min size %d (target %d)", len(victims), g.g.GetId(), g.g.MinSize, g.g.TargetSize)
		}
		decrease := normal + min(failed, room-normal)
		for _, v := range victims {
			v.in.Released = true
			if instancesRev, err = r.saveInstance(ctx, v, statev1.InstanceState_INSTANCE_STATE_PENDING_DELETION, "deleted by cluster autoscaler"); err != nil {
				return 0, 0, err
			}
		}
		if decrease > 0 {
			g.g.TargetSize -= int32(decrease)
			if groupsRev, err = r.saveGroup(ctx, g); err != nil {
				return 0, 0, err
			}
		}
		return groupsRev, instancesRev, nil

	case *lifecyclev1.Request_SetTargetSize:
		g, err := r.group(ctx, op.SetTargetSize.GetGroup())
		if err != nil {
			return 0, 0, err
		}
		t := op.SetTargetSize.GetTargetSize()
		if t < g.g.MinSize || t > g.g.MaxSize {
			return 0, 0, fail(codes.OutOfRange, "target %d outside [%d, %d]", t, g.g.MinSize, g.g.MaxSize)
		}
		if t < g.g.TargetSize {
			return r.decreaseTo(ctx, g, t, "target set lower")
		}
		grow := t - g.g.TargetSize
		g.g.TargetSize = t
		if groupsRev, err = r.saveGroup(ctx, g); err != nil {
			return 0, 0, err
		}
		if grow > 0 {
			instancesRev, err = r.newInstances(ctx, g.g.GetId(), int(grow))
		}
		return groupsRev, instancesRev, err

	case *lifecyclev1.Request_InstanceAction:
		id := op.InstanceAction.GetInstanceId()
		kl, err := r.instances.ListKeysFiltered(ctx, "*."+id)
		if err != nil {
			return 0, 0, err
		}
		var key string
		for k := range kl.Keys() {
			key = k
		}
		if key == "" {
			return 0, 0, fail(codes.NotFound, "instance %q not found", id)
		}
		e, err := r.instances.Get(ctx, key)
		if err != nil {
			return 0, 0, err
		}
		in := instRec{in: &statev1.Instance{}, rev: e.Revision()}
		if err := proto.Unmarshal(e.Value(), in.in); err != nil {
			return 0, 0, err
		}
		to := in.in.GetState()
		switch op.InstanceAction.GetAction() {
		case lifecyclev1.InstanceAction_ACTION_RETRY:
			if !in.in.GetCreationFailed() && in.in.GetNextRetryAt() == nil {
				return 0, 0, fail(codes.FailedPrecondition, "instance %q has nothing to retry", id)
			}
			in.in.CreationFailed, in.in.NextRetryAt, in.in.LastError = false, nil, nil
		case lifecyclev1.InstanceAction_ACTION_FORCE_DELETE:
			if st := in.in.GetState(); st == statev1.InstanceState_INSTANCE_STATE_DELETING || st == statev1.InstanceState_INSTANCE_STATE_DELETED {
				return 0, 0, fail(codes.FailedPrecondition, "instance %q is already %s", id, st)
			}
			in.in.Released = true
			to = statev1.InstanceState_INSTANCE_STATE_DELETING
		default:
			return 0, 0, fail(codes.InvalidArgument, "unknown instance action %s", op.InstanceAction.GetAction())
		}
		instancesRev, err = r.saveInstance(ctx, in, to, "operator action")
		return 0, instancesRev, err

	case *lifecyclev1.Request_PutGroup:
		return r.putGroup(ctx, op.PutGroup)

	case *lifecyclev1.Request_AdoptVms:
		return 0, 0, r.adoptVMs(ctx, op.AdoptVms)

	case *lifecyclev1.Request_DeleteGroup:
		return r.deleteGroup(ctx, op.DeleteGroup)

	case *lifecyclev1.Request_ReleaseOrphans:
		// The fake has no reconciler: nothing is held, nothing to write.
		return 0, 0, nil
	}
	if req.GetOp() == nil {
		return 0, 0, fail(codes.InvalidArgument, "request without an operation")
	}
	return 0, 0, fail(codes.Unimplemented, "operation %T not supported by the fake", req.GetOp())
}

// deleteGroup deletes an API-managed group with no instances left
// (Deleted records excepted), with lifecycle's rules.
func (r *Responder) deleteGroup(ctx context.Context, op *lifecyclev1.DeleteGroup) (groupsRev, instancesRev uint64, err error) {
	g, err := r.group(ctx, op.GetId())
	if err != nil {
		return 0, 0, err
	}
	switch {
	case g.g.GetSource() == "config":
		return 0, 0, fail(codes.FailedPrecondition, "node group %q is defined in the configuration file; remove it there", op.GetId())
	case op.GetExpectedRevision() != 0 && op.GetExpectedRevision() != g.rev:
		return 0, 0, fail(codes.Aborted, "node group %q changed: revision %d, expected %d", op.GetId(), g.rev, op.GetExpectedRevision())
	}
	insts, err := r.groupInstances(ctx, op.GetId())
	if err != nil {
		return 0, 0, err
	}
	active := 0
	for _, in := range insts {
		if in.in.GetState() != statev1.InstanceState_INSTANCE_STATE_DELETED {
			active++
		}
	}
	if active > 0 {
		return 0, 0, fail(codes.FailedPrecondition, "node group %q still has %d instances; scale it to zero first", op.GetId(), active)
	}
	if err := r.groups.Delete(ctx, op.GetId(), jetstream.LastRevision(g.rev)); err != nil {
		return 0, 0, err
	}
	rev, err := lastRevision(ctx, r.groups)
	return rev, 0, err
}

// decreaseTo lowers g's target to target by cancelling capacity that is
// not yet a node (Pending records, newest first), changing nothing if that
// is not enough.
func (r *Responder) decreaseTo(ctx context.Context, g groupRec, target int32, why string) (groupsRev, instancesRev uint64, err error) {
	n := int(g.g.TargetSize - target)
	insts, err := r.groupInstances(ctx, g.g.GetId())
	if err != nil {
		return 0, 0, err
	}
	var pending []instRec
	for _, in := range insts {
		if in.in.GetState() == statev1.InstanceState_INSTANCE_STATE_PENDING && !in.in.GetReleased() {
			pending = append(pending, in)
		}
	}
	if n > len(pending) {
		return 0, 0, fail(codes.FailedPrecondition, "cannot decrease by %d: only %d instances are not yet nodes", n, len(pending))
	}
	g.g.TargetSize -= int32(n)
	if groupsRev, err = r.saveGroup(ctx, g); err != nil {
		return 0, 0, err
	}
	// Newest first: the least progressed.
	for _, in := range slices.Backward(pending) {
		if n == 0 {
			break
		}
		in.in.Released = true
		if instancesRev, err = r.saveInstance(ctx, in, statev1.InstanceState_INSTANCE_STATE_DELETED, why); err != nil {
			return 0, 0, err
		}
		n--
	}
	return groupsRev, instancesRev, nil
}

// putGroup creates or replaces a group with lifecycle's rules: groups from
// the configuration file are refused, a replace keeps the runtime target
// (clamped into the new bounds), and the revision check is a
// compare-and-set on the bucket.
func (r *Responder) putGroup(ctx context.Context, op *lifecyclev1.PutGroup) (groupsRev, instancesRev uint64, err error) {
	if op.GetGroup() == nil {
		return 0, 0, fail(codes.InvalidArgument, "no group")
	}
	g := proto.Clone(op.GetGroup()).(*statev1.NodeGroup)
	g.Source = "api"
	if g.GetMinSize() < 0 || g.GetMinSize() > g.GetMaxSize() {
		return 0, 0, fail(codes.InvalidArgument, "invalid node group: minSize %d, maxSize %d", g.GetMinSize(), g.GetMaxSize())
	}
	cur, err := r.group(ctx, g.GetId())
	var oe *opError
	exists := err == nil
	if err != nil && (!errors.As(err, &oe) || oe.code != codes.NotFound) {
		return 0, 0, err
	}
	switch {
	case exists && cur.g.GetSource() == "config":
		return 0, 0, fail(codes.FailedPrecondition, "node group %q is defined in the configuration file; change it there", g.GetId())
	case exists && op.GetExpectedRevision() == 0 && !op.GetUpsert():
		return 0, 0, fail(codes.AlreadyExists, "node group %q already exists", g.GetId())
	case exists && op.GetExpectedRevision() != 0 && op.GetExpectedRevision() != cur.rev:
		return 0, 0, fail(codes.Aborted, "node group %q changed: revision %d, expected %d", g.GetId(), cur.rev, op.GetExpectedRevision())
	case !exists && op.GetExpectedRevision() != 0:
		return 0, 0, fail(codes.NotFound, "node group %q not found", g.GetId())
	}
	if !exists {
		if g.GetTargetSize() < g.GetMinSize() || g.GetTargetSize() > g.GetMaxSize() {
			return 0, 0, fail(codes.InvalidArgument, "invalid node group: targetSize: must be within [minSize, maxSize] = [%d, %d], got %d",
				g.GetMinSize(), g.GetMaxSize(), g.GetTargetSize())
		}
		g.UpdatedAt = timestamppb.Now()
		b, _ := proto.Marshal(g)
		rev, err := r.groups.Create(ctx, g.GetId(), b)
		if err != nil || g.GetTargetSize() == 0 {
			return rev, 0, err
		}
		// Like lifecycle, a new group gets the Pending records of its target.
		instancesRev, err = r.newInstances(ctx, g.GetId(), int(g.GetTargetSize()))
		return rev, instancesRev, err
	}
	g.TargetSize = min(max(cur.g.GetTargetSize(), g.GetMinSize()), g.GetMaxSize())
	rev, err := r.saveGroup(ctx, groupRec{g: g, rev: cur.rev})
	return rev, 0, err
}

// putCatalogEntry creates or replaces a catalog entry with lifecycle's
// revision rules (compare-and-set on the bucket); entries from the
// configuration file are refused.
func (r *Responder) putCatalogEntry(ctx context.Context, op *lifecyclev1.PutCatalogEntry) (uint64, error) {
	if op.GetEntry() == nil {
		return 0, fail(codes.InvalidArgument, "no entry")
	}
	e := proto.Clone(op.GetEntry()).(*statev1.CatalogEntry)
	key := catalogKey(e)
	if key == "" {
		return 0, fail(codes.InvalidArgument, "the entry holds no template, account or hook")
	}
	e.Source, e.UpdatedAt = "api", timestamppb.Now()
	b, _ := proto.Marshal(e)
	cur, err := r.catalog.Get(ctx, key)
	exists := err == nil
	if err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, err
	}
	if exists {
		old := &statev1.CatalogEntry{}
		if err := proto.Unmarshal(cur.Value(), old); err != nil {
			return 0, err
		}
		switch {
		case old.GetSource() == "config":
			return 0, fail(codes.FailedPrecondition, "%s is defined in the configuration file; change it there", key)
		case op.GetExpectedRevision() == 0 && !op.GetUpsert():
			return 0, fail(codes.AlreadyExists, "%s already exists", key)
		case op.GetExpectedRevision() != 0 && op.GetExpectedRevision() != cur.Revision():
			return 0, fail(codes.Aborted, "%s changed: revision %d, expected %d", key, cur.Revision(), op.GetExpectedRevision())
		}
		return r.catalog.Update(ctx, key, b, cur.Revision())
	}
	if op.GetExpectedRevision() != 0 {
		return 0, fail(codes.NotFound, "%s not found", key)
	}
	return r.catalog.Create(ctx, key, b)
}

// deleteCatalogEntry deletes a catalog entry with lifecycle's rules
// (entries from the configuration file are refused; the revision check is
// a compare-and-set). Unlike lifecycle it does not check that nothing
// references the entry.
func (r *Responder) deleteCatalogEntry(ctx context.Context, op *lifecyclev1.DeleteCatalogEntry) (uint64, error) {
	var kind string
	switch op.GetKind() {
	case lifecyclev1.CatalogKind_CATALOG_KIND_TEMPLATE:
		kind = "templates"
	case lifecyclev1.CatalogKind_CATALOG_KIND_ACCOUNT:
		kind = "accounts"
	case lifecyclev1.CatalogKind_CATALOG_KIND_HOOK:
		kind = "hooks"
	default:
		return 0, fail(codes.InvalidArgument, "delete_catalog_entry without a kind")
	}
	key := messaging.CatalogKey(kind, op.GetName())
	cur, err := r.catalog.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return 0, fail(codes.NotFound, "%s not found", key)
	}
	if err != nil {
		return 0, err
	}
	old := &statev1.CatalogEntry{}
	if err := proto.Unmarshal(cur.Value(), old); err != nil {
		return 0, err
	}
	switch {
	case old.GetSource() == "config":
		return 0, fail(codes.FailedPrecondition, "%s is defined in the configuration file; remove it there", key)
	case op.GetExpectedRevision() != 0 && op.GetExpectedRevision() != cur.Revision():
		return 0, fail(codes.Aborted, "%s changed: revision %d, expected %d", key, cur.Revision(), op.GetExpectedRevision())
	}
	if err := r.catalog.Delete(ctx, key, jetstream.LastRevision(cur.Revision())); err != nil {
		return 0, err
	}
	return lastRevision(ctx, r.catalog)
}

// maxAdoptVMs is lifecycle's limit on one AdoptVMs request.
const maxAdoptVMs = 100

// adoptVMs checks an AdoptVMs request as lifecycle does (the same codes
// for a bad request or an unknown group). The fake adopts nothing: past
// the checks it answers Unimplemented.
func (r *Responder) adoptVMs(ctx context.Context, op *lifecyclev1.AdoptVMs) error {
	if op.GetGroup() == "" {
		return fail(codes.InvalidArgument, "group: required")
	}
	if n := len(op.GetVms()); n == 0 || n > maxAdoptVMs {
		return fail(codes.InvalidArgument, "instances: between 1 and %d VMs, got %d", maxAdoptVMs, n)
	}
	seen := map[string]string{}
	for i, vm := range op.GetVms() {
		for _, f := range []struct{ name, v string }{{"cloudID", vm.GetCloudId()}, {"nodeName", vm.GetNodeName()}, {"providerID", vm.GetProviderId()}} {
			if f.v == "" {
				return fail(codes.InvalidArgument, "instances[%d].%s: required", i, f.name)
			}
			k := f.name + "=" + f.v
			if prev, dup := seen[k]; dup {
				return fail(codes.InvalidArgument, "instances[%d].%s: %q repeats %s", i, f.name, f.v, prev)
			}
			seen[k] = fmt.Sprintf("instances[%d]", i)
		}
	}
	if _, err := r.group(ctx, op.GetGroup()); err != nil {
		return err
	}
	return fail(codes.Unimplemented, "the fake lifecycle adopts no VMs")
}

// lastRevision is a bucket's last revision (after a delete: its marker's).
func lastRevision(ctx context.Context, kv jetstream.KeyValue) (uint64, error) {
	st, err := kv.Status(ctx)
	if err != nil {
		return 0, err
	}
	bs, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok {
		return 0, fmt.Errorf("bucket status %T has no stream info", st)
	}
	return bs.StreamInfo().State.LastSeq, nil
}
