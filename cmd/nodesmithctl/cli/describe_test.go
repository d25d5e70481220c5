package cli

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/restapi"
)

// describe group shows the template's offerings in order, the marked one
// unavailable until when (and how long from now) and why; a group without
// offerings says so.
func TestDescribeGroupOfferings(t *testing.T) {
	now := time.Date(2026, 11, 26, 8, 0, 0, 0, time.UTC)
	g := restapi.Group{ID: "spot", MaxSize: 5, Offerings: &restapi.GroupOfferings{Strategy: "balanced", Items: []restapi.OfferingStatus{
		{Zone: "ap-guangzhou-3", InstanceType: "S5.LARGE8", CapacityType: "spot", UnavailableUntil: "2026-11-26T08:03:00Z",
			Reason: &restapi.OfferingReason{Code: "ResourceInsufficient.SpecifiedInstanceType", Message: "sold out\nin ap-guangzhou-3"}},
		{Zone: "ap-guangzhou-4", SubnetID: "subnet-4", InstanceType: "S5.LARGE8", CapacityType: "spot", Available: true},
	}}}
	var b bytes.Buffer
	if err := describeGroup(&b, g, nil, nil, now); err != nil {
		t.Fatal(err)
	}
	want := "Offerings (balanced):\n" +
		"  ZONE            SUBNET    TYPE       CAPACITY  STATE\n" +
		"  ap-guangzhou-3  -         S5.LARGE8  spot      unavailable until 2026-11-26T08:03:00Z (in 3m): ResourceInsufficient.SpecifiedInstanceType sold out in ap-guangzhou-3\n" +
		"  ap-guangzhou-4  subnet-4  S5.LARGE8  spot      available\n" +
		"Instances:\n"
	if !strings.Contains(b.String(), want) {
		t.Errorf("describe group:\n%s\nwant the section:\n%s", b.String(), want)
	}

	b.Reset()
	g.Offerings = nil
	if err := describeGroup(&b, g, nil, nil, now); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "Offerings:\n  (none: the template's zone and instance type only)\nInstances:\n") {
		t.Errorf("describe group without offerings:\n%s", b.String())
	}
}
