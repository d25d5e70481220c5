package app_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// fakeTagCloud plays the cloud adapter for AdoptVMs: it knows a set of
// VMs (cloud id -> private IP) and records the tags it set.
type fakeTagCloud struct {
	mu     sync.Mutex
	vms    map[string]string
	tagged map[string]string // cloud id -> instance id
	other  map[string]bool   // VMs carrying another cluster's tag
}

func (f *fakeTagCloud) answer(h *harness) func(ports.TagCommand) {
	return func(c ports.TagCommand) {
		f.mu.Lock()
		res := app.TagResult{RequestID: c.RequestID}
		for _, r := range c.Instances {
			ip, ok := f.vms[r.CloudID]
			vr := app.TagVMResult{CloudID: r.CloudID, State: domain.CloudRunning, PrivateIP: ip}
			switch {
			case !ok:
				vr.State = domain.CloudNotFound
				vr.Err = &domain.CloudError{Kind: contract.ErrorKindNotFound, Code: "InstanceNotFound"}
			case f.other[r.CloudID]:
				vr.Err = &domain.CloudError{Kind: contract.ErrorKindInvalidParameters, Code: "InstanceNotInCluster", Message: "another cluster's"}
			case !c.CheckOnly:
				f.tagged[r.CloudID] = r.InstanceID
			}
			res.Results = append(res.Results, vr)
		}
		f.mu.Unlock()
		_ = h.app.HandleTagged(h.ctx, res)
	}
}

func protoNode(name, cloudID string) ports.Node {
	return ports.Node{
		Name: name, Ready: true, InternalIP: "10.8.0.1",
		ProviderID: "externalgrpc://tencentcloud/dev/ap-guangzhou/" + cloudID,
		Labels:     map[string]string{"kubernetes.io/hostname": name},
	}
}

func adoptVM(name, cloudID string) app.AdoptVM {
	return app.AdoptVM{CloudID: cloudID, NodeName: name, ProviderID: protoNode(name, cloudID).ProviderID}
}

func adoptHarness(t *testing.T, g domain.NodeGroup, vms map[string]string, nodes ...ports.Node) (*harness, *fakeTagCloud) {
	t.Helper()
	h := newHarness(t, []domain.NodeGroup{g}, withCluster())
	f := &fakeTagCloud{vms: vms, tagged: map[string]string{}, other: map[string]bool{}}
	h.cmds.OnTag = f.answer(h)
	for _, n := range nodes {
		h.cluster.Put(n)
	}
	eventually(t, func() bool {
		for _, n := range nodes {
			if _, ok := h.app.Node(n.Name); !ok {
				return false
			}
		}
		return h.app.NodesSynced()
	})
	return h, f
}

func results(outs []app.AdoptOutcome) string {
	var s []string
	for _, o := range outs {
		s = append(s, o.VM.CloudID+"="+o.Result.String())
	}
	return strings.Join(s, ",")
}

// noCloudWrites fails the test if anything was created or terminated.
func noCloudWrites(t *testing.T, h *harness) {
	t.Helper()
	c := h.cmds.Snapshot()
	if len(c.Creates) != 0 || len(c.Terminates) != 0 {
		t.Fatalf("creates %v, terminates %v", c.Creates, c.Terminates)
	}
}

