package alibaba

import (
	"reflect"
	"testing"

	ecs "github.com/alibabacloud-go/ecs-20140526/v7/client"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
)

// The gateway and the configuration loader accept a template's parameters
// by libs/cloudspec's RunInstances schema; this adapter decodes them into
// the SDK's request. They must be the same shape.
func TestCloudspecMatchesTheSDK(t *testing.T) {
	spec, ok := cloudspec.Lookup(Provider)
	if !ok {
		t.Fatalf("libs/cloudspec does not know %q", Provider)
	}
	if err := spec.CheckRequest(reflect.TypeFor[ecs.RunInstancesRequest]()); err != nil {
		t.Fatal(err)
	}
	if err := spec.CheckRequest(reflect.TypeFor[ecs.DescribeInstancesRequest]()); err == nil {
		t.Fatal("DescribeInstancesRequest passed for RunInstancesRequest")
	}
}
