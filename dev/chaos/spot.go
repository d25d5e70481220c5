package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/url"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/nodesmith/nodesmith/cmd/nodesmith-node-agent/agent"
	"github.com/nodesmith/nodesmith/libs/command"
	"github.com/nodesmith/nodesmith/libs/contract"
	"github.com/nodesmith/nodesmith/libs/health"
	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// Spot reclaims: the group "spot" (its own zone, a SPOTPAID template with
// a max price, the spot capacity-type label on its Nodes) is reclaimed
// under the ongoing scale-up: once its instances are Running, the node
// agent runs (in process) for each of its Nodes, pointed at the
// emulator's per-VM metadata endpoint and writing the taint and
// annotations to the real API server as the DaemonSet does, and the
// emulator schedules the reclaim of some of them with spotNotice of
// notice. Lifecycle must drain each through before_delete and terminate
// it before the cloud would, start its replacement at once, and the group
// must end at its target; the usual invariants (0 lost, 0 duplicates, 0
// orphans) hold throughout. Needs Kubernetes (the agent writes Nodes).

const (
	spotGroup    = "spot"
	spotZone     = "ap-guangzhou-7"
	spotMaxPrice = "0.5"
	// spotNotice is the reclaim notice (Tencent announces about two
	// minutes; shorter keeps -quick short and the drain's deadline real).
	spotNotice = 60 * time.Second
	// spotWait bounds each stage of the fault (the group Running, the
	// reclaims handled).
	spotWait = 4 * time.Minute
	// spotLoopback is where the metadata endpoint and the agents' health
	// servers listen: a loopback address of their own (the services use
	// 127.0.0.1, the VMs 127.77.0.0 up), so their ephemeral ports cannot
	// take the fixed port of a service that is down for a restart.
	spotLoopback = "127.0.9.1"
)

// spotFault is what the fault did and saw.
// launchTimeoutCode is the errorInfo code lifecycle reports to CA for an
// instance whose VM did not boot in time.
const launchTimeoutCode = "LaunchTimeout"

type spotFault struct {
	done bool
	// skipped says why nothing was reclaimed.
	skipped string
	// victims are the reclaimed instances' providerIDs, with their
	// notice (the reclaim scheduled) and termination times.
	victims []string
	notice  map[string]time.Time
	term    map[string]time.Time
	// drained are the victims drained by before_delete and closed as
	// interrupted before their termination time; problems what was not.
	drained  int
	problems []string
	// replacements are the times from each notice to a new instance of
	// the group Running (paired in order); agents the node agents run.
	replacements []time.Duration
	// hungReplacements are replacements whose VM never booted (the
	// standing "VMs that never boot" fault): reported to CA as
	// LaunchTimeout, which a real CA answers by scaling up again.
	hungReplacements int
	agents           int
	// cloudReclaimed are the VMs the emulator reclaimed itself (nodesmith
	// too late).
	cloudReclaimed int
}

// spotTemplate turns the spot group's template and node template in the
// rendered configuration (harness.ConfigYAML's JSON) into spot ones.
func spotTemplate(conf []byte) ([]byte, error) {
	var c map[string]any
	if err := json.Unmarshal(conf, &c); err != nil {
		return nil, err
	}
	tpls, _ := c["instanceTemplates"].(map[string]any)
	tpl, _ := tpls["tpl-"+spotZone].(map[string]any)
	params, _ := tpl["parameters"].(map[string]any)
	if params == nil {
		return nil, fmt.Errorf("no template tpl-%s with parameters in the configuration", spotZone)
	}
	params["InstanceChargeType"] = cvmemu.ChargeTypeSpot
	params["InstanceMarketOptions"] = map[string]any{"MarketType": "spot", "SpotOptions": map[string]any{"MaxPrice": spotMaxPrice, "SpotInstanceType": "one-time"}}
	groups, _ := c["nodeGroups"].([]any)
	found := false
	for _, g := range groups {
		gm, _ := g.(map[string]any)
		if gm["id"] != spotGroup {
			continue
		}
		nt, _ := gm["nodeTemplate"].(map[string]any)
		labels, _ := nt["labels"].(map[string]any)
		if labels == nil {
			return nil, fmt.Errorf("group %s has no node template labels", spotGroup)
		}
		labels[contract.LabelCapacityType] = contract.CapacityTypeSpot
		found = true
	}
	if !found {
		return nil, fmt.Errorf("no group %s in the configuration", spotGroup)
	}
	return json.MarshalIndent(c, "", "  ")
}

