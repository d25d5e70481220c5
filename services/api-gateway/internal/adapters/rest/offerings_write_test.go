package rest_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"
)

// Offerings, capacity type and max price (issue 16) on a template write:
// checked by libs/cloudspec, stored, shown, refused with 422 naming the
// field.
func TestTemplateOfferings(t *testing.T) {
	f, _ := newCatalogFixture(t, testKey(t))
	if r := f.do(t, call{method: "PUT", path: "/api/v1/accounts/team", token: adminToken, body: `{"provider":"tencentcloud","regions":["ap-guangzhou"]}`}); r.status != http.StatusCreated {
		t.Fatalf("account: %d %s", r.status, r.body)
	}
	const offerings = `"offerings":[{"zone":"ap-guangzhou-3","instanceType":"S5.MEDIUM4"},{"zone":"ap-guangzhou-4","instanceType":"S5.MEDIUM4","subnetId":"subnet-4"},{"zone":"ap-guangzhou-3","instanceType":"S5.MEDIUM4","capacityType":"on-demand"}]`
	r := f.do(t, call{method: "PUT", path: "/api/v1/templates/spot", token: adminToken,
		body: `{"account":"team","capacityType":"spot","maxPrice":"0.08","offeringStrategy":"balanced",` + offerings + `,"parameters":{"ImageId":"img-1"}}`})
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	tm := lastCatalogPut(t, f).GetEntry().GetTemplate()
	if tm.GetZone() != "ap-guangzhou-3" || tm.GetInstanceType() != "S5.MEDIUM4" || tm.GetCapacityType() != "spot" || tm.GetMaxPrice() != "0.08" ||
		tm.GetOfferingStrategy() != "balanced" || len(tm.GetOfferings()) != 3 || tm.GetOfferings()[1].GetSubnetId() != "subnet-4" ||
		tm.GetOfferings()[2].GetCapacityType() != "on-demand" {
		t.Fatalf("record %v", tm)
	}
	if p := tm.GetParametersJson(); !strings.Contains(p, `"InstanceChargeType":"SPOTPAID"`) || !strings.Contains(p, `"MaxPrice":"0.08"`) {
		t.Errorf("spot not written into the parameters: %s", p)
	}
	// The view shows them.
	r = f.do(t, call{method: "GET", path: "/api/v1/templates/spot", token: readOnlyToken})
	var view struct {
		Zone, CapacityType, MaxPrice, OfferingStrategy string
		Offerings                                      []struct{ Zone, SubnetID, InstanceType, CapacityType string }
	}
	if err := json.Unmarshal(r.body, &view); err != nil || r.status != http.StatusOK {
		t.Fatalf("get: %d %s", r.status, r.body)
	}
	if view.CapacityType != "spot" || view.MaxPrice != "0.08" || view.OfferingStrategy != "balanced" || len(view.Offerings) != 3 || view.Offerings[1].SubnetID != "subnet-4" {
		t.Errorf("view %s", r.body)
	}

	// A PATCH of the offerings brings the new first zone.
	r = f.do(t, call{method: "PATCH", path: "/api/v1/templates/spot", token: adminToken, contentType: "application/merge-patch+json",
		body: `{"offerings":[{"zone":"ap-guangzhou-6","instanceType":"S5.MEDIUM4"},{"zone":"ap-guangzhou-3","instanceType":"S5.MEDIUM4"}]}`})
	if tm := lastCatalogPut(t, f).GetEntry().GetTemplate(); r.status != http.StatusOK || tm.GetZone() != "ap-guangzhou-6" ||
		!strings.Contains(tm.GetParametersJson(), `"Zone":"ap-guangzhou-6"`) || len(tm.GetOfferings()) != 2 || tm.GetCapacityType() != "spot" {
		t.Fatalf("patch offerings: %d %s %v", r.status, r.body, tm)
	}

	for _, tt := range []struct {
		name, body string
		status     int
		field      string
	}{
		{"offering without a zone", `{"account":"team","offerings":[{"zone":"ap-guangzhou-3","instanceType":"S5.MEDIUM4"},{"instanceType":"S5.MEDIUM4"}]}`, 422, "offerings[1].zone"},
		{"repeated offering", `{"account":"team","offerings":[{"zone":"z","instanceType":"t"},{"zone":"z","instanceType":"t"}]}`, 422, "offerings[1]"},
		{"offering capacity", `{"account":"team","offerings":[{"zone":"z","instanceType":"t","capacityType":"cheap"}]}`, 422, "offerings[0].capacityType"},
		{"strategy", `{"account":"team","offeringStrategy":"random","offerings":[{"zone":"z","instanceType":"t"}]}`, 422, "offeringStrategy"},
		{"capacity type", `{"account":"team","capacityType":"reserved"}`, 422, "capacityType"},
		{"max price", `{"account":"team","capacityType":"spot","maxPrice":"-1"}`, 422, "maxPrice"},
		{"spot without a max price", `{"account":"team","capacityType":"spot"}`, 422, "maxPrice"},
		{"zone other than the first offering's", `{"account":"team","zone":"y","offerings":[{"zone":"z","instanceType":"t"}]}`, 400, "zone"},
		{"unknown offering field", `{"account":"team","offerings":[{"zone":"z","instanceType":"t","size":2}]}`, 400, "offerings[0].size"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := f.do(t, call{method: "PUT", path: "/api/v1/templates/bad", token: adminToken, body: tt.body})
			if r.status != tt.status {
				t.Fatalf("status %d, want %d: %s", r.status, tt.status, r.body)
			}
			if e := errorBody(t, r); e.Details["field"] != tt.field {
				t.Errorf("details.field = %v, want %s (%s)", e.Details["field"], tt.field, e.Message)
			}
		})
	}

	// An inline template in a group gets the same rules, under
	// instanceTemplate.
	r = f.do(t, call{method: "PUT", path: "/api/v1/nodegroups/inline", token: adminToken,
		body: `{"minSize":0,"maxSize":2,"instanceTemplate":{"provider":"tencentcloud","account":"team","offerings":[{"zone":"z","instanceType":"t"},{"zone":"","instanceType":"t"}]}}`})
	if e := errorBody(t, r); r.status != http.StatusUnprocessableEntity || e.Details["field"] != "instanceTemplate.offerings[1].zone" {
		t.Errorf("inline: %d %s", r.status, r.body)
	}
}
