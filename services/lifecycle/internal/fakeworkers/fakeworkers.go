// Package fakeworkers stands in for the cloud-adapter and hook-runner
// services in lifecycle's component tests: goroutines that consume the real
// command stream (with the real durable consumers) and publish results on
// the real event stream, with programmable failures. The fake cloud honours
// ClientTokens like a real one: the same token returns the same VMs.
package fakeworkers

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/worker"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	hookv1 "github.com/nodesmith/nodesmith/proto/nodesmith/hook/v1"
)

// VM is a simulated cloud VM.
type VM struct {
	CloudID    string
	InstanceID string
	Group      string
	Token      string
	// Batch is the create batch; InstanceID is only tagged on VMs of
	// single-instance batches, as the real cloud adapter does.
	Batch  string
	Tagged bool
	// Cluster is the cluster id tag ("" for a VM made outside nodesmith).
	// Inventories list a cluster's VMs only, and a terminate is refused
	// for a VM of another cluster, as the real cloud adapter does.
	Cluster   string
	IP        string
	State     cloudv1.CloudState
	CreatedAt time.Time
}

// Cloud is the simulated cloud and its programmable behaviour.
type Cloud struct {
	mu  sync.Mutex
	vms map[string]*VM // by cloud id
	// byToken remembers the VMs of each ClientToken, in order.
	byToken map[string][]string
	next    int
	// Calls counts commands by kind.
	calls map[string]int

	// CreateError, when set, decides the fate of a create command: a
	// non-nil error is published as CreateFailed.
	CreateError func(c *cloudv1.CreateInstances) *cloudv1.CloudError
	// HoldCreate, when set and true, makes the worker nak the create
	// command (simulating a cloud call that does not return).
	HoldCreate func(c *cloudv1.CreateInstances) bool
	// WatchError, when set and non-nil, fails a watch delivery (it is
	// redelivered by JetStream).
	WatchError func() error
	// WatchState, when set, overrides the observed state of a VM.
	WatchState func(vm VM) cloudv1.CloudState
	// NoIP makes RUNNING VMs report no IP.
	NoIP bool
	// Latency delays every command's handling (a slow cloud).
	Latency time.Duration
	// TerminateError, when set, makes terminations fail with it.
	TerminateError func(ref *cloudv1.InstanceRef) *cloudv1.CloudError
}

// Hooks is the simulated hook runner.
type Hooks struct {
	mu    sync.Mutex
	runs  []*hookv1.RunHook
	calls map[string]int
	// Result, when set, decides a run's outcome (nil: success).
	Result func(r *hookv1.RunHook) *hookv1.HookResult
	// OnSuccess is called after a successful after_created run (e.g. to
	// register the node in a fake cluster).
	OnSuccess func(r *hookv1.RunHook)
	// Latency delays every run (a slow script).
	Latency time.Duration
}

// Workers runs a Cloud and Hooks on a JetStream.
type Workers struct {
	Cloud *Cloud
	Hooks *Hooks
	js    jetstream.JetStream
	pub   *messaging.Publisher
	log   *slog.Logger
}

// New returns workers publishing on js.
func New(js jetstream.JetStream, log *slog.Logger) *Workers {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Workers{
		Cloud: &Cloud{vms: map[string]*VM{}, byToken: map[string][]string{}, calls: map[string]int{}},
		Hooks: &Hooks{calls: map[string]int{}},
		js:    js,
		pub:   messaging.NewPublisher(js),
		log:   log,
	}
}

// Run consumes commands until ctx ends.
func (w *Workers) Run(ctx context.Context) error {
	cloud, err := w.js.Consumer(ctx, messaging.CommandStream, messaging.ConsumerCloudAdapter)
	if err != nil {
		return err
	}
	hooks, err := w.js.Consumer(ctx, messaging.CommandStream, messaging.ConsumerHookRunner)
	if err != nil {
		return err
	}
	errc := make(chan error, 2)
	opts := worker.Options{Concurrency: 8, ShutdownGrace: 5 * time.Second, MaxNakDelay: time.Second, Logger: w.log}
	go func() {
		o := opts
		o.Name = "fake-cloud"
		errc <- worker.Run(ctx, cloud, o, w.handleCloud)
	}()
	go func() {
		o := opts
		o.Name = "fake-hooks"
		errc <- worker.Run(ctx, hooks, o, w.handleHook)
	}()
	return firstErr(<-errc, <-errc)
}

func firstErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

func (w *Workers) publishCloud(ctx context.Context, kind string, ev *cloudv1.Event) error {
	return w.publish(ctx, messaging.SubjectCloudEvents+"."+kind, ev)
}

func (w *Workers) publish(ctx context.Context, subject string, m proto.Message) error {
	_, err := w.pub.Publish(ctx, subject, "", m)
	return err
}

func (w *Workers) handleCloud(ctx context.Context, msg jetstream.Msg) error {
	var cmd cloudv1.Command
	if err := proto.Unmarshal(msg.Data(), &cmd); err != nil {
		return worker.Permanent(err)
	}
	c := w.Cloud
	c.mu.Lock()
	latency := c.Latency
	c.mu.Unlock()
	if err := sleep(ctx, latency); err != nil {
		return err
	}
	switch b := cmd.GetBody().(type) {
	case *cloudv1.Command_Create:
		cr := b.Create
		c.mu.Lock()
		c.calls["create"]++
		hold := c.HoldCreate != nil && c.HoldCreate(cr)
		var cerr *cloudv1.CloudError
		if !hold && c.CreateError != nil {
			cerr = c.CreateError(cr)
		}
		c.mu.Unlock()
		if hold {
			return fmt.Errorf("create held")
		}
		if cerr != nil {
			return w.publishCloud(ctx, "create_failed", &cloudv1.Event{Body: &cloudv1.Event_CreateFailed{CreateFailed: &cloudv1.CreateFailed{
				BatchId: cr.GetBatchId(), Instances: cr.GetInstances(), Error: cerr,
			}}})
		}
		refs := c.create(cr)
		if err := w.publishCloud(ctx, "created", &cloudv1.Event{Body: &cloudv1.Event_Created{Created: &cloudv1.InstancesCreated{
			BatchId: cr.GetBatchId(), Instances: refs,
		}}}); err != nil {
			return err
		}
		// Like the real adapter, the create command goes on to watch the
		// VMs it created.
		return w.watch(ctx, refs)
	case *cloudv1.Command_Watch:
		return w.watch(ctx, b.Watch.GetInstances())
	case *cloudv1.Command_Terminate:
		c.mu.Lock()
		c.calls["terminate"]++
		var done, failed []*cloudv1.InstanceRef
		var ferr *cloudv1.CloudError
		for _, r := range b.Terminate.GetInstances() {
			if c.TerminateError != nil {
				if e := c.TerminateError(r); e != nil {
					failed, ferr = append(failed, r), e
					continue
				}
			}
			if vm, ok := c.vms[r.GetCloudId()]; ok && !mayTerminate(vm, b.Terminate.GetClusterId(), r.GetAdopted()) {
				failed = append(failed, r)
				ferr = &cloudv1.CloudError{Kind: cloudv1.ErrorKind_ERROR_KIND_INVALID_PARAMETERS, Code: "InstanceNotInCluster",
					Message: fmt.Sprintf("VM %s is not cluster %q's", vm.CloudID, b.Terminate.GetClusterId())}
				continue
			}
			if vm, ok := c.vms[r.GetCloudId()]; ok {
				vm.State = cloudv1.CloudState_CLOUD_STATE_NOT_FOUND
			}
			done = append(done, r)
		}
		c.mu.Unlock()
		if len(failed) > 0 {
			if err := w.publishCloud(ctx, "terminate_failed", &cloudv1.Event{Body: &cloudv1.Event_TerminateFailed{TerminateFailed: &cloudv1.TerminateFailed{
				Instances: failed, Error: ferr,
			}}}); err != nil {
				return err
			}
		}
		if len(done) == 0 {
			return nil
		}
		return w.publishCloud(ctx, "terminated", &cloudv1.Event{Body: &cloudv1.Event_Terminated{Terminated: &cloudv1.InstancesTerminated{Instances: done}}})
	case *cloudv1.Command_ListInventory:
		c.mu.Lock()
		c.calls["inventory"]++
		inv := &cloudv1.Inventory{RequestId: b.ListInventory.GetRequestId(), Target: b.ListInventory.GetTarget()}
		for _, vm := range c.sortedLocked() {
			if vm.State == cloudv1.CloudState_CLOUD_STATE_NOT_FOUND || vm.Cluster != b.ListInventory.GetClusterId() {
				continue
			}
			item := &cloudv1.InventoryItem{
				CloudId: vm.CloudID, BatchId: vm.Batch, Group: vm.Group, State: vm.State,
				CreatedAt: timestamppb.New(vm.CreatedAt), PrivateIp: vm.IP,
			}
			if vm.Tagged {
				item.InstanceId = vm.InstanceID
			}
			inv.Items = append(inv.Items, item)
		}
		c.mu.Unlock()
		return w.publishCloud(ctx, "inventory", &cloudv1.Event{Body: &cloudv1.Event_Inventory{Inventory: inv}})
	case *cloudv1.Command_Tag:
		return w.publishCloud(ctx, "tagged", &cloudv1.Event{Body: &cloudv1.Event_Tagged{Tagged: c.tag(b.Tag)}})
	}
	return worker.Permanent(fmt.Errorf("unknown command"))
}

