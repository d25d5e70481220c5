package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// The state-loss fault runs after the other invariants are checked, on
// the settled fleet: the instances bucket is deleted under it and both
// lifecycle replicas are restarted (kill -9), so the new leader starts
// from an empty, recreated bucket while the cloud still runs every VM.
// Invariants: the gateway stops serving the lost records; the
// reconciler terminates none of the old VMs while its start-up hold
// lasts (it reports them: the stored hold and GET /api/v1/status list
// them); after an operator's release through the admin API every old VM
// is terminated (a few per pass) and every group is back at its target
// (its instances Running or reported failed to CA).

// stateLoss is what the fault measured.
type stateLoss struct {
	skipped string
	// old is how many VMs ran when the state was lost.
	old int
	// gatewayNoticed: from the deletion until CA no longer sees the lost
	// records; heldReported: until the stored hold lists every old VM;
	// recovered: until every group is back at its target (new VMs);
	// release: how long the hold was observed before the release;
	// terminated: from the release until no old VM is left.
	gatewayNoticed, heldReported, recovered, observed, terminated time.Duration
	// terminatedDuringHold counts old VMs gone before the release (must
	// be 0); leftAfterRelease old VMs still running at the end (must be 0).
	terminatedDuringHold, leftAfterRelease int
	// statusWaiting is how many held VMs GET /api/v1/status listed.
	statusWaiting int
	release       string
	// atRecovery and atEnd are CA's view of the groups when they were back
	// at target during the hold, and at the end.
	atRecovery, atEnd string
}

// adminToken is the gateway's REST admin token in the chaos run.
const adminToken = "chaos-admin-token-0123456789abcdef"

// holdObserve is how long the hold is watched once it reported every old
// VM: a few reconciler passes that must terminate none.
func (r *run) holdObserve() time.Duration { return 3 * r.cfg.reconcile }

