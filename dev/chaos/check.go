package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/nodesmith/nodesmith/dev/bench/harness"
	"github.com/nodesmith/nodesmith/libs/providerid"
	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// live reports whether a record still counts toward its group.
func live(in *statev1.Instance) bool {
	s := in.GetState()
	return s >= statev1.InstanceState_INSTANCE_STATE_PENDING && s <= statev1.InstanceState_INSTANCE_STATE_RUNNING && !in.GetReleased()
}

// owns reports whether a record may own a VM: live, or still deleting it.
func owns(in *statev1.Instance) bool {
	return in.GetState() != statev1.InstanceState_INSTANCE_STATE_DELETED && in.GetCloudId() != ""
}

// check verifies the invariants, prints the fault table and returns the
// violations.
func (r *run) check(ctx context.Context) ([]string, error) {
	var violations []string
	violate := func(format string, args ...any) { violations = append(violations, fmt.Sprintf(format, args...)) }

	records, err := harness.ReadInstances(ctx, r.js)
	if err != nil {
		return nil, err
	}
	groups, err := harness.ReadGroups(ctx, r.js)
	if err != nil {
		return nil, err
	}
	final, err := r.views(ctx)
	if err != nil {
		return nil, err
	}
	stats := r.w.Emulator.Stats()
	vms := r.w.Emulator.ListVMs()

	// 1. Every requested instance Running or reported failed to CA (at the
	// end of the scale-up), and after the scale-down exactly the
	// expected instances, all Running.
	unaccounted := 0
	for _, g := range groupIDs {
		v := r.faults.afterScaleUp[g]
		if v.running+v.failed != r.requested(g) || len(v.instances) != r.requested(g) {
			unaccounted += r.requested(g) - v.running - v.failed
			violate("after the scale-up, group %s: %d running + %d reported failed of %d requested (%d instances listed)", g, v.running, v.failed, r.requested(g), len(v.instances))
		}
		want := r.requested(g) - r.faults.deleted[g]
		fv := final[g]
		if fv.target != want || len(fv.instances) != want || fv.running != want {
			violate("at the end, group %s: target %d, %d instances, %d running; want %d", g, fv.target, len(fv.instances), fv.running, want)
		}
	}

	// 2. No duplicate VM: every VM the cloud ever created is known to
	// exactly one record (ClientToken replays return the same VMs).
	byCloudID := map[string][]*statev1.Instance{}
	for _, in := range records {
		if in.GetCloudId() != "" {
			byCloudID[in.GetCloudId()] = append(byCloudID[in.GetCloudId()], in)
		}
	}
	for id, ins := range byCloudID {
		if len(ins) > 1 {
			violate("VM %s is claimed by %d records", id, len(ins))
		}
	}
	duplicates := stats.VMsCreated - len(byCloudID)
	if duplicates != 0 {
		violate("the cloud created %d VMs, records know %d: %d duplicate or untracked VMs", stats.VMsCreated, len(byCloudID), duplicates)
	}
	if stats.TokensCreatedTwice != 0 || stats.VMsCreatedWithoutToken != 0 {
		violate("ClientToken misuse: %d tokens created VMs twice, %d VMs created without a token", stats.TokensCreatedTwice, stats.VMsCreatedWithoutToken)
	}

	// The ECS group's share: VMs the ECS API created against the records
	// of the ecs group that name a VM.
	ecsRecords := 0
	for _, ins := range byCloudID {
		if ins[0].GetGroup() == ecsGroup {
			ecsRecords++
		}
	}
	ecsDuplicates := stats.VMsCreatedECS - ecsRecords
	if ecsDuplicates != 0 {
		violate("the ECS API created %d VMs, records of group %s know %d: %d duplicate or untracked ECS VMs", stats.VMsCreatedECS, ecsGroup, ecsRecords, ecsDuplicates)
	}

	// 3. No orphan after a reconcile period: every VM still listed (not
	// terminating) is owned by a live record, and every live record's VM
	// exists.
	listed := map[string]bool{}
	orphans, ecsOrphans := 0, 0
	for _, vm := range vms {
		if vm.State == cvmemu.StateTerminating {
			continue
		}
		listed[vm.ID] = true
		owned := false
		for _, in := range byCloudID[vm.ID] {
			owned = owned || owns(in)
		}
		if !owned {
			orphans++
			if vm.API == string(cvmemu.APIECS) {
				ecsOrphans++
			}
			violate("orphan %s VM %s (%s, %s, created %s)", strings.ToUpper(vm.API), vm.ID, vm.Zone, vm.State, vm.CreatedAt.Format("15:04:05"))
		}
	}
	for _, in := range records {
		if live(in) && in.GetCloudId() != "" && !listed[in.GetCloudId()] {
			violate("live instance %s (%s) names VM %s, which the cloud does not list", in.GetId(), in.GetState(), in.GetCloudId())
		}
	}

	// The command of the cloud-adapter killed mid-RunInstances reached
	// the other replica (many ack waits allowed: the time is reported).
	if mc := r.faults.midCreate; mc.killed && mc.redelivery == 0 {
		violate("the command of %s, killed mid-RunInstances (token %s), never reached another replica: its ClientToken was not used again within %s", r.cloud[0].name, mc.token, midCreateLimit)
	}

	// 4. No record lost: everything CA ever saw still has its record, and
	// every requested instance got one.
	byID, byPID := map[string]*statev1.Instance{}, map[string]*statev1.Instance{}
	perGroup := map[string]int{}
	for _, in := range records {
		byID[in.GetId()], byPID[in.GetProviderId()] = in, in
		perGroup[in.GetGroup()]++
	}
	r.seenMu.Lock()
	seen := len(r.seen)
	lost, ecsLost, ecsSeen := 0, 0, 0
	for pid, g := range r.seen {
		if g == ecsGroup {
			ecsSeen++
		}
		if _, id, ok := providerid.ParsePlaceholder(pid); ok {
			if byID[id] != nil {
				continue
			}
		} else if byPID[pid] != nil {
			continue
		}
		lost++
		if g == ecsGroup {
			ecsLost++
		}
		violate("instance %s of group %s, seen by CA, has no record", pid, g)
	}
	r.seenMu.Unlock()
	for _, g := range groupIDs {
		if perGroup[g] < r.requested(g) {
			violate("group %s has %d records for %d requested instances", g, perGroup[g], r.requested(g))
		}
	}

	// 5. Targets consistent: the stored target, CA's view and the live
	// records agree with what CA asked for.
	liveCount := map[string]int{}
	for _, in := range records {
		if live(in) {
			liveCount[in.GetGroup()]++
		}
	}
	for _, grp := range groups {
		g := grp.GetId()
		want := r.requested(g) - r.faults.deleted[g]
		if int(grp.GetTargetSize()) != want || liveCount[g] != want || final[g].target != want {
			violate("group %s: stored target %d, CA's target %d, %d live records; want %d", g, grp.GetTargetSize(), final[g].target, liveCount[g], want)
		}
	}

	// 6. With Kubernetes: every Running instance has exactly one Ready
	// Node with its providerID and its group's labels, and no Node
	// remains for a VM the cloud no longer lists.
	badNodes := 0
	if r.kube != nil {
		if badNodes, err = r.checkNodes(ctx, records, vms, violate); err != nil {
			return nil, err
		}
	}

	rows := r.rows(stats, unaccounted, duplicates, orphans, lost, badNodes)
	soRow, soViolations := r.stockOutRow(vms)
	rows = append(rows, soRow)
	violations = append(violations, soViolations...)
	spRow, spViolations := r.spotRow()
	rows = append(rows, spRow)
	violations = append(violations, spViolations...)
	fmt.Println()
	printRows(os.Stdout, rows)
	deleted := 0
	for _, g := range groupIDs {
		deleted += r.faults.deleted[g]
	}
	fmt.Printf("\n%d instances requested in %d groups, %d deleted by CA (%d of them failed creations); %d providerIDs seen by CA; %d records; %d VMs created, %d terminated, %d still listed; %d CA calls retried\n",
		r.total(), len(groupIDs), deleted, r.faults.deletedFailed,
		seen, len(records), stats.VMsCreated, stats.VMsTerminated, len(listed), r.faults.caRetries.Load())
	ev := r.faults.afterScaleUp[ecsGroup]
	fmt.Printf("ECS group %q (Alibaba Cloud, the emulator's ECS API): %d requested, %d Running + %d reported failed after the scale-up, %d deleted by CA, %d at the end; %d providerIDs seen by CA; %d VMs created by the ECS API, %d records name one; %d lost, %d duplicates, %d orphans; %d %s answers\n",
		ecsGroup, r.cfg.ecs, ev.running, ev.failed, r.faults.deleted[ecsGroup], final[ecsGroup].running, ecsSeen,
		stats.VMsCreatedECS, ecsRecords, ecsLost, ecsDuplicates, ecsOrphans,
		stats.ErrorCodes[cvmemu.ECSCodeThrottling], cvmemu.ECSCodeThrottling)
	fmt.Printf("failures reported to CA after the scale-up, by code: %s\n", failureCodes(r.faults.afterScaleUp))
	sort.Strings(violations)
	return violations, nil
}

