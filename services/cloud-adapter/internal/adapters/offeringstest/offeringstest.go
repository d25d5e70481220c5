// Package offeringstest is the contract of ports.OfferingMarks, run
// against every implementation (the NATS KV adapter and the memory fake).
package offeringstest

import (
	"context"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"
	"github.com/nodesmith/nodesmith/libs/testwait"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// Replicas returns two views of one shared store of marks, as two cloud
// adapter replicas have.
type Replicas func(t *testing.T) (a, b ports.OfferingMarks)

var (
	t0     = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	target = domain.Target{Provider: "tencent", Account: "acct", Region: "ap-test"}
	zoneA  = domain.Offering{Zone: "ap-test-1", SubnetID: "subnet-a", InstanceType: "S5.MEDIUM2", CapacityType: "on-demand"}
	reason = &domain.CloudError{Kind: contract.ErrorKindCapacity, Code: "ResourceInsufficient.SpecifiedInstanceType", Message: "sold out"}
)

// Run runs the contract.
func Run(t *testing.T, newReplicas Replicas) {
	t.Run("a mark is seen at once by its writer with every field", func(t *testing.T) {
		a, _ := newReplicas(t)
		if _, ok := a.Unavailable(target, zoneA); ok {
			t.Fatal("an offering never marked is unavailable")
		}
		m := domain.OfferingMark{Target: target, Offering: zoneA, At: t0, Until: t0.Add(3 * time.Minute), Reason: reason}
		if err := a.Mark(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		got, ok := a.Unavailable(target, zoneA)
		if !ok {
			t.Fatal("the writer does not see its own mark")
		}
		check(t, got, m)
		if !got.Live(t0.Add(time.Minute)) || got.Live(t0.Add(3*time.Minute)) {
			t.Errorf("mark until %s: live at +1m %v, at +3m %v", got.Until, got.Live(t0.Add(time.Minute)), got.Live(t0.Add(3*time.Minute)))
		}
	})

	t.Run("the subnet is not part of a mark; zone, type, capacity and target are", func(t *testing.T) {
		a, _ := newReplicas(t)
		m := domain.OfferingMark{Target: target, Offering: zoneA, At: t0, Until: t0.Add(time.Minute), Reason: reason}
		if err := a.Mark(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		other := zoneA
		other.SubnetID = "subnet-other"
		if _, ok := a.Unavailable(target, other); !ok {
			t.Error("the same zone and type in another subnet is not marked")
		}
		for name, o := range map[string]domain.Offering{
			"zone":     {Zone: "ap-test-2", InstanceType: zoneA.InstanceType, CapacityType: zoneA.CapacityType},
			"type":     {Zone: zoneA.Zone, InstanceType: "S5.MEDIUM4", CapacityType: zoneA.CapacityType},
			"capacity": {Zone: zoneA.Zone, InstanceType: zoneA.InstanceType, CapacityType: "spot"},
		} {
			if _, ok := a.Unavailable(target, o); ok {
				t.Errorf("another %s is marked too", name)
			}
		}
		for name, tg := range map[string]domain.Target{
			"account":  {Provider: target.Provider, Account: "other", Region: target.Region},
			"region":   {Provider: target.Provider, Account: target.Account, Region: "ap-other"},
			"provider": {Provider: "alibaba", Account: target.Account, Region: target.Region},
		} {
			if _, ok := a.Unavailable(tg, zoneA); ok {
				t.Errorf("the offering in another %s is marked too", name)
			}
		}
	})

	t.Run("a mark is shared with the other replicas and replaced by a later one", func(t *testing.T) {
		a, b := newReplicas(t)
		m := domain.OfferingMark{Target: target, Offering: zoneA, At: t0, Until: t0.Add(time.Minute), Reason: reason}
		if err := a.Mark(context.Background(), m); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 10*time.Second, "the other replica sees the mark", func() bool {
			_, ok := b.Unavailable(target, zoneA)
			return ok
		})
		got, _ := b.Unavailable(target, zoneA)
		check(t, got, m)

		later := m
		later.At, later.Until = t0.Add(2*time.Minute), t0.Add(5*time.Minute)
		if err := b.Mark(context.Background(), later); err != nil {
			t.Fatal(err)
		}
		testwait.Until(t, 10*time.Second, "the first replica sees the later mark", func() bool {
			got, ok := a.Unavailable(target, zoneA)
			return ok && got.Until.Equal(later.Until)
		})
	})
}

func check(t *testing.T, got, want domain.OfferingMark) {
	t.Helper()
	want.Offering.SubnetID = ""
	if got.Target != want.Target || got.Offering != want.Offering || !got.At.Equal(want.At) || !got.Until.Equal(want.Until) {
		t.Errorf("mark = %+v, want %+v", got, want)
	}
	if got.Reason == nil || *got.Reason != *want.Reason {
		t.Errorf("mark reason = %+v, want %+v", got.Reason, want.Reason)
	}
}
