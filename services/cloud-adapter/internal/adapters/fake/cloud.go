// Package fake provides in-memory implementations of the cloud adapter's
// ports for unit tests: a Cloud with programmable next errors, recorded
// calls and Reset, and an Events publisher that deduplicates message ids
// the way JetStream does.
package fake

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

var (
	_ ports.Cloud          = (*Cloud)(nil)
	_ ports.InstanceShapes = (*Cloud)(nil)
)

// Op names a Cloud method, to program its next errors.
type Op string

// The Cloud methods.
const (
	OpCreate    Op = "CreateBatch"
	OpDescribe  Op = "Describe"
	OpTerminate Op = "Terminate"
	OpList      Op = "ListByTag"
	OpTag       Op = "Tag"
	OpShapes    Op = "InstanceShapes"
)

// VM is one fake VM.
type VM struct {
	domain.Status
	Target ports.Target
	// bootIn counts the Describe rounds left before a PENDING VM runs.
	bootIn int
	// fails, if set, is the launch error the VM ends LAUNCH_FAILED with
	// instead of booting.
	fails *domain.LaunchError
}

// Calls are the calls a Cloud received, in order.
type Calls struct {
	Create    []ports.CreateRequest
	Describe  [][]string
	Terminate [][]string
	List      []string
	Tag       [][]string
}

// Cloud is an in-memory ports.Cloud. It honours ClientTokens like a real
// cloud (the same token returns the same VMs), boots VMs after BootAfter
// Describe rounds and treats terminating an unknown VM as success. The
// zero value is not usable; call NewCloud.
type Cloud struct {
	mu sync.Mutex
	// BootAfter is how many Describe rounds a new VM stays PENDING.
	BootAfter int
	// Zone is reported for every VM.
	Zone string
	// CreateDelay is how long CreateBatch takes after the VMs exist; a
	// call cancelled meanwhile returns the context's error although its
	// VMs were created, like a cloud answer lost on the way back.
	CreateDelay time.Duration
	vms         map[string]*VM
	tokens      map[string][]string
	next        map[Op][]error
	always      map[Op]error
	calls       Calls
	seq         int
	now         func() time.Time
	// shapes are the instance types per zone (SetShapes); launchFailure,
	// if set, is the launch error of every VM created from now on.
	shapes        []domain.InstanceShape
	launchFailure *domain.LaunchError
	// soldOut and failLaunchIn answer per (zone, instance type) of the
	// create parameters (SoldOut, FailLaunchesIn).
	soldOut      map[Place]error
	failLaunchIn map[Place]*domain.LaunchError
}

// Place is a zone and an instance type, as create parameters name them
// (Tencent's Placement.Zone, Alibaba's ZoneId; InstanceType).
type Place struct{ Zone, InstanceType string }

// PlaceOf reads the zone and instance type out of create parameters.
func PlaceOf(params string) Place {
	var p struct {
		Placement struct {
			Zone string
		}
		ZoneID       string `json:"ZoneId"`
		InstanceType string
	}
	_ = json.Unmarshal([]byte(params), &p)
	z := p.Placement.Zone
	if z == "" {
		z = p.ZoneID
	}
	return Place{Zone: z, InstanceType: p.InstanceType}
}

// SoldOut makes every create whose parameters name this zone and
// instance type fail with err (a capacity error, typically) until
// SoldOut(zone, instanceType, nil), after the errors FailNext queued.
func (c *Cloud) SoldOut(zone, instanceType string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		delete(c.soldOut, Place{zone, instanceType})
		return
	}
	c.soldOut[Place{zone, instanceType}] = err
}

// FailLaunchesIn makes the VMs created from now on in this zone and
// instance type end LAUNCH_FAILED with le when they would boot (nil: they
// boot again).
func (c *Cloud) FailLaunchesIn(zone, instanceType string, le *domain.LaunchError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if le == nil {
		delete(c.failLaunchIn, Place{zone, instanceType})
		return
	}
	c.failLaunchIn[Place{zone, instanceType}] = le
}

// NewCloud returns an empty fake cloud.
func NewCloud() *Cloud {
	c := &Cloud{now: time.Now}
	c.Reset()
	return c
}

// Reset forgets every VM, token, programmed error and recorded call.
func (c *Cloud) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.BootAfter = 1
	c.Zone = "fake-zone-1"
	c.CreateDelay = 0
	c.vms = map[string]*VM{}
	c.tokens = map[string][]string{}
	c.next = map[Op][]error{}
	c.always = map[Op]error{}
	c.calls = Calls{}
	c.seq = 0
	c.shapes = nil
	c.launchFailure = nil
	c.soldOut = map[Place]error{}
	c.failLaunchIn = map[Place]*domain.LaunchError{}
}