// spotRun waits for the spot group to be Running, starts the node agents,
// reclaims r.cfg.spotReclaims of its VMs and waits until lifecycle
// replaced them. It always marks the fault done, so the scale-up can
// settle.
func (f *faults) spotRun(ctx context.Context) error {
	defer func() {
		f.mu.Lock()
		f.spot.done = true
		f.mu.Unlock()
	}()
	skip := func(why string) error {
		f.mu.Lock()
		f.spot.skipped = why
		f.mu.Unlock()
		f.event("spot reclaims skipped: %s", why)
		return nil
	}
	r := f.r
	if r.kube == nil || r.cfg.spotReclaims == 0 {
		return skip("needs Kubernetes (the node agent marks Nodes)")
	}
	meta, err := r.w.Emulator.ServeMetadata(spotLoopback + ":0")
	if err != nil {
		return fmt.Errorf("metadata service: %w", err)
	}

	// The group Running (its creations settled) with its Nodes.
	var running []*pb.Instance
	var nodes map[string]string // providerID -> Node name
	if _, err := waitFor(ctx, spotWait, func() bool {
		v, err := r.view(ctx, spotGroup)
		if err != nil || v.target != r.cfg.spot || len(v.instances) != r.cfg.spot || v.other > 0 || v.running < r.cfg.spotReclaims {
			return false
		}
		running = running[:0]
		for _, in := range v.instances {
			if in.GetStatus().GetInstanceState() == pb.InstanceStatus_instanceRunning {
				running = append(running, in)
			}
		}
		nodes = r.kube.nodeNames(ctx)
		for _, in := range running {
			if nodes[in.GetId()] == "" {
				return false
			}
		}
		return true
	}); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return skip(fmt.Sprintf("the group was not Running with its Nodes after %s", spotWait))
	}
	sort.Slice(running, func(i, j int) bool { return running[i].GetId() < running[j].GetId() })

	actx, stopAgents := context.WithCancel(ctx)
	var agents sync.WaitGroup
	defer func() { stopAgents(); agents.Wait() }()
	for _, in := range running {
		agents.Add(1)
		go func() {
			defer agents.Done()
			if err := r.runNodeAgent(actx, meta, nodes[in.GetId()], in.GetId()); err != nil && actx.Err() == nil {
				r.logf("node agent of %s: %v", nodes[in.GetId()], err)
			}
		}()
	}

	// The reclaims, and the replacements they call for.
	runningBefore := map[string]bool{}
	for _, in := range running {
		runningBefore[in.GetId()] = true
	}
	before := r.w.Emulator.Stats().VMsReclaimed
	sf := spotFault{notice: map[string]time.Time{}, term: map[string]time.Time{}, agents: len(running)}
	for _, in := range running[:r.cfg.spotReclaims] {
		pid := in.GetId()
		at := time.Now()
		term, err := r.w.Emulator.ScheduleReclaim(cloudIDOf(pid), spotNotice)
		if err != nil {
			f.event("spot reclaim of %s refused: %v", pid, err)
			continue
		}
		sf.victims = append(sf.victims, pid)
		sf.notice[pid], sf.term[pid] = at, term
	}
	f.event("spot reclaims: %d of the %d Running spot VMs announced for %s (node agents on all %d)", len(sf.victims), len(running), spotNotice, len(running))

	newRunning := map[string]time.Time{}
	// newHung are new instances reported failed with LaunchTimeout: their
	// VM never booted (an injected fault, not the interruption path's).
	newHung := map[string]bool{}
	_, err = waitFor(ctx, spotNotice+time.Minute, func() bool {
		v, err := r.view(ctx, spotGroup)
		if err != nil {
			return false
		}
		listed := map[string]bool{}
		for _, in := range v.instances {
			listed[in.GetId()] = true
			if runningBefore[in.GetId()] {
				continue
			}
			switch {
			case in.GetStatus().GetInstanceState() == pb.InstanceStatus_instanceRunning:
				if _, ok := newRunning[in.GetId()]; !ok {
					newRunning[in.GetId()] = time.Now()
				}
			case in.GetStatus().GetErrorInfo().GetErrorCode() == launchTimeoutCode:
				newHung[in.GetId()] = true
			}
		}
		for _, pid := range sf.victims {
			if listed[pid] {
				return false
			}
		}
		return len(newRunning)+len(newHung) >= len(sf.victims)
	})
	sf.hungReplacements = len(newHung)
	if err != nil && ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		sf.problems = append(sf.problems, fmt.Sprintf("reclaims not handled after %s: %d of %d replacements Running", spotNotice+time.Minute, len(newRunning), len(sf.victims)))
	}
	sf.cloudReclaimed = r.w.Emulator.Stats().VMsReclaimed - before

	// Pair the notices with the replacements in order, as lifecycle's own
	// metric does.
	var notices, ups []time.Time
	for _, pid := range sf.victims {
		notices = append(notices, sf.notice[pid])
	}
	for _, at := range newRunning {
		ups = append(ups, at)
	}
	slices.SortFunc(notices, func(a, b time.Time) int { return a.Compare(b) })
	slices.SortFunc(ups, func(a, b time.Time) int { return a.Compare(b) })
	for i := range min(len(notices), len(ups)) {
		sf.replacements = append(sf.replacements, ups[i].Sub(notices[i]))
	}

	// Each victim drained and closed as interrupted before its time.
	for _, pid := range sf.victims {
		if why := r.spotDrained(ctx, pid, sf.term[pid]); why != "" {
			sf.problems = append(sf.problems, why)
		} else {
			sf.drained++
		}
	}
	f.mu.Lock()
	f.spot = sf
	f.mu.Unlock()
	f.event("spot reclaims handled: %d drained before the VM was gone, %d replacements Running (%d more whose VM never booted), %d VMs reclaimed by the cloud itself", sf.drained, len(sf.replacements), sf.hungReplacements, sf.cloudReclaimed)
	return nil
}

