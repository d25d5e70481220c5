package grpcapi_test

import (
	"fmt"
	"strings"
	"testing"
	"unicode"

	"google.golang.org/grpc/codes"

	"github.com/nodesmith/nodesmith/libs/contract"
)

// TestContractCodesAreGRPCCodes pins contract.Code to the gRPC status codes
// (google.rpc.Code): the gateway converts one to the other by number, so
// every gRPC code must be the contract code of the same name, with none
// missing and none extra.
func TestContractCodesAreGRPCCodes(t *testing.T) {
	snake := func(s string) string {
		var b strings.Builder
		for i, r := range s {
			if unicode.IsUpper(r) && i > 0 {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
		}
		return b.String()
	}
	for c := range contract.NumCodes {
		name := codes.Code(c).String()
		if strings.HasPrefix(name, "Code(") {
			t.Fatalf("contract code %d (%s) is not a gRPC code", c, contract.Code(c))
		}
		if got, want := contract.Code(c).String(), strings.ReplaceAll(snake(name), "o_k", "ok"); got != want {
			t.Errorf("code %d: contract %q, gRPC %q", c, got, name)
		}
	}
	if name := codes.Code(contract.NumCodes).String(); name != fmt.Sprintf("Code(%d)", contract.NumCodes) {
		t.Errorf("gRPC code %d (%s) has no contract code", contract.NumCodes, name)
	}
}
