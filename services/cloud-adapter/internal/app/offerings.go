package app

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// createOnOfferings is Create for a command with offerings. Each chunk of
// the batch (domain.SplitBatch) is created on the command's offerings in
// their order: an offering with a live mark is skipped, the offering is
// written into the parameters (cloudspec Provider.ApplyOffering), and the
// call's ClientToken is derived from the chunk's and the offering
// (domain.OfferingToken), so a redelivered command gets the same VMs back
// from the same offering. An offering that answers out of capacity is
// marked unavailable for every replica (a failed mark write returns an
// error: the command is redelivered rather than moving on unmarked) and
// the chunk moves on to the next offering. Each chunk created publishes
// one InstancesCreated naming its offering; a chunk that finds every
// offering out of capacity publishes CreateFailed (capacity) for itself
// and every later chunk, as any definitive failure does. The created VMs
// are then watched, and one that fails to launch for capacity is created
// again on another offering (relaunch).
//
// A redelivered command does not skip marked offerings: a mark may have
// been put after an earlier delivery created a chunk on that offering
// (by this batch's own relaunch, or another command's stock-out), and
// only asking that offering again with the same token returns those VMs
// instead of creating a second set elsewhere.
func (s *Service) createOnOfferings(ctx context.Context, log *slog.Logger, c *domain.CreateInstances, d Delivery,
	cloud ports.Cloud, target ports.Target, params string,
) error {
	attempt := batchAttempt(c.Instances)
	spec, ok := cloudspec.Lookup(c.Target.Provider)
	if !ok {
		err := ports.NewInvalidParametersError("OfferingsUnsupported",
			fmt.Sprintf("provider %q cannot place VMs on offerings", c.Target.Provider))
		return s.createFailed(ctx, log, c, c.Instances, err, createFailedID(c.BatchID, attempt, 0, 1))
	}
	o := &offerer{s: s, log: log, c: c, d: d, cloud: cloud, target: target, spec: spec, params: params}
	chunks := domain.SplitBatch(c.ClientToken, len(c.Instances), ports.MaxBatch)
	rl := &relaunches{o: o, attempt: attempt, placed: map[string]*placement{}}
	var watched []domain.InstanceRef
	for _, ch := range chunks {
		refs := c.Instances[ch.Start:ch.End]
		instanceTag := ""
		if ch.Len() == 1 {
			instanceTag = refs[0].InstanceID
		}
		res, err := o.place(ctx, ch.Len(), domain.CreationTags(c.ClusterID, c.Group, c.BatchID, instanceTag),
			func(of domain.Offering) string { return domain.OfferingToken(ch.Token, of, "") }, nil, d.Attempt > 1)
		if err != nil {
			return fmt.Errorf("creating batch %s chunk %d/%d: %w", c.BatchID, ch.Index+1, len(chunks), err)
		}
		if res.k < 0 {
			if !reportable(res.err, d) {
				return fmt.Errorf("creating batch %s chunk %d/%d: %w", c.BatchID, ch.Index+1, len(chunks), res.err)
			}
			rest := c.Instances[ch.Start:]
			if err := s.createFailed(ctx, log, c, rest, res.err, createFailedID(c.BatchID, attempt, ch.Index, len(chunks))); err != nil {
				return err
			}
			break
		}
		of := c.Offerings[res.k]
		created := make([]domain.InstanceRef, len(refs))
		for i, r := range refs {
			r.CloudID = res.ids[i]
			if r.Group == "" {
				r.Group = c.Group
			}
			created[i] = r
			tried := make([]bool, len(c.Offerings))
			tried[res.k] = true
			rl.placed[r.CloudID] = &placement{chunkToken: ch.Token, k: res.k, tried: tried}
		}
		ev := &domain.InstancesCreated{BatchID: c.BatchID, Instances: created, Offering: &of}
		if err := s.events.Publish(ctx, createdOnID(c.BatchID, attempt, ch.Index, len(chunks), res.k), ev); err != nil {
			return fmt.Errorf("publishing created instances of batch %s: %w", c.BatchID, err)
		}
		for _, r := range created {
			log.Info("instance created", "instance", r.InstanceID, "cloud_id", r.CloudID, "zone", of.Zone, "instance_type", of.InstanceType)
		}
		watched = append(watched, created...)
	}
	if len(watched) == 0 {
		return nil
	}
	return s.watch(ctx, log, cloud, target, watched, rl)
}

