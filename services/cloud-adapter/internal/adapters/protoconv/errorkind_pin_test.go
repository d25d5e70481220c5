package protoconv

import (
	"testing"

	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"

	"github.com/nodesmith/nodesmith/libs/contract"
)

// TestErrorKindPinnedToProto pins contract.ErrorKind to
// nodesmith.cloud.v1.ErrorKind: every proto value has the same number and
// name in the contract and survives protoKind, and the contract has no kind
// the proto lacks.
func TestErrorKindPinnedToProto(t *testing.T) {
	if len(cloudv1.ErrorKind_name) != len(contract.ErrorKinds) {
		t.Fatalf("proto has %d error kinds, contract %d", len(cloudv1.ErrorKind_name), len(contract.ErrorKinds))
	}
	for v, name := range cloudv1.ErrorKind_name {
		k := contract.ErrorKind(v)
		if k.ProtoName() != name {
			t.Errorf("proto %s = %d, contract %d is %s", name, v, v, k.ProtoName())
		}
		if got := protoKind(k); got != cloudv1.ErrorKind(v) {
			t.Errorf("protoKind(%s) = %s, want %s", k, got, name)
		}
		if back := kindOf(protoKind(k)); back != k {
			t.Errorf("kindOf(protoKind(%s)) = %s", k, back)
		}
	}
}
