package yamlconfig_test

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/cloudshapes"
	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/yamlconfig"
)

// The offerings of a file's templates, named and inline in a group, are
// checked against the cloud's shapes: problems at the offering's field
// and line, like the file's others.
func TestFileOfferingShapes(t *testing.T) {
	const file = `
accounts:
  dev:
    region: ap-guangzhou
instanceTemplates:
  web:
    account: dev
    offerings:
      - {zone: ap-guangzhou-3, instanceType: S5.MEDIUM4}
      - {zone: ap-guangzhou-4, instanceType: SR1.MEDIUM4}
    parameters: {ImageId: img-1}
nodeGroups:
  - id: inline
    maxSize: 3
    instanceTemplate:
      account: dev
      offerings:
        - {zone: ap-guangzhou-3, instanceType: S5.MEDIUM4}
        - {zone: ap-guangzhou-9, instanceType: S5.MEDIUM4}
      parameters: {ImageId: img-1}
  - id: named
    maxSize: 3
    instanceTemplate: web
`
	cfg, err := yamlconfig.Parse("f.yaml", []byte(file), "")
	if err != nil {
		t.Fatal(err)
	}
	var asked []cloudshapes.Target
	ask := func(_ context.Context, tg cloudshapes.Target, _, _ []string) ([]cloudspec.Shape, error) {
		asked = append(asked, tg)
		return []cloudspec.Shape{
			{Zone: "ap-guangzhou-3", InstanceType: "S5.MEDIUM4", VCPU: 2, MemoryMiB: 4096, Arch: "amd64"},
			{Zone: "ap-guangzhou-4", InstanceType: "SR1.MEDIUM4", VCPU: 2, MemoryMiB: 4096, Arch: "arm64"},
		}, nil
	}
	unchecked, err := cfg.CheckShapes(context.Background(), ask, time.Second)
	var fe *yamlconfig.Error
	if !errors.As(err, &fe) || unchecked != nil {
		t.Fatalf("got %v, %v", unchecked, err)
	}
	want := []yamlconfig.Problem{
		{Path: "instanceTemplates.web.offerings[1].instanceType", Line: 10, Msg: "SR1.MEDIUM4 (2 vCPU, 4 GiB, arm64) differs from offerings[0] S5.MEDIUM4 (2 vCPU, 4 GiB, amd64): the types of one template must have one shape"},
		{Path: "nodeGroups[0].instanceTemplate.offerings[1].instanceType", Line: 19, Msg: "S5.MEDIUM4 is not offered in ap-guangzhou-9"},
	}
	if !reflect.DeepEqual(fe.Problems, want) {
		t.Errorf("problems %+v\nwant %+v", fe.Problems, want)
	}
	// One question per template defined (the group naming web asks none).
	target := cloudshapes.Target{Provider: "tencentcloud", Account: "dev", Region: "ap-guangzhou"}
	if !reflect.DeepEqual(asked, []cloudshapes.Target{target, target}) {
		t.Errorf("asked %v", asked)
	}
}