// cloudIDOf is the VM id at the end of a providerID.
func cloudIDOf(pid string) string { return pid[strings.LastIndex(pid, "/")+1:] }

// nodeNames maps providerIDs to Node names.
func (k *kubeSide) nodeNames(ctx context.Context) map[string]string {
	lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	list, err := k.cs.CoreV1().Nodes().List(lctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	out := map[string]string{}
	for _, n := range list.Items {
		out[n.Spec.ProviderID] = n.Name
	}
	return out
}

// runNodeAgent runs the node agent for Node node of VM pid until ctx ends,
// as the DaemonSet's pod on that node would.
func (r *run) runNodeAgent(ctx context.Context, meta, node, pid string) error {
	cfg := agent.DefaultConfig()
	cfg.NodeName = node
	cfg.MetadataURL = meta + "/" + cloudIDOf(pid) + "/latest/meta-data/spot/termination-time"
	cfg.Interval = 500 * time.Millisecond
	cfg.HealthAddr = spotLoopback + ":0"
	return agent.Run(ctx, cfg, agent.Deps{
		Host:       command.Host{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(), Health: &health.Checks{}},
		RESTConfig: r.kube.cluster.RESTConfig(),
	})
}

// spotDrained checks through the REST API that the instance of pid was
// closed as interrupted, drained by a successful before_delete hook, and
// deleted before term; it says what is wrong ("" when nothing).
func (r *run) spotDrained(ctx context.Context, pid string, term time.Time) string {
	b, err := r.rest(ctx, "GET", "/api/v1/instances?group="+spotGroup+"&limit=1000")
	if err != nil {
		return fmt.Sprintf("%s: %v", pid, err)
	}
	var list struct {
		Items []struct {
			ID         string `json:"id"`
			ProviderID string `json:"providerID"`
		} `json:"items"`
	}
	if err := json.Unmarshal(b, &list); err != nil {
		return fmt.Sprintf("%s: %v", pid, err)
	}
	id := ""
	for _, in := range list.Items {
		if in.ProviderID == pid {
			id = in.ID
		}
	}
	if id == "" {
		return fmt.Sprintf("reclaimed %s: no instance record", pid)
	}
	if b, err = r.rest(ctx, "GET", "/api/v1/instances/"+url.PathEscape(id)); err != nil {
		return fmt.Sprintf("%s: %v", pid, err)
	}
	var detail struct {
		State   string `json:"state"`
		History []struct {
			From, To, Reason string
			At               time.Time
		} `json:"history"`
	}
	if err := json.Unmarshal(b, &detail); err != nil {
		return fmt.Sprintf("%s: %v", pid, err)
	}
	interrupted, drainedAt, deletedAt := false, time.Time{}, time.Time{}
	for _, h := range detail.History {
		switch {
		case h.To == "PENDING_DELETION" && strings.HasPrefix(h.Reason, "interrupted"):
			interrupted = true
		case h.From == "PENDING_DELETION" && h.To == "DELETING" && h.Reason == "before_delete hook succeeded":
			drainedAt = h.At
		case h.To == "DELETED":
			deletedAt = h.At
		}
	}
	switch {
	case !interrupted:
		return fmt.Sprintf("reclaimed %s (%s) not closed as interrupted: %+v", pid, id, detail.History)
	case drainedAt.IsZero():
		return fmt.Sprintf("reclaimed %s (%s) not drained by a successful before_delete hook: %+v", pid, id, detail.History)
	case detail.State != "DELETED" || deletedAt.IsZero():
		return fmt.Sprintf("reclaimed %s (%s) is %s, not DELETED", pid, id, detail.State)
	case !drainedAt.Before(term):
		return fmt.Sprintf("reclaimed %s (%s) drained at %s, not before its termination time %s", pid, id, drainedAt.Format(time.RFC3339Nano), term.Format(time.RFC3339))
	}
	return ""
}

// spotRow is the fault's line of the table: injected = reclaims; survived
// = those drained (before_delete succeeded) and closed as interrupted
// before the termination time, with a replacement Running; lost = the
// others. The note gives the notice-to-replacement-Running times.
func (r *run) spotRow() (row, []string) {
	f := r.faults
	f.mu.Lock()
	sf := f.spot
	f.mu.Unlock()
	if sf.skipped != "" {
		var v []string
		if r.kube != nil && r.cfg.spotReclaims > 0 {
			v = append(v, "spot reclaims did not run: "+sf.skipped)
		}
		return row{"spot reclaims (spot)", 0, 0, 0, "skipped: " + sf.skipped}, v
	}
	n := len(sf.victims)
	survived := min(sf.drained, len(sf.replacements)+sf.hungReplacements)
	violations := slices.Clone(sf.problems)
	if n < r.cfg.spotReclaims {
		violations = append(violations, fmt.Sprintf("spot reclaims: %d scheduled, want %d", n, r.cfg.spotReclaims))
	}
	if len(sf.replacements)+sf.hungReplacements < n {
		violations = append(violations, fmt.Sprintf("spot reclaims: %d replacements Running (and %d whose VM never booted) for %d reclaims", len(sf.replacements), sf.hungReplacements, n))
	}
	if sf.cloudReclaimed > 0 {
		violations = append(violations, fmt.Sprintf("spot reclaims: the cloud reclaimed %d VMs itself (nodesmith did not terminate them before the termination time)", sf.cloudReclaimed))
	}
	p50, mx := durationStats(sf.replacements)
	note := fmt.Sprintf("%d of %d Running spot VMs reclaimed with %s notice under the scale-up (node agents on all of them); drained before gone %d/%d; notice->replacement Running p50 %.1fs max %.1fs; VMs the cloud reclaimed itself %d (want 0); survived = drained by before_delete and closed as interrupted before the termination time, with a replacement Running (or reported failed to CA because its VM never booted, the standing fault)",
		n, sf.agents, spotNotice, sf.drained, n, p50.Seconds(), mx.Seconds(), sf.cloudReclaimed)
	return row{"spot reclaims (spot)", n, survived, n - survived, note}, violations
}

// durationStats returns the median and the maximum of ds (zero when
// empty).
func durationStats(ds []time.Duration) (p50, maxD time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[(len(s)-1)/2], s[len(s)-1]
}