// tag plays the cloud adapter's TagInstances: VMs that exist and carry no
// other cluster's tag are tagged (unless check only).
// watch follows VMs (a watch command, or the VMs a create command made),
// counted as "watch" calls; WatchError fails it before any observation.
func (w *Workers) watch(ctx context.Context, refs []*cloudv1.InstanceRef) error {
	c := w.Cloud
	c.mu.Lock()
	c.calls["watch"]++
	var werr error
	if c.WatchError != nil {
		werr = c.WatchError()
	}
	c.mu.Unlock()
	if werr != nil {
		return werr
	}
	// Like the real adapter, follow each VM until it is RUNNING with an
	// IP or in a final state, publishing each observation.
	for _, r := range refs {
		deadline := time.Now().Add(5 * time.Second)
		for {
			st, ip := c.observe(r.GetCloudId())
			if err := w.publishCloud(ctx, "observed", &cloudv1.Event{Body: &cloudv1.Event_Observed{Observed: &cloudv1.InstanceObserved{
				Instance: r, State: st, PrivateIp: ip, ObservedAt: timestamppb.Now(),
			}}}); err != nil {
				return err
			}
			if (st != cloudv1.CloudState_CLOUD_STATE_PENDING && (st != cloudv1.CloudState_CLOUD_STATE_RUNNING || ip != "")) || time.Now().After(deadline) {
				break
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	return nil
}

func (c *Cloud) tag(t *cloudv1.TagInstances) *cloudv1.InstancesTagged {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls["tag"]++
	out := &cloudv1.InstancesTagged{RequestId: t.GetRequestId(), Target: t.GetTarget(), CheckOnly: t.GetCheckOnly()}
	for _, r := range t.GetInstances() {
		res := &cloudv1.TagResult{Instance: r, State: cloudv1.CloudState_CLOUD_STATE_NOT_FOUND}
		out.Results = append(out.Results, res)
		vm, ok := c.vms[r.GetCloudId()]
		switch {
		case !ok || vm.State == cloudv1.CloudState_CLOUD_STATE_NOT_FOUND:
			res.Error = &cloudv1.CloudError{Kind: cloudv1.ErrorKind_ERROR_KIND_NOT_FOUND, Code: "InstanceNotFound"}
			continue
		case vm.Cluster != "" && vm.Cluster != t.GetClusterId():
			res.Error = &cloudv1.CloudError{Kind: cloudv1.ErrorKind_ERROR_KIND_INVALID_PARAMETERS, Code: "InstanceNotInCluster"}
		case !t.GetCheckOnly():
			vm.Cluster, vm.Group, vm.InstanceID, vm.Tagged = t.GetClusterId(), r.GetGroup(), r.GetInstanceId(), true
		}
		res.State, res.PrivateIp = vm.State, vm.IP
	}
	return out
}

// mayTerminate is the cloud adapter's rule: a VM tagged with the command's
// cluster, or an adopted instance's VM without any cluster tag.
func mayTerminate(vm *VM, cluster string, adopted bool) bool {
	return cluster != "" && (vm.Cluster == cluster || (vm.Cluster == "" && adopted))
}

// create returns the VMs of the request's token, creating them the first
// time (idempotent per ClientToken, as RunInstances is).
func (c *Cloud) create(cr *cloudv1.CreateInstances) []*cloudv1.InstanceRef {
	c.mu.Lock()
	defer c.mu.Unlock()
	ids := c.byToken[cr.GetClientToken()]
	for len(ids) < len(cr.GetInstances()) {
		c.next++
		r := cr.GetInstances()[len(ids)]
		vm := &VM{
			CloudID:    fmt.Sprintf("ins-%06d", c.next),
			InstanceID: r.GetInstanceId(),
			Group:      cr.GetGroup(),
			Token:      cr.GetClientToken(),
			Batch:      cr.GetBatchId(),
			Tagged:     len(cr.GetInstances()) == 1,
			Cluster:    cr.GetClusterId(),
			IP:         fmt.Sprintf("10.0.%d.%d", c.next/250, c.next%250+1),
			State:      cloudv1.CloudState_CLOUD_STATE_RUNNING,
			CreatedAt:  time.Now(),
		}
		c.vms[vm.CloudID] = vm
		ids = append(ids, vm.CloudID)
	}
	c.byToken[cr.GetClientToken()] = ids
	out := make([]*cloudv1.InstanceRef, len(cr.GetInstances()))
	for i, r := range cr.GetInstances() {
		out[i] = &cloudv1.InstanceRef{InstanceId: r.GetInstanceId(), Attempt: r.GetAttempt(), CloudId: ids[i], Group: r.GetGroup()}
	}
	return out
}

func (c *Cloud) observe(cloudID string) (cloudv1.CloudState, string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	vm, ok := c.vms[cloudID]
	if !ok {
		return cloudv1.CloudState_CLOUD_STATE_NOT_FOUND, ""
	}
	st := vm.State
	if c.WatchState != nil {
		st = c.WatchState(*vm)
	}
	if st != cloudv1.CloudState_CLOUD_STATE_RUNNING || c.NoIP {
		return st, ""
	}
	return st, vm.IP
}

func (c *Cloud) sortedLocked() []*VM {
	out := make([]*VM, 0, len(c.vms))
	for _, vm := range c.vms {
		out = append(out, vm)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CloudID < out[j].CloudID })
	return out
}

// Set changes the cloud's behaviour under its lock.
func (c *Cloud) Set(f func(c *Cloud)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c)
}

// VMs returns a snapshot of every VM ever created.
func (c *Cloud) VMs() []VM {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []VM
	for _, vm := range c.sortedLocked() {
		out = append(out, *vm)
	}
	return out
}

// AddVM creates a VM directly (an orphan, or one made outside nodesmith).
func (c *Cloud) AddVM(vm VM) {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := vm
	c.vms[v.CloudID] = &v
}

// RemoveVM deletes a VM behind nodesmith's back.
func (c *Cloud) RemoveVM(cloudID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if vm, ok := c.vms[cloudID]; ok {
		vm.State = cloudv1.CloudState_CLOUD_STATE_NOT_FOUND
	}
}

// Running returns the VMs that exist (not terminated).
func (c *Cloud) Running() []VM {
	var out []VM
	for _, vm := range c.VMs() {
		if vm.State != cloudv1.CloudState_CLOUD_STATE_NOT_FOUND {
			out = append(out, vm)
		}
	}
	return out
}

// Calls returns how many commands of kind were handled.
func (c *Cloud) Calls(kind string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls[kind]
}

func (w *Workers) handleHook(ctx context.Context, msg jetstream.Msg) error {
	var r hookv1.RunHook
	if err := proto.Unmarshal(msg.Data(), &r); err != nil {
		return worker.Permanent(err)
	}
	h := w.Hooks
	h.mu.Lock()
	h.runs = append(h.runs, proto.Clone(&r).(*hookv1.RunHook))
	h.calls[r.GetHook().String()]++
	var res *hookv1.HookResult
	if h.Result != nil {
		res = h.Result(&r)
	}
	onSuccess := h.OnSuccess
	latency := h.Latency
	h.mu.Unlock()
	if err := sleep(ctx, latency); err != nil {
		return err
	}
	if res == nil {
		res = &hookv1.HookResult{Succeeded: true, ExitCode: 0, OutputTail: "ok"}
	}
	res.InstanceId, res.Attempt, res.Hook = r.GetInstanceId(), r.GetAttempt(), r.GetHook()
	if res.GetSucceeded() && onSuccess != nil {
		onSuccess(&r)
	}
	return w.publish(ctx, messaging.SubjectHookResult, res)
}

// Set changes the hook runner's behaviour under its lock.
func (h *Hooks) Set(f func(h *Hooks)) {
	h.mu.Lock()
	defer h.mu.Unlock()
	f(h)
}

// Runs returns every hook command received.
func (h *Hooks) Runs() []*hookv1.RunHook {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*hookv1.RunHook(nil), h.runs...)
}

func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
