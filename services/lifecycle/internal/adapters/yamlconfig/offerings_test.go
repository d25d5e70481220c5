package yamlconfig_test

import (
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/libs/cloudspec"

	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/yamlconfig"
)

const offeringsFile = `
accounts: {dev: {region: ap-guangzhou}}
instanceTemplates:
  multi-zone:
    account: dev
    offeringStrategy: balanced
    offerings:
      - {zone: ap-guangzhou-3, instanceType: S5.MEDIUM4, subnetId: subnet-3}
      - {zone: ap-guangzhou-4, instanceType: S5.MEDIUM4, subnetId: subnet-4}
      - {zone: ap-guangzhou-6, instanceType: S5.MEDIUM4, subnetId: subnet-6}
    parameters:
      ImageId: img-1
      VirtualPrivateCloud: {VpcId: vpc-1, SubnetId: subnet-3}
  spot-first:
    account: dev
    capacityType: spot
    maxPrice: "0.08"
    offerings:
      - {zone: ap-guangzhou-3, instanceType: S5.MEDIUM4}
      - {zone: ap-guangzhou-4, instanceType: S5.MEDIUM4}
      - {zone: ap-guangzhou-3, instanceType: S5.MEDIUM4, capacityType: on-demand}
    parameters: {ImageId: img-1}
nodeGroups:
  - {id: web, maxSize: 10, instanceTemplate: multi-zone}
  - {id: batch, maxSize: 10, instanceTemplate: spot-first}
`

func TestOfferingsLoad(t *testing.T) {
	cfg, err := yamlconfig.Parse("cfg.yaml", []byte(offeringsFile), "")
	if err != nil {
		t.Fatal(err)
	}
	web, batch := cfg.Groups[0].Template, cfg.Groups[1].Template
	if len(web.Offerings) != 3 || web.OfferingStrategy != cloudspec.StrategyBalanced || web.Offerings[2].SubnetID != "subnet-6" {
		t.Errorf("multi-zone template: %+v", web)
	}
	// The template's zone and type are the first offering's (the zone
	// label of the node CA sees), in the parameters too.
	if web.Zone != "ap-guangzhou-3" || web.InstanceType != "S5.MEDIUM4" || !strings.Contains(web.ParametersJSON, `"Zone":"ap-guangzhou-3"`) {
		t.Errorf("multi-zone template zone %s type %s parameters %s", web.Zone, web.InstanceType, web.ParametersJSON)
	}
	if batch.CapacityType != cloudspec.CapacitySpot || batch.MaxPrice != "0.08" || len(batch.Offerings) != 3 ||
		batch.Offerings[2].CapacityType != cloudspec.CapacityOnDemand {
		t.Errorf("spot-first template: %+v", batch)
	}
	// Spot is written into the parameters in Tencent's terms.
	if !strings.Contains(batch.ParametersJSON, `"InstanceChargeType":"SPOTPAID"`) || !strings.Contains(batch.ParametersJSON, `"MaxPrice":"0.08"`) {
		t.Errorf("spot parameters %s", batch.ParametersJSON)
	}
	// The catalog entry is the same template.
	for _, e := range cfg.Catalog {
		if e.Template != nil && e.Template.Name == "spot-first" && (e.Template.MaxPrice != "0.08" || len(e.Template.Offerings) != 3) {
			t.Errorf("catalog entry %+v", e.Template)
		}
	}
}

func TestBadOfferingsNameTheirField(t *testing.T) {
	tmpl := func(body string) string {
		return "accounts: {dev: {region: ap-guangzhou}}\ninstanceTemplates:\n  x:\n    account: dev\n    parameters: {ImageId: img-1}\n" + body
	}
	two := "    offerings:\n      - {zone: ap-guangzhou-3, instanceType: S5.MEDIUM4}\n"
	tests := []struct{ name, yaml, want string }{
		{"offering without a zone", tmpl(two + "      - {instanceType: S5.MEDIUM4}\n"), "instanceTemplates.x.offerings[1].zone: is required"},
		{"offering without a type", tmpl(two + "      - {zone: ap-guangzhou-4}\n"), "instanceTemplates.x.offerings[1].instanceType: is required"},
		{"repeated offering", tmpl(two + "      - {zone: ap-guangzhou-3, instanceType: S5.MEDIUM4}\n"), "instanceTemplates.x.offerings[1]: repeats offerings[0]"},
		{"offering capacity", tmpl(two + "      - {zone: ap-guangzhou-4, instanceType: S5.MEDIUM4, capacityType: cheap}\n"), "instanceTemplates.x.offerings[1].capacityType:"},
		{"unknown offering field", tmpl(two + "      - {zone: ap-guangzhou-4, type: S5.MEDIUM4}\n"), `instanceTemplates.x.offerings[1].type: unknown field "type"`},
		{"strategy", tmpl(two + "    offeringStrategy: random\n"), `instanceTemplates.x.offeringStrategy: "random" is not one of priority, balanced`},
		{"balanced without offerings", tmpl("    offeringStrategy: balanced\n"), "instanceTemplates.x.offeringStrategy: needs offerings"},
		{"zone other than the first offering's", tmpl(two + "    zone: ap-guangzhou-4\n"), `instanceTemplates.x.zone: "ap-guangzhou-4" differs from offerings[0].zone`},
		{"capacity type", tmpl("    capacityType: reserved\n"), `instanceTemplates.x.capacityType: "reserved" is not one of`},
		{"max price", tmpl("    capacityType: spot\n    maxPrice: cheap\n"), "instanceTemplates.x.maxPrice:"},
		{"spot without a max price on Tencent", tmpl("    capacityType: spot\n"), "instanceTemplates.x.maxPrice: is required for spot on Tencent Cloud"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := yamlconfig.Parse("cfg.yaml", []byte(tt.yaml), "")
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error lacks %q:\n%v", tt.want, err)
			}
		})
	}
}
