package domain_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/libs/cloudspec"

	. "github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

func TestOfferingOrder(t *testing.T) {
	abc := []cloudspec.Offering{{Zone: "a", InstanceType: "t1"}, {Zone: "b", InstanceType: "t1"}, {Zone: "c", InstanceType: "t1"}}
	// Two types in zone a: both count a's instances.
	aab := []cloudspec.Offering{{Zone: "a", InstanceType: "t1"}, {Zone: "a", InstanceType: "t2"}, {Zone: "b", InstanceType: "t1"}}
	tests := []struct {
		name      string
		strategy  string
		offerings []cloudspec.Offering
		live      map[string]int
		want      string
	}{
		{"none", cloudspec.StrategyBalanced, nil, nil, "[]"},
		{"priority keeps the written order", cloudspec.StrategyPriority, abc, map[string]int{"a": 5}, "[0 1 2]"},
		{"empty strategy is priority", "", abc, map[string]int{"a": 5}, "[0 1 2]"},
		{"balanced, nothing live: written order", cloudspec.StrategyBalanced, abc, nil, "[0 1 2]"},
		{"balanced, fewest first", cloudspec.StrategyBalanced, abc, map[string]int{"a": 3, "b": 1, "c": 2}, "[1 2 0]"},
		{"balanced, ties in written order", cloudspec.StrategyBalanced, abc, map[string]int{"a": 1, "b": 0, "c": 0}, "[1 2 0]"},
		{"balanced, zones not in the template ignored", cloudspec.StrategyBalanced, abc, map[string]int{"z": 9, "c": 1}, "[0 1 2]"},
		{"balanced, offerings of one zone stay together in written order", cloudspec.StrategyBalanced, aab, map[string]int{"a": 1}, "[2 0 1]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := OfferingOrder(tt.strategy, tt.offerings, tt.live)
			if s := fmt.Sprint(got); s != tt.want {
				t.Errorf("order %s, want %s", s, tt.want)
			}
		})
	}
}

func TestLiveByZone(t *testing.T) {
	insts := []Instance{
		{Zone: "a", State: StateRunning},
		{Zone: "a", State: StateCreating},
		{Zone: "a", State: StateRunning, Released: true},
		{Zone: "b", State: StateDeleted},
		{Zone: "", State: StateRunning},
		{Zone: "b", State: StatePendingDeletion},
	}
	got := LiveByZone(func(yield func(*Instance) bool) {
		for i := range insts {
			if !yield(&insts[i]) {
				return
			}
		}
	})
	if fmt.Sprint(got) != "map[a:2 b:1]" {
		t.Errorf("live by zone %v, want a:2 b:1", got)
	}
}

func TestBatchIDCarriesTheOfferingOrder(t *testing.T) {
	for _, order := range [][]int{{2, 0, 1}, {1, 0}, {19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0}} {
		id := WithOfferingOrder("b-abcdefghijklmnop", order)
		if got := OfferingOrderOf(id); fmt.Sprint(got) != fmt.Sprint(order) {
			t.Errorf("%s carries %v, want %v", id, got, order)
		}
		if tok := NewClientToken(id); tok != "nodesmith-"+id {
			t.Errorf("client token %s truncates batch %s", tok, id)
		}
	}
	// The written order needs no suffix; a batch id without one (or made
	// of IDAlphabet characters only) carries none.
	if id := WithOfferingOrder("b-oabc", []int{0, 1, 2}); id != "b-oabc" {
		t.Errorf("identity order: %s", id)
	}
	for _, id := range []string{"b-oabcdef", "b-" + strings.Repeat("o", 16), "b-x--", "b-x--!"} {
		if got := OfferingOrderOf(id); got != nil {
			t.Errorf("%s carries %v, want none", id, got)
		}
	}
	tmpl := InstanceTemplate{CapacityType: cloudspec.CapacitySpot, Offerings: []cloudspec.Offering{
		{Zone: "a", InstanceType: "t"}, {Zone: "b", InstanceType: "t", CapacityType: cloudspec.CapacityOnDemand},
	}}
	if got := BatchOfferings(tmpl, []int{1, 0}); fmt.Sprint(got) != "[{b  t on-demand} {a  t spot}]" {
		t.Errorf("batch offerings %v", got)
	}
	// An order that no longer fits the template (it changed): as written.
	if got := BatchOfferings(tmpl, []int{2, 0, 1}); fmt.Sprint(got) != "[{a  t spot} {b  t on-demand}]" {
		t.Errorf("stale order: %v", got)
	}
}