// offerer creates VMs of one create command on its offerings.
type offerer struct {
	s      *Service
	log    *slog.Logger
	c      *domain.CreateInstances
	d      Delivery
	cloud  ports.Cloud
	target ports.Target
	spec   cloudspec.Provider
	// params are the command's parameters, secrets merged in.
	params string
}

// placed is where place created VMs: k is the index of the offering in
// the command (-1: none, err says why).
type placed struct {
	k   int
	ids []string
	err error
}

// place creates count VMs on the first offering (in command order) that
// is not skipped (skip(k), a live mark unless ignoreMarks) and does not
// answer out of capacity; token gives each offering's ClientToken. It
// returns placed.k < 0 with the error to report when no offering created
// them: a capacity error once every offering is exhausted, else the
// cloud's failure (retryable or not, for the caller to judge). Its error
// means the command must be redelivered (a mark not stored, ctx ended).
func (o *offerer) place(ctx context.Context, count int, tags []domain.Tag, token func(domain.Offering) string,
	skip func(k int) bool, ignoreMarks bool,
) (placed, error) {
	c, s := o.c, o.s
	relaunch := skip != nil
	var unavailable []string
	for k, of := range c.Offerings {
		if skip != nil && skip(k) {
			continue
		}
		if !ignoreMarks {
			if mk, ok := o.liveMark(of); ok {
				o.log.Debug("skipping an offering marked unavailable", "zone", of.Zone, "instance_type", of.InstanceType,
					"capacity_type", of.CapacityType, "until", mk.Until)
				code := ""
				if mk.Reason != nil {
					code = " " + mk.Reason.Code
				}
				unavailable = append(unavailable, describeOffering(of)+code+" (marked until "+mk.Until.UTC().Format(time.TimeOnly)+")")
				continue
			}
		}
		p, ferrs := o.spec.ApplyOffering(o.params, c.MaxPrice, cloudspec.Offering{
			Zone: of.Zone, SubnetID: of.SubnetID, InstanceType: of.InstanceType, CapacityType: of.CapacityType,
		})
		if ferrs != nil {
			msgs := make([]string, len(ferrs))
			for i, e := range ferrs {
				msgs[i] = e.Error()
			}
			return placed{k: -1, err: ports.NewInvalidParametersError("InvalidOffering",
				fmt.Sprintf("offering %s: %s", describeOffering(of), strings.Join(msgs, "; ")))}, nil
		}
		ids, err := o.cloud.CreateBatch(ctx, ports.CreateRequest{
			Target: o.target, ClientToken: token(of), Template: c.TemplateName, Parameters: p, Count: count, Tags: tags,
		})
		if err == nil && len(ids) != count {
			err = ports.NewTransientError("UnexpectedInstanceCount",
				fmt.Sprintf("asked for %d instances, cloud returned %d ids", count, len(ids)))
		}
		if err == nil {
			if len(unavailable) > 0 || relaunch {
				s.o.Metrics.OfferingFallback(c.Target.Provider, relaunch)
				o.log.Info("offering fallback: created on a later offering", "zone", of.Zone, "instance_type", of.InstanceType,
					"capacity_type", of.CapacityType, "count", count, "unavailable", strings.Join(unavailable, ", "))
			}
			return placed{k: k, ids: ids}, nil
		}
		if ctx.Err() != nil {
			return placed{}, ctx.Err()
		}
		if !ports.IsCapacityError(err) {
			return placed{k: -1, err: err}, nil
		}
		ce, _ := ports.AsCloudError(err)
		if err := o.mark(ctx, of, eventError(err)); err != nil {
			return placed{}, err
		}
		o.log.Info("offering out of capacity, trying the next one", "zone", of.Zone, "instance_type", of.InstanceType,
			"capacity_type", of.CapacityType, "code", ce.Code, "count", count)
		unavailable = append(unavailable, describeOffering(of)+" "+ce.Code)
	}
	s.o.Metrics.OfferingsExhausted(c.Target.Provider, relaunch)
	msg := "every offering is out of capacity: " + strings.Join(unavailable, ", ")
	if len(unavailable) == 0 {
		msg = "no offering left to try"
	}
	o.log.Warn("offerings exhausted", "count", count, "offerings", strings.Join(unavailable, ", "))
	return placed{k: -1, err: ports.NewCapacityError("OfferingsExhausted", msg)}, nil
}