func TestAdoptVMsAdoptsOnceAndTags(t *testing.T) {
	g := group("workers", 0, 5, 0)
	h, f := adoptHarness(t, g, map[string]string{"ins-p1": "10.1.0.1", "ins-p2": "10.1.0.2"},
		protoNode("proto-1", "ins-p1"), protoNode("proto-2", "ins-p2"))
	before := len(h.instances("workers"))
	req := app.AdoptRequest{Group: "workers", VMs: []app.AdoptVM{adoptVM("proto-1", "ins-p1"), adoptVM("proto-2", "ins-p2")}}

	outs, revs, err := h.app.AdoptVMs(h.ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := results(outs); got != "ins-p1=adopted,ins-p2=adopted" {
		t.Fatalf("outcomes %s (%+v)", got, outs)
	}
	if revs.Instances == 0 || revs.Groups == 0 {
		t.Errorf("revisions %+v", revs)
	}
	if h.target("workers") != 2 {
		t.Errorf("target %d, want 2 (0 + 2 adopted)", h.target("workers"))
	}
	for _, o := range outs {
		var in domain.Instance
		for _, i := range h.instances("workers") {
			if i.ID == o.InstanceID {
				in = i
			}
		}
		if in.State != domain.StateRunning || !in.Adopted || in.CloudID != o.VM.CloudID || in.NodeName != o.VM.NodeName {
			t.Errorf("record %+v", in)
		}
		if in.PrivateIP != f.vms[o.VM.CloudID] {
			t.Errorf("private IP %q, want the cloud's %q", in.PrivateIP, f.vms[o.VM.CloudID])
		}
		if f.tagged[o.VM.CloudID] != o.InstanceID {
			t.Errorf("VM %s tagged with instance %q, want %q", o.VM.CloudID, f.tagged[o.VM.CloudID], o.InstanceID)
		}
		n, _ := h.cluster.Get(o.VM.NodeName)
		if n.Labels[app.LabelGroup] != "workers" || n.Labels[app.LabelInstance] != o.InstanceID {
			t.Errorf("node labels %v", n.Labels)
		}
	}
	for _, c := range h.cmds.Snapshot().Tags {
		if c.ClusterID != "nodesmith" || c.Target != (ports.Target{Provider: "tencentcloud", Account: "dev", Region: "ap-guangzhou"}) {
			t.Errorf("tag command %+v", c)
		}
	}

	// Again: nothing adopted twice, tags set again.
	tags := len(h.cmds.Snapshot().Tags)
	outs, _, err = h.app.AdoptVMs(h.ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got := results(outs); got != "ins-p1=already_adopted,ins-p2=already_adopted" {
		t.Fatalf("second run %s", got)
	}
	if h.target("workers") != 2 || len(h.instances("workers")) != before+2 {
		t.Errorf("second run changed target %d or records %d", h.target("workers"), len(h.instances("workers")))
	}
	if got := h.cmds.Snapshot().Tags[tags:]; len(got) != 1 || got[0].CheckOnly {
		t.Errorf("second run tag commands %+v, want one tagging", got)
	}
	for range 3 {
		h.app.Pass(h.ctx)
	}
	noCloudWrites(t, h)
	if n := h.byState("workers")[domain.StateRunning]; n != 2 {
		t.Errorf("%d Running after passes, want the 2 adopted (states %v)", n, h.byState("workers"))
	}
}

func TestAdoptVMsBeyondMaxSizeRefusedWhole(t *testing.T) {
	g := group("workers", 0, 2, 1)
	h, _ := adoptHarness(t, g, map[string]string{"ins-p1": "", "ins-p2": ""}, protoNode("proto-1", "ins-p1"), protoNode("proto-2", "ins-p2"))
	_, _, err := h.app.AdoptVMs(h.ctx, app.AdoptRequest{Group: "workers", VMs: []app.AdoptVM{adoptVM("proto-1", "ins-p1"), adoptVM("proto-2", "ins-p2")}})
	if domain.CodeOf(err) != contract.CodeOutOfRange || !strings.Contains(err.Error(), "max size 2") {
		t.Fatalf("err %v, want OutOfRange naming the max size", err)
	}
	if h.target("workers") != 1 || len(h.instances("workers")) != 0 || len(h.cmds.Snapshot().Tags) != 0 {
		t.Errorf("refusal wrote: target %d, records %d, tag commands %d", h.target("workers"), len(h.instances("workers")), len(h.cmds.Snapshot().Tags))
	}
}

func TestAdoptVMsRefusesUnknownAndForeignVMs(t *testing.T) {
	g := group("workers", 0, 5, 0)
	mismatch := protoNode("proto-4", "ins-p4")
	mismatch.ProviderID = "qcloud:///ap-guangzhou-3/ins-p4" // the kubelet without --provider-id
	h, f := adoptHarness(t, g, map[string]string{"ins-p1": "", "ins-other": "", "ins-p4": ""},
		protoNode("proto-1", "ins-p1"), protoNode("proto-2", "ins-gone"), protoNode("proto-3", "ins-other"), mismatch)
	f.other["ins-other"] = true
	outs, _, err := h.app.AdoptVMs(h.ctx, app.AdoptRequest{Group: "workers", VMs: []app.AdoptVM{
		adoptVM("proto-1", "ins-p1"),
		adoptVM("proto-2", "ins-gone"),
		adoptVM("proto-3", "ins-other"),
		adoptVM("proto-4", "ins-p4"),
		adoptVM("proto-5", "ins-p5"), // no such Node
		{CloudID: "ins-p6", NodeName: "proto-6", ProviderID: "externalgrpc://tencentcloud/prod/ap-guangzhou/ins-p6"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	want := "ins-p1=adopted,ins-gone=refused,ins-other=refused,ins-p4=refused,ins-p5=refused,ins-p6=refused"
	if got := results(outs); got != want {
		t.Fatalf("outcomes %s, want %s", got, want)
	}
	for i, frag := range []string{"", "no VM ins-gone", "InstanceNotInCluster", "--provider-id", `no Node "proto-5"`, "does not name VM ins-p6"} {
		if !strings.Contains(outs[i].Message, frag) {
			t.Errorf("message %d %q lacks %q", i, outs[i].Message, frag)
		}
	}
	if h.target("workers") != 1 || len(h.instances("workers")) != 1 {
		t.Errorf("target %d, records %d: want only ins-p1", h.target("workers"), len(h.instances("workers")))
	}
	if len(f.tagged) != 1 {
		t.Errorf("tagged %v, want only ins-p1", f.tagged)
	}
	noCloudWrites(t, h)
}

func TestAdoptVMsDryRunWritesNothing(t *testing.T) {
	g := group("workers", 0, 5, 0)
	h, f := adoptHarness(t, g, map[string]string{"ins-p1": ""}, protoNode("proto-1", "ins-p1"))
	outs, revs, err := h.app.AdoptVMs(h.ctx, app.AdoptRequest{Group: "workers", DryRun: true, VMs: []app.AdoptVM{adoptVM("proto-1", "ins-p1"), adoptVM("proto-2", "ins-p2")}})
	if err != nil {
		t.Fatal(err)
	}
	if got := results(outs); got != "ins-p1=adopted,ins-p2=refused" {
		t.Fatalf("plan %s", got)
	}
	if revs != (app.Revisions{}) || h.target("workers") != 0 || len(h.instances("workers")) != 0 || len(f.tagged) != 0 {
		t.Errorf("dry run wrote: revs %+v, target %d, records %d, tagged %v", revs, h.target("workers"), len(h.instances("workers")), f.tagged)
	}
	for _, c := range h.cmds.Snapshot().Tags {
		if !c.CheckOnly {
			t.Errorf("dry run tagged: %+v", c)
		}
	}
	if n, _ := h.cluster.Get("proto-1"); n.Labels[app.LabelGroup] != "" {
		t.Errorf("dry run labelled the Node: %v", n.Labels)
	}
}

func TestAdoptVMsInvalidRequests(t *testing.T) {
	h, _ := adoptHarness(t, group("workers", 0, 5, 0), nil)
	for name, req := range map[string]app.AdoptRequest{
		"no group":        {VMs: []app.AdoptVM{adoptVM("n", "ins-1")}},
		"no VMs":          {Group: "workers"},
		"no cloud id":     {Group: "workers", VMs: []app.AdoptVM{{NodeName: "n", ProviderID: "p"}}},
		"repeated VM":     {Group: "workers", VMs: []app.AdoptVM{adoptVM("n", "ins-1"), adoptVM("m", "ins-1")}},
		"unknown group":   {Group: "nope", VMs: []app.AdoptVM{adoptVM("n", "ins-1")}},
		"no provider id:": {Group: "workers", VMs: []app.AdoptVM{{CloudID: "ins-1", NodeName: "n"}}},
	} {
		_, _, err := h.app.AdoptVMs(h.ctx, req)
		want := contract.CodeInvalidArgument
		if name == "unknown group" {
			want = contract.CodeNotFound
		}
		if domain.CodeOf(err) != want {
			t.Errorf("%s: err %v, want %v", name, err, want)
		}
	}
}

// A cloud adapter that does not answer makes the request Unavailable,
// with nothing written.
func TestAdoptVMsCloudSilent(t *testing.T) {
	h, _ := adoptHarness(t, group("workers", 0, 5, 0), nil, protoNode("proto-1", "ins-p1"))
	h.cmds.OnTag = nil
	ctx, cancel := contextWithShortTimeout(h)
	defer cancel()
	_, _, err := h.app.AdoptVMs(ctx, app.AdoptRequest{Group: "workers", VMs: []app.AdoptVM{adoptVM("proto-1", "ins-p1")}})
	if domain.CodeOf(err) != contract.CodeUnavailable {
		t.Fatalf("err %v, want Unavailable", err)
	}
	if len(h.instances("workers")) != 0 || h.target("workers") != 0 {
		t.Error("a failed check wrote")
	}
}

func contextWithShortTimeout(h *harness) (context.Context, context.CancelFunc) {
	return context.WithTimeout(h.ctx, 200*time.Millisecond)
}