// runStateLoss injects the fault and returns the violated invariants.
func (r *run) runStateLoss(ctx context.Context) ([]string, error) {
	var violations []string
	violate := func(format string, args ...any) { violations = append(violations, fmt.Sprintf(format, args...)) }
	sl := &r.faults.stateLoss

	oldVMs := map[string]bool{}
	oldPIDs := map[string]bool{}
	for _, vm := range r.w.Emulator.ListVMs() {
		if vm.State != cvmemu.StateTerminating {
			oldVMs[vm.ID] = true
			if vm.ProviderID != "" {
				oldPIDs[vm.ProviderID] = true
			}
		}
	}
	sl.old = len(oldVMs)
	if sl.old == 0 {
		sl.skipped = "no VM running"
		return nil, nil
	}
	alive := func() (n int) {
		for _, vm := range r.w.Emulator.ListVMs() {
			if oldVMs[vm.ID] && vm.State != cvmemu.StateTerminating {
				n++
			}
		}
		return n
	}
	targets, err := r.views(ctx)
	if err != nil {
		return nil, err
	}

	for _, s := range r.lifecycles {
		s.kill9()
	}
	lost := time.Now()
	if err := r.deleteInstancesBucket(ctx); err != nil {
		return nil, err
	}
	r.faults.event("state loss: kill -9 both lifecycles, delete the instances bucket (%d VMs running), restart them", sl.old)
	for _, s := range r.lifecycles {
		if err := s.restart(); err != nil {
			return nil, err
		}
	}
	// During the hold, an old VM gone is a VM the reconciler destroyed.
	duringHold := func() {
		if n := sl.old - alive(); n > sl.terminatedDuringHold {
			sl.terminatedDuringHold = n
		}
	}
	step := func(what string, limit time.Duration, cond func() (bool, error)) (time.Duration, error) {
		deadline := time.Now().Add(limit)
		for {
			duringHold()
			ok, err := cond()
			if err != nil {
				return 0, err
			}
			if ok {
				d := time.Since(lost)
				r.logf("state loss: %s after %s", what, d.Round(100*time.Millisecond))
				return d, nil
			}
			if time.Now().After(deadline) {
				return 0, fmt.Errorf("state loss: %s not reached within %s", what, limit)
			}
			for _, s := range r.all() {
				if err := s.supervise(r); err != nil {
					return 0, err
				}
			}
			if err := sleep(ctx, 500*time.Millisecond); err != nil {
				return 0, err
			}
		}
	}

	// The gateway stops serving the lost records.
	sl.gatewayNoticed, err = step("the gateway no longer serves the lost records", 2*time.Minute, func() (bool, error) {
		for _, g := range groupIDs {
			v, err := r.view(ctx, g)
			if err != nil {
				return false, nil //nolint:nilerr // not yet: asked again at the next poll
			}
			for _, in := range v.instances {
				if oldPIDs[in.GetId()] {
					return false, nil
				}
			}
		}
		return true, nil
	})
	if err != nil {
		violate("%v", err)
	}

	// The new leader holds every old VM back and says so.
	var hold messaging.OrphanHold
	sl.heldReported, err = step("the stored hold lists every old VM", 4*time.Minute, func() (bool, error) {
		h, ok, err := r.readHold(ctx)
		if err != nil || !ok {
			return false, err
		}
		hold = h
		return h.Active(time.Now()) && h.Held["empty_start"] == sl.old, nil
	})
	if err != nil {
		violate("%v (hold: %+v)", err, hold)
		return violations, nil
	}
	if st, err := r.restStatus(ctx); err != nil {
		violate("GET /api/v1/status: %v", err)
	} else {
		sl.statusWaiting, sl.release = len(st.Orphans.Waiting), st.Orphans.Release
		if !st.Orphans.Holding || len(st.Orphans.Waiting) != min(sl.old, 50) || st.Orphans.Release == "" {
			violate("GET /api/v1/status does not show the hold: %+v", st.Orphans)
		}
	}

	// The fleet comes back (new VMs) while the old ones are held.
	sl.recovered, err = step("every group back at its target with new VMs", r.cfg.settle, func() (bool, error) {
		for _, g := range groupIDs {
			v, err := r.view(ctx, g)
			if err != nil {
				return false, nil //nolint:nilerr // not yet: asked again at the next poll
			}
			if v.target != targets[g].target || len(v.instances) != v.target || v.other > 0 {
				return false, nil
			}
		}
		return true, nil
	})
	views, verr := r.views(ctx)
	if verr == nil {
		sl.atRecovery = describe(views)
	}
	if err != nil {
		violate("%v: %s", err, sl.atRecovery)
	}
	// A few more passes: still nothing terminated.
	heldSince := time.Now()
	for time.Since(heldSince) < r.holdObserve() {
		duringHold()
		if err := sleep(ctx, time.Second); err != nil {
			return nil, err
		}
	}
	duringHold()
	sl.observed = time.Since(lost)
	if sl.terminatedDuringHold > 0 {
		violate("%d of the %d VMs of the lost state were terminated during the start-up hold", sl.terminatedDuringHold, sl.old)
	}

	// The operator releases them through the admin API.
	if err := r.releaseOrphans(ctx); err != nil {
		return nil, err
	}
	released := time.Now()
	r.faults.event("state loss: released the %d held VMs (POST /api/v1/reconciler/release-orphans)", sl.old)
	limit := time.Duration(sl.old/10+3)*2*r.cfg.reconcile + time.Minute
	for alive() > 0 && time.Since(released) < limit {
		for _, s := range r.all() {
			if err := s.supervise(r); err != nil {
				return nil, err
			}
		}
		if err := sleep(ctx, time.Second); err != nil {
			return nil, err
		}
	}
	sl.terminated = time.Since(released)
	sl.leftAfterRelease = alive()
	r.logf("state loss: %d of %d old VMs left %s after the release", sl.leftAfterRelease, sl.old, sl.terminated.Round(100*time.Millisecond))
	if sl.leftAfterRelease > 0 {
		violate("%d of the %d released VMs still run %s after the release", sl.leftAfterRelease, sl.old, limit)
	}
	views, err = r.views(ctx)
	if err != nil {
		return nil, err
	}
	sl.atEnd = describe(views)
	for _, g := range groupIDs {
		if v := views[g]; v.target != targets[g].target || len(v.instances) != v.target || v.other > 0 {
			violate("after the release, group %s: target %d, %d instances (%d running, %d failed, %d in progress); want target %d",
				g, v.target, len(v.instances), v.running, v.failed, v.other, targets[g].target)
		}
	}
	if h, ok, err := r.readHold(ctx); err != nil || !ok || h.ReleasedAt.IsZero() || h.Active(time.Now()) {
		violate("the stored hold after the release: %+v, %v, %v", h, ok, err)
	}
	return violations, nil
}

