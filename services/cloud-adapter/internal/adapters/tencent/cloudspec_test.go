package tencent

import (
	"reflect"
	"testing"

	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
)

// The gateway and the configuration loader accept a template's parameters
// by libs/cloudspec's RunInstances schema; this adapter decodes them into
// the SDK's request. They must be the same shape, or a template the API
// accepted would fail at create time (or a valid one be refused).
func TestCloudspecMatchesTheSDK(t *testing.T) {
	spec, ok := cloudspec.Lookup(Provider)
	if !ok {
		t.Fatalf("libs/cloudspec does not know %q", Provider)
	}
	if err := spec.CheckRequest(reflect.TypeFor[cvm.RunInstancesRequest]()); err != nil {
		t.Fatal(err)
	}
	// The check can fail: another request type differs.
	if err := spec.CheckRequest(reflect.TypeFor[cvm.DescribeInstancesRequest]()); err == nil {
		t.Fatal("DescribeInstancesRequest passed for RunInstancesRequest")
	}
}
