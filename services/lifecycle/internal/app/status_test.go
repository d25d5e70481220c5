package app_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

func TestStatusSummary(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("a", 0, 5, 0), group("b", 1, 3, 1)}, withOptions(func(o *app.Options) {
		o.StatusErrors = 2
	}))
	h.ok(h.app.IncreaseSize(h.ctx, "a", 3))
	h.app.Pass(h.ctx) // three Creating
	// Two creations fail, at different times.
	for i, in := range h.instances("a")[:2] {
		h.clock.Advance(time.Minute)
		h.event(in.ID, domain.CloudCreateFailed{Attempt: in.Attempt, BatchID: in.BatchID,
			Err: domain.CloudError{Kind: contract.ErrorKindCapacity, Code: "NoStock", Message: strings.Repeat("x", 1000*(i+1))}})
	}
	s, ok := h.app.Status()
	if !ok || len(s.Groups) != 2 || s.Groups[0].ID != "a" || s.Groups[1].ID != "b" {
		t.Fatalf("status %+v", s)
	}
	a := s.Groups[0]
	if a.TargetSize != 3 || a.MaxSize != 5 || a.Instances["Creating"] != 3 || a.CreationFailed != 2 {
		t.Errorf("group a %+v", a)
	}
	if len(s.RecentErrors) != 2 || !s.RecentErrors[0].At.After(s.RecentErrors[1].At) || s.RecentErrors[0].Code != "NoStock" {
		t.Errorf("recent errors %+v, want the 2 newest first", s.RecentErrors)
	}
	for _, e := range s.RecentErrors {
		if len(e.Message) > 300 {
			t.Errorf("an error message of %d bytes in the summary", len(e.Message))
		}
	}
	h.app.Stop()
	if _, ok := h.app.Status(); ok {
		t.Errorf("a status while not leading")
	}
}

// The summary is written when it changed, at most every interval, and a
// failed write is retried.
func TestStatusReporterWritesChanges(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("a", 0, 5, 0)}, withOptions(func(o *app.Options) {
		o.StatusInterval = 5 * time.Millisecond
	}))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.app.RunStatusReporter(ctx) }()
	defer func() { cancel(); <-done }()

	eventually(t, func() bool { return len(h.status.Writes()) == 1 })
	// Unchanged for many intervals: a pass that changes nothing writes
	// nothing.
	for range 5 {
		h.app.Pass(h.ctx)
		time.Sleep(10 * time.Millisecond)
	}
	if n := len(h.status.Writes()); n != 1 {
		t.Errorf("%d writes of an unchanged summary, want 1", n)
	}
	h.status.SetErr(errors.New("apiserver down"))
	h.ok(h.app.IncreaseSize(h.ctx, "a", 2))
	time.Sleep(30 * time.Millisecond) // several failed attempts
	h.status.SetErr(nil)
	eventually(t, func() bool { return len(h.status.Writes()) == 2 })
	last := h.status.Writes()[1]
	if last.Groups[0].TargetSize != 2 || last.Groups[0].Instances["Pending"] != 2 {
		t.Errorf("written %+v", last.Groups[0])
	}
}

func TestNoticesOnNodes(t *testing.T) {
	h := newHarness(t, []domain.NodeGroup{group("g", 0, 5, 0)}, withCluster())
	in := h.runningWithNode("g")
	reasons := func() []string {
		var out []string
		for _, n := range h.notices.Notices("") {
			if n.Node != in.Node() {
				t.Errorf("notice on node %q, want %q", n.Node, in.Node())
			}
			out = append(out, n.Reason)
		}
		return out
	}
	if got := reasons(); len(got) != 1 || got[0] != app.ReasonRunning {
		t.Fatalf("notices %v, want InstanceRunning", got)
	}
	h.ok(h.app.DeleteNodes(h.ctx, "g", []app.NodeRef{{ProviderID: in.ProviderID}}))
	h.settle()
	want := []string{app.ReasonRunning, app.ReasonDeletionRequested, app.ReasonTerminating, app.ReasonDeleted}
	if got := reasons(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("notices %v, want %v", got, want)
	}
	// An instance that never had a Node gets none.
	h.ok(h.app.IncreaseSize(h.ctx, "g", 1))
	h.ok(h.app.DecreaseTargetSize(h.ctx, "g", -1))
	if got := reasons(); len(got) != len(want) {
		t.Errorf("notices for a cancelled instance: %v", got[len(want):])
	}
}