// liveMark returns offering of's mark if it still holds.
func (o *offerer) liveMark(of domain.Offering) (domain.OfferingMark, bool) {
	if o.s.o.Marks == nil {
		return domain.OfferingMark{}, false
	}
	mk, ok := o.s.o.Marks.Unavailable(o.c.Target, of)
	if !ok || !mk.Live(o.s.o.Now()) {
		return domain.OfferingMark{}, false
	}
	return mk, true
}

// mark marks offering of unavailable for OfferingUnavailableTTL.
func (o *offerer) mark(ctx context.Context, of domain.Offering, reason *domain.CloudError) error {
	s := o.s
	s.o.Metrics.OfferingMarked(o.c.Target.Provider, of)
	if s.o.Marks == nil {
		return nil
	}
	now := s.o.Now()
	m := domain.OfferingMark{Target: o.c.Target, Offering: of, At: now, Until: now.Add(s.o.OfferingUnavailableTTL), Reason: reason}
	if err := s.o.Marks.Mark(ctx, m); err != nil {
		return fmt.Errorf("marking offering %s unavailable: %w", describeOffering(of), err)
	}
	return nil
}

func describeOffering(o domain.Offering) string {
	return o.Zone + "/" + o.InstanceType + "/" + o.CapacityType
}

// relaunches is what a create's watch needs to create again, on another
// offering, a VM that failed to launch for capacity.
type relaunches struct {
	o       *offerer
	attempt uint32
	// placed is where each watched VM was created, by cloud id.
	placed map[string]*placement
	// failed are the VMs relaunched elsewhere, terminated when the watch
	// ends (terminateFailed).
	failed []string
}

// placement is where one VM was created: the token of its chunk, its
// offering, and the offerings its instance was created on so far (each at
// most once: that bounds the relaunches).
type placement struct {
	chunkToken string
	k          int
	tried      []bool
	// relaunched VMs' observations carry the offering in their message
	// ids: the instance's first VM may have published the same states.
	relaunched bool
}