// SetShapes sets the instance types per zone InstanceShapes answers from.
func (c *Cloud) SetShapes(s ...domain.InstanceShape) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.shapes = slices.Clone(s)
}

// FailLaunches makes every VM created from now on end LAUNCH_FAILED with
// le when it would boot (nil: they boot again), as a cloud that accepted
// a launch and then found no stock does.
func (c *Cloud) FailLaunches(le *domain.LaunchError) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.launchFailure = le
}

// InstanceShapes implements ports.InstanceShapes from SetShapes.
func (c *Cloud) InstanceShapes(ctx context.Context, _ ports.Target, zones, types []string) ([]domain.InstanceShape, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ports.CheckShapeQuery(zones, types); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err := c.popErr(OpShapes); err != nil {
		return nil, err
	}
	var out []domain.InstanceShape
	for _, s := range c.shapes {
		if slices.Contains(zones, s.Zone) && slices.Contains(types, s.InstanceType) {
			out = append(out, s)
		}
	}
	return out, nil
}

// FailNext makes the next len(errs) calls of op return errs in order (a nil
// entry lets that call through).
func (c *Cloud) FailNext(op Op, errs ...error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.next[op] = append(c.next[op], errs...)
}

// Calls returns a copy of the calls received so far.
func (c *Cloud) Calls() Calls {
	c.mu.Lock()
	defer c.mu.Unlock()
	return Calls{
		Create:    slices.Clone(c.calls.Create),
		Describe:  slices.Clone(c.calls.Describe),
		Terminate: slices.Clone(c.calls.Terminate),
		List:      slices.Clone(c.calls.List),
		Tag:       slices.Clone(c.calls.Tag),
	}
}

// VMs returns a copy of every VM, in creation order.
func (c *Cloud) VMs() []VM {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]VM, 0, len(c.vms))
	for _, v := range c.vms {
		cp := *v
		cp.Tags = maps.Clone(v.Tags)
		out = append(out, cp)
	}
	slices.SortFunc(out, func(a, b VM) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out
}

// SetState forces a VM's state and private IP.
func (c *Cloud) SetState(id string, s domain.State, ip string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.vms[id]; ok {
		v.State, v.PrivateIP, v.bootIn = s, ip, 0
	}
}

// SetTags replaces a VM's tags, as someone editing them in the console
// would (nil removes them all).
func (c *Cloud) SetTags(id string, tags map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if v, ok := c.vms[id]; ok {
		v.Tags = maps.Clone(tags)
		if v.Tags == nil {
			v.Tags = map[string]string{}
		}
	}
}

// Add makes a RUNNING VM with these tags in target, as something other
// than nodesmith (the prototype, a console) would have created it.
func (c *Cloud) Add(t ports.Target, id, ip string, tags map[string]string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seq++
	c.vms[id] = &VM{
		Status: domain.Status{CloudID: id, State: domain.StateRunning, PrivateIP: ip, Zone: c.Zone,
			CreatedAt: c.now().Add(time.Duration(c.seq)), Tags: maps.Clone(tags)},
		Target: t,
	}
	if c.vms[id].Tags == nil {
		c.vms[id].Tags = map[string]string{}
	}
}

// Remove makes a VM vanish, as if deleted behind our back.
func (c *Cloud) Remove(id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.vms, id)
}

// FailAlways makes every call of op return err until FailAlways(op, nil),
// after the errors FailNext queued (a cloud throttling an account for a
// while, a zone out of stock).
func (c *Cloud) FailAlways(op Op, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if err == nil {
		delete(c.always, op)
		return
	}
	c.always[op] = err
}

func (c *Cloud) popErr(op Op) error {
	q := c.next[op]
	if len(q) == 0 && c.always[op] != nil {
		return c.always[op]
	}
	if len(q) == 0 {
		return nil
	}
	c.next[op] = q[1:]
	return q[0]
}

// CreateBatch implements ports.Cloud.
func (c *Cloud) CreateBatch(ctx context.Context, req ports.CreateRequest) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls.Create = append(c.calls.Create, req)
	if err := c.popErr(OpCreate); err != nil {
		return nil, err
	}
	if req.Count < 1 || req.Count > ports.MaxBatch {
		return nil, ports.NewInvalidParametersError("InvalidCount", fmt.Sprintf("count %d out of range", req.Count))
	}
	if req.ClientToken == "" {
		// As the real adapters: a create without a token could duplicate VMs.
		return nil, ports.NewInvalidParametersError("MissingClientToken", "CreateBatch without a ClientToken")
	}
	if ids, ok := c.tokens[req.ClientToken]; ok {
		return c.answerLater(ctx, slices.Clone(ids))
	}
	place := PlaceOf(req.Parameters)
	if err := c.soldOut[place]; err != nil && place.Zone != "" {
		return nil, err
	}
	zone, fails := c.Zone, c.launchFailure
	if place.Zone != "" {
		zone = place.Zone
	}
	if le := c.failLaunchIn[place]; le != nil {
		fails = le
	}
	tags := map[string]string{}
	for _, t := range req.Tags {
		tags[t.Key] = t.Value
	}
	ids := make([]string, req.Count)
	for i := range ids {
		c.seq++
		ids[i] = fmt.Sprintf("ins-fake%05d", c.seq)
		c.vms[ids[i]] = &VM{
			Status: domain.Status{
				CloudID: ids[i], State: domain.StatePending, Zone: zone,
				CreatedAt: c.now().Add(time.Duration(c.seq)), Tags: maps.Clone(tags),
			},
			Target: req.Target,
			bootIn: c.BootAfter,
			fails:  fails,
		}
	}
	c.tokens[req.ClientToken] = ids
	return c.answerLater(ctx, slices.Clone(ids))
}

