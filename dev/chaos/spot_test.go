package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"
)

// TestSpotTemplate: the run's configuration gives the spot group a
// SPOTPAID template with a max price and the spot label, and leaves the
// other groups on demand.
func TestSpotTemplate(t *testing.T) {
	r := &run{cfg: defaults(true)}
	conf, err := spotTemplate(r.groupsConfig())
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		InstanceTemplates map[string]struct {
			Parameters map[string]any `json:"parameters"`
		} `json:"instanceTemplates"`
		NodeGroups []struct {
			ID           string `json:"id"`
			NodeTemplate struct {
				Labels map[string]string `json:"labels"`
			} `json:"nodeTemplate"`
		} `json:"nodeGroups"`
	}
	if err := json.Unmarshal(conf, &c); err != nil {
		t.Fatal(err)
	}
	for name, tpl := range c.InstanceTemplates {
		spot := name == "tpl-"+spotZone
		if got := tpl.Parameters["InstanceChargeType"]; (got == "SPOTPAID") != spot {
			t.Errorf("template %s: InstanceChargeType %v", name, got)
		}
		if mo, _ := json.Marshal(tpl.Parameters["InstanceMarketOptions"]); spot != strings.Contains(string(mo), `"MaxPrice":"`+spotMaxPrice+`"`) {
			t.Errorf("template %s: InstanceMarketOptions %s", name, mo)
		}
	}
	for _, g := range c.NodeGroups {
		if got := g.NodeTemplate.Labels[contract.LabelCapacityType]; (got == contract.CapacityTypeSpot) != (g.ID == spotGroup) {
			t.Errorf("group %s: capacity-type label %q", g.ID, got)
		}
	}
	if _, err := spotTemplate([]byte(`{"instanceTemplates":{},"nodeGroups":[]}`)); err == nil {
		t.Error("a configuration without the spot template was accepted")
	}
}

func TestDurationStats(t *testing.T) {
	p50, mx := durationStats([]time.Duration{3 * time.Second, time.Second, 2 * time.Second, 10 * time.Second})
	if p50 != 2*time.Second || mx != 10*time.Second {
		t.Errorf("p50 %s max %s", p50, mx)
	}
	if p50, mx := durationStats(nil); p50 != 0 || mx != 0 {
		t.Errorf("empty: %s %s", p50, mx)
	}
}