// relaunch handles a VM of ref that the watch saw LAUNCH_FAILED for
// capacity (st): it marks the VM's offering, creates one VM for the
// instance on the next offering available (ClientToken derived from the
// chunk's, the offering and the instance), publishes InstancesCreated for
// that instance with the new cloud id and offering, and queues the failed
// VM for termination when the watch ends (terminateFailed). It returns
// the new ref to watch, or ok false when the failure is to be reported as
// it is (no offering left, a definitive cloud failure, a VM not tagged as
// this cluster's). Terminating last keeps every step repeatable: until
// the failed VM is terminated, a redelivered command sees it
// LAUNCH_FAILED again and repeats the same steps, getting the same new VM
// back from its token and watching it.
func (rl *relaunches) relaunch(ctx context.Context, log *slog.Logger, ref domain.InstanceRef, st domain.Status) (domain.InstanceRef, bool, error) {
	o, s := rl.o, rl.o.s
	p := rl.placed[ref.CloudID]
	if p == nil || st.LaunchError == nil || st.LaunchError.Kind != ports.ErrorKindCapacity {
		return domain.InstanceRef{}, false, nil
	}
	c := o.c
	failed := c.Offerings[p.k]
	le := st.LaunchError
	if err := o.mark(ctx, failed, &domain.CloudError{Kind: le.Kind, Code: le.Code, Message: le.Message}); err != nil {
		return domain.InstanceRef{}, false, err
	}
	log = log.With("instance", ref.InstanceID, "cloud_id", ref.CloudID)
	if ok, why := domain.MayTerminate(st.Tags, c.ClusterID, false); !ok {
		log.Warn("not relaunching a VM that failed to launch: it is not this cluster's", "reason", why)
		return domain.InstanceRef{}, false, nil
	}
	log.Info("VM failed to launch for capacity, relaunching on another offering", "zone", failed.Zone,
		"instance_type", failed.InstanceType, "capacity_type", failed.CapacityType, "code", le.Code)
	res, err := o.place(ctx, 1, domain.CreationTags(c.ClusterID, c.Group, c.BatchID, ref.InstanceID),
		func(of domain.Offering) string { return domain.OfferingToken(p.chunkToken, of, ref.InstanceID) },
		func(k int) bool { return p.tried[k] }, o.d.Attempt > 1)
	if err != nil {
		return domain.InstanceRef{}, false, err
	}
	if res.k < 0 {
		if ports.IsRetryable(res.err) && !o.d.Last {
			return domain.InstanceRef{}, false, fmt.Errorf("relaunching instance %s: %w", ref.InstanceID, res.err)
		}
		log.Warn("cannot relaunch the VM elsewhere: reporting its launch failure", "zone", failed.Zone,
			"instance_type", failed.InstanceType, "code", le.Code, "err", res.err)
		return domain.InstanceRef{}, false, nil
	}
	of := c.Offerings[res.k]
	p.tried[res.k] = true
	next := ref
	next.CloudID = res.ids[0]
	ev := &domain.InstancesCreated{BatchID: c.BatchID, Instances: []domain.InstanceRef{next}, Offering: &of}
	if err := s.events.Publish(ctx, relaunchedID(c.BatchID, rl.attempt, ref.InstanceID, res.k), ev); err != nil {
		return domain.InstanceRef{}, false, fmt.Errorf("publishing relaunched instance %s: %w", ref.InstanceID, err)
	}
	rl.placed[next.CloudID] = &placement{chunkToken: p.chunkToken, k: res.k, tried: p.tried, relaunched: true}
	rl.failed = append(rl.failed, ref.CloudID)
	log.Info("instance relaunched", "new_cloud_id", next.CloudID, "zone", of.Zone, "instance_type", of.InstanceType,
		"capacity_type", of.CapacityType)
	return next, true, nil
}

// terminateFailed terminates the VMs relaunched elsewhere, once the watch
// ended (every VM settled, or it gave up): until then a redelivered
// command (a watch handed back at shutdown, a failed publish) finds them
// LAUNCH_FAILED again, relaunches them again with the same tokens, and so
// gets back, and watches, the same new VMs. An error means some were not
// terminated: the command is redelivered and does it again.
func (rl *relaunches) terminateFailed(ctx context.Context, log *slog.Logger) error {
	if rl == nil {
		return nil
	}
	for start := 0; start < len(rl.failed); start += ports.MaxBatch {
		ids := rl.failed[start:min(start+ports.MaxBatch, len(rl.failed))]
		if err := rl.o.cloud.Terminate(ctx, rl.o.target, ids); err != nil {
			return fmt.Errorf("terminating %d VMs that failed to launch and were relaunched elsewhere: %w", len(ids), err)
		}
		log.Info("terminated VMs that failed to launch and were relaunched elsewhere", "cloud_ids", ids)
	}
	rl.failed = nil
	return nil
}

// observedSuffix is what a VM's observation ids carry after the instance's
// (see placement.relaunched).
func (rl *relaunches) observedSuffix(cloudID string) string {
	if rl == nil {
		return ""
	}
	if p := rl.placed[cloudID]; p != nil && p.relaunched {
		return ".o" + strconv.Itoa(p.k)
	}
	return ""
}
