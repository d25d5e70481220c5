package jetstream

import (
	"testing"

	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"

	"github.com/nodesmith/nodesmith/libs/contract"
)

// TestCloudErrKindPinnedToProto: cloudErr converts by number, so every
// nodesmith.cloud.v1.ErrorKind value must be the contract kind of the same
// name, with no contract kind the proto lacks.
func TestCloudErrKindPinnedToProto(t *testing.T) {
	if len(cloudv1.ErrorKind_name) != len(contract.ErrorKinds) {
		t.Fatalf("proto has %d error kinds, contract %d", len(cloudv1.ErrorKind_name), len(contract.ErrorKinds))
	}
	for v, name := range cloudv1.ErrorKind_name {
		got := cloudErr(&cloudv1.CloudError{Kind: cloudv1.ErrorKind(v)}).Kind
		if got.ProtoName() != name {
			t.Errorf("proto %s (%d) arrives as %s", name, v, got.ProtoName())
		}
	}
}
