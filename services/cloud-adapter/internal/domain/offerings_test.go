package domain_test

import (
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
)

func TestOfferingTokenIsStableDistinctAndShort(t *testing.T) {
	a := domain.Offering{Zone: "ap-test-1", InstanceType: "S5.MEDIUM2", CapacityType: "on-demand"}
	variants := []domain.Offering{
		a,
		{Zone: "ap-test-2", InstanceType: "S5.MEDIUM2", CapacityType: "on-demand"},
		{Zone: "ap-test-1", InstanceType: "S5.MEDIUM4", CapacityType: "on-demand"},
		{Zone: "ap-test-1", InstanceType: "S5.MEDIUM2", CapacityType: "spot"},
		{Zone: "ap-test-1", SubnetID: "subnet-1", InstanceType: "S5.MEDIUM2", CapacityType: "on-demand"},
		// Field boundaries matter: "ap-test-1"+"S5" must not equal "ap-test-1S"+"5".
		{Zone: "ap-test-1S", InstanceType: "5.MEDIUM2", CapacityType: "on-demand"},
	}
	long := strings.Repeat("t", 200)
	seen := map[string]string{}
	for _, chunk := range []string{"batch-1", "batch-1-0", long} {
		for _, inst := range []string{"", "i-1", "i-2"} {
			for _, o := range variants {
				tok := domain.OfferingToken(chunk, o, inst)
				if again := domain.OfferingToken(chunk, o, inst); again != tok {
					t.Fatalf("token not stable: %q then %q", tok, again)
				}
				if len(tok) > domain.MaxClientTokenLen {
					t.Errorf("token %q is %d characters, more than %d", tok, len(tok), domain.MaxClientTokenLen)
				}
				for _, r := range tok {
					if r > 127 || r <= ' ' {
						t.Fatalf("token %q is not printable ASCII", tok)
					}
				}
				key := chunk + "|" + inst + "|" + o.Zone + "|" + o.SubnetID + "|" + o.InstanceType + "|" + o.CapacityType
				if prev, dup := seen[tok]; dup {
					t.Errorf("token %q for %s repeats the one for %s", tok, key, prev)
				}
				seen[tok] = key
			}
		}
	}
	if tok := domain.OfferingToken("batch-1", a, ""); tok == "batch-1" {
		t.Error("the offering token must differ from the chunk token")
	}
}