// readHold reads lifecycle's stored orphan hold.
func (r *run) readHold(ctx context.Context) (messaging.OrphanHold, bool, error) {
	kv, err := r.js.KeyValue(ctx, messaging.BucketGroups)
	if err != nil {
		return messaging.OrphanHold{}, false, err
	}
	e, err := kv.Get(ctx, messaging.KeyOrphanHold)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return messaging.OrphanHold{}, false, nil
	}
	if err != nil {
		return messaging.OrphanHold{}, false, err
	}
	h, err := messaging.UnmarshalOrphanHold(e.Value())
	return h, err == nil, err
}

type restStatus struct {
	Orphans struct {
		Holding bool     `json:"holding"`
		Waiting []string `json:"waiting"`
		Release string   `json:"release"`
	} `json:"orphans"`
}

func (r *run) rest(ctx context.Context, method, path string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+r.restAddr+path, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return b, fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	return b, nil
}

func (r *run) restStatus(ctx context.Context) (restStatus, error) {
	var st restStatus
	b, err := r.rest(ctx, "GET", "/api/v1/status")
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(b, &st)
}

// releaseOrphans is the operator's release, retried while lifecycle is
// briefly unavailable.
func (r *run) releaseOrphans(ctx context.Context) error {
	var err error
	for range 30 {
		if _, err = r.rest(ctx, "POST", "/api/v1/reconciler/release-orphans"); err == nil {
			return nil
		}
		if serr := sleep(ctx, time.Second); serr != nil {
			return serr
		}
	}
	return fmt.Errorf("releasing the held orphans: %w", err)
}

// printStateLoss reports the fault's numbers.
func (f *faults) printStateLoss(w io.Writer) {
	sl := f.stateLoss
	fmt.Fprintln(w, "\nstate loss (instances bucket deleted, both lifecycles restarted):")
	if sl.skipped != "" {
		fmt.Fprintln(w, "  skipped: "+sl.skipped)
		return
	}
	s := func(d time.Duration) string { return d.Round(100 * time.Millisecond).String() }
	fmt.Fprintf(w, "  %d VMs running when the state was lost\n", sl.old)
	fmt.Fprintf(w, "  gateway stopped serving the lost records after %s\n", s(sl.gatewayNoticed))
	fmt.Fprintf(w, "  stored hold listed every old VM after %s (GET /api/v1/status listed %d, release: %s)\n", s(sl.heldReported), sl.statusWaiting, sl.release)
	fmt.Fprintf(w, "  every group back at its target with new VMs after %s: %s\n", s(sl.recovered), sl.atRecovery)
	fmt.Fprintf(w, "  held (observed) for %s: %d old VMs terminated by the reconciler during the hold\n", s(sl.observed), sl.terminatedDuringHold)
	fmt.Fprintf(w, "  after the release: %d old VMs left after %s; at the end: %s\n", sl.leftAfterRelease, s(sl.terminated), sl.atEnd)
}

// deleteInstancesBucket loses the state as only an operator's mistake can:
// as the harness's admin, since no service identity may delete a bucket.
func (r *run) deleteInstancesBucket(ctx context.Context) error {
	nc, err := r.w.ConnectNATSAdmin()
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if err := js.DeleteKeyValue(ctx, messaging.BucketInstances); err != nil {
		return fmt.Errorf("deleting the instances bucket: %w", err)
	}
	return nil
}