// answerLater returns ids after CreateDelay, without holding the lock.
func (c *Cloud) answerLater(ctx context.Context, ids []string) ([]string, error) {
	d := c.CreateDelay
	if d <= 0 {
		return ids, nil
	}
	c.mu.Unlock()
	defer c.mu.Lock()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return ids, nil
	}
}

// Describe implements ports.Cloud. Each call is one "round": PENDING VMs
// among ids move one step towards RUNNING.
func (c *Cloud) Describe(ctx context.Context, t ports.Target, ids []string) ([]domain.Status, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls.Describe = append(c.calls.Describe, slices.Clone(ids))
	if err := c.popErr(OpDescribe); err != nil {
		return nil, err
	}
	if len(ids) > ports.MaxBatch {
		return nil, ports.NewInvalidParametersError("TooManyIds", fmt.Sprintf("%d ids", len(ids)))
	}
	var out []domain.Status
	for _, id := range ids {
		v, ok := c.vms[id]
		if !ok || v.Target != t {
			continue // VMs of another account or region are not seen
		}
		if v.State == domain.StatePending {
			switch {
			case v.bootIn <= 0 && v.fails != nil:
				le := *v.fails
				v.State, v.LaunchError = domain.StateLaunchFailed, &le
			case v.bootIn <= 0:
				v.State = domain.StateRunning
				v.PrivateIP = fmt.Sprintf("10.0.%d.%d", c.seqOf(id)/250, c.seqOf(id)%250+1)
			}
			v.bootIn--
		}
		st := v.Status
		st.Tags = maps.Clone(v.Tags)
		out = append(out, st)
	}
	return out, nil
}

func (c *Cloud) seqOf(id string) int {
	var n int
	_, _ = fmt.Sscanf(id, "ins-fake%05d", &n)
	return n
}

// Terminate implements ports.Cloud. Unknown VMs count as terminated.
func (c *Cloud) Terminate(ctx context.Context, t ports.Target, ids []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls.Terminate = append(c.calls.Terminate, slices.Clone(ids))
	if err := c.popErr(OpTerminate); err != nil {
		return err
	}
	if len(ids) > ports.MaxBatch {
		return ports.NewInvalidParametersError("TooManyIds", fmt.Sprintf("%d ids", len(ids)))
	}
	for _, id := range ids {
		if v, ok := c.vms[id]; ok && v.Target == t {
			v.State = domain.StateTerminating
		}
	}
	return nil
}

// ListByTag implements ports.Cloud.
func (c *Cloud) ListByTag(ctx context.Context, t ports.Target, clusterID string) ([]domain.Status, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls.List = append(c.calls.List, clusterID)
	if err := c.popErr(OpList); err != nil {
		return nil, err
	}
	var out []domain.Status
	for _, v := range c.vms {
		if v.Tags[domain.TagCluster] == clusterID && v.Target == t {
			st := v.Status
			st.Tags = maps.Clone(v.Tags)
			out = append(out, st)
		}
	}
	slices.SortFunc(out, func(a, b domain.Status) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// Tag implements ports.Cloud: a VM that does not exist in t is a not-found
// error, and then no VM is tagged.
func (c *Cloud) Tag(ctx context.Context, t ports.Target, ids []string, tags []domain.Tag) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls.Tag = append(c.calls.Tag, slices.Clone(ids))
	if err := c.popErr(OpTag); err != nil {
		return err
	}
	if len(ids) > ports.MaxBatch {
		return ports.NewInvalidParametersError("TooManyIds", fmt.Sprintf("%d ids", len(ids)))
	}
	for _, id := range ids {
		if v, ok := c.vms[id]; !ok || v.Target != t {
			return ports.NewCloudError(ports.ErrorKindNotFound, "ResourceNotFound", "no VM "+id)
		}
	}
	for _, id := range ids {
		for _, tag := range tags {
			c.vms[id].Tags[tag.Key] = tag.Value
		}
	}
	return nil
}