func failureCodes(views map[string]groupView) string {
	codes := map[string]int{}
	for _, v := range views {
		for _, in := range v.instances {
			if c := in.GetStatus().GetErrorInfo().GetErrorCode(); c != "" {
				codes[c]++
			}
		}
	}
	var parts []string
	for c, n := range codes {
		parts = append(parts, fmt.Sprintf("%s %d", c, n))
	}
	sort.Strings(parts)
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// afterScaleUpByVM finds the instance CA saw for a VM.
func (r *run) afterScaleUpByVM(cloudID string) *pb.Instance {
	for _, v := range r.faults.afterScaleUp {
		for _, in := range v.instances {
			// qcloud:///<zone>/<id> (CVM), <region>.<id> (ECS)
			if id := in.GetId(); strings.HasSuffix(id, "/"+cloudID) || strings.HasSuffix(id, "."+cloudID) {
				return in
			}
		}
	}
	return nil
}

func runningOrFailed(in *pb.Instance) (running, failed bool) {
	if in == nil {
		return false, false
	}
	return in.GetStatus().GetInstanceState() == pb.InstanceStatus_instanceRunning, in.GetStatus().GetErrorInfo().GetErrorCode() != ""
}

// rows attributes outcomes to faults.
func (r *run) rows(stats cvmemu.Stats, unaccounted, duplicates, orphans, lost, badNodes int) []row {
	f := r.faults
	f.mu.Lock()
	defer f.mu.Unlock()
	failedWith := func(code string) int {
		n := 0
		for _, v := range f.afterScaleUp {
			for _, in := range v.instances {
				if in.GetStatus().GetErrorInfo().GetErrorCode() == code {
					n++
				}
			}
		}
		return n
	}
	stateOK := lost == 0 && unaccounted == 0
	ok := func(b bool, n int) int {
		if b {
			return n
		}
		return 0
	}
	var rows []row
	lcKills := 0
	for _, s := range r.lifecycles {
		lcKills += s.kills
	}
	if r.kube != nil {
		rows = append(rows, row{"kill -9 lifecycle leader", lcKills, ok(stateOK && badNodes == 0, lcKills), lost + badNodes,
			fmt.Sprintf("the Lease holder, once in the scale-up and once in the scale-down, restarted 1s later; %s; lost = records lost + Node invariant violations; %d Nodes registered, %d deleted by the cloud node controller because lifecycle had not %s after their VM went",
				r.kube.handoverNote(), r.kube.kubelets.Registered(), r.kube.removed.Load(), nodeGoneGrace)})
	} else {
		rows = append(rows, row{"kill -9 lifecycle", lcKills, ok(stateOK, lcKills), lost,
			"lost = records lost; restarted 1s later each time, once in the scale-up and once in the scale-down"})
	}
	rows = append(rows, row{"kill -9 api-gateway", r.gateway.kills, ok(stateOK && f.gatewayOK(), r.gateway.kills), lost,
		fmt.Sprintf("lost = records lost; restarted 2s later in the scale-down; CA calls retried meanwhile: %d (all retried DeleteNodes succeeded)", f.caRetries.Load())})
	mc := f.midCreate
	mcNote := "not injected: " + mc.skipped
	mcInjected, mcSurvived := 0, 0
	if mc.killed {
		mcInjected = 1
		redelivered := fmt.Sprintf("its command reached %s and RunInstances came again with the same ClientToken %.1fs after the kill (ack wait %s)", r.cloud[1].name, mc.redelivery.Seconds(), ackWait)
		if mc.redelivery == 0 {
			redelivered = fmt.Sprintf("RunInstances never came again with its ClientToken within %s", midCreateLimit)
		}
		mcNote = fmt.Sprintf("%s killed while its RunInstances (token %s) had created %d VMs and the answer was held; %s; restarted after that; lost = duplicate + orphan VMs",
			r.cloud[0].name, mc.token, mc.vms, redelivered)
		if mc.redelivery > 0 {
			mcSurvived = ok(duplicates == 0 && orphans == 0 && stateOK, 1)
		}
	}
	rows = append(rows, row{"kill -9 cloud-adapter mid-RunInstances", mcInjected, mcSurvived, max(duplicates, 0) + orphans, mcNote})
	rows = append(rows, row{"kill -9 cloud-adapter replica", r.cloud[1].kills, ok(duplicates == 0 && orphans == 0 && stateOK, r.cloud[1].kills), max(duplicates, 0) + orphans,
		"lost = duplicate + orphan VMs; its commands redelivered after the ack wait"})
	rows = append(rows, row{"kill -9 hook-runner mid-hook", f.midHook, ok(unaccounted == 0, f.midHook), unaccounted,
		fmt.Sprintf("injected = hooks it was running (%d kill); lost = instances neither Running nor reported failed", r.hooks[1].kills)})
	rows = append(rows, row{"NATS server restart", 1, ok(stateOK, 1), lost, "lost = records lost"})
	transientFailed := failedWith("InternalError")
	rows = append(rows, row{"cloud API errors (20%)", stats.ErrorCodes["InternalError"], stats.ErrorCodes["InternalError"] - transientFailed - max(duplicates, 0), transientFailed + max(duplicates, 0),
		"injected = InternalError answers (creates/terminates after commit); lost = duplicate VMs + creations failed on them"})
	throttled, throttleAnswers := 0, 0
	for _, c := range throttleCodes {
		throttled += failedWith(c)
		throttleAnswers += stats.ErrorCodes[c]
	}
	rows = append(rows, row{"throttling (RequestLimitExceeded, Throttling.User)", throttleAnswers, throttleAnswers - throttled, throttled,
		fmt.Sprintf("injected = answers (%d queued in bursts, the rest the real limits), %d of them ECS's Throttling.User; lost = creations failed on them", f.rleBursts, stats.ErrorCodes[cvmemu.ECSCodeThrottling])})
	gamma := f.afterScaleUp["gamma"]
	quotaFailed := failedWith("LimitExceeded.InstanceQuota")
	beyond := max(r.cfg.gamma-r.cfg.gammaQuota, 0)
	rows = append(rows, row{"quota exhausted (gamma)", beyond, min(quotaFailed, beyond), r.cfg.gamma - gamma.running - gamma.failed,
		fmt.Sprintf("injected = instances beyond the zone quota; survived = reported to CA as failed on quota (%d: OutOfResources); %d quota errors answered; %d of %d gamma Running",
			quotaFailed, stats.ErrorCodes["LimitExceeded.InstanceQuota"], gamma.running, r.cfg.gamma)})
	hungOK := 0
	for _, vm := range f.hungVMs {
		if _, failed := runningOrFailed(r.afterScaleUpByVM(vm)); failed {
			hungOK++
		}
	}
	rows = append(rows, row{"VMs that never boot", len(f.hungVMs), hungOK, len(f.hungVMs) - hungOK, "survived = reported to CA as failed (LaunchTimeout), then deleted by CA"})
	hooksOK := 0
	for _, vm := range f.hungHooks {
		if running, _ := runningOrFailed(r.afterScaleUpByVM(vm)); running {
			hooksOK++
		}
	}
	rows = append(rows, row{"hooks that hang", len(f.hungHooks), hooksOK, len(f.hungHooks) - hooksOK, "survived = Running after the hook timed out and was retried"})
	sshOK := 0
	for _, vm := range f.sshClosed {
		if running, failed := runningOrFailed(r.afterScaleUpByVM(vm)); running || failed {
			sshOK++
		}
	}
	rows = append(rows, row{"SSH unreachable", len(f.sshClosed), sshOK, len(f.sshClosed) - sshOK, "survived = reported to CA as failed after the hook's retries (or Running if the hook had already run)"})
	return rows
}
