package tencent

import (
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

func TestLaunchErrorClassification(t *testing.T) {
	for _, tc := range []struct {
		msg  string
		kind ports.ErrorKind
		code string
	}{
		{"ResourceInsufficient.ZoneSoldOutForSpecifiedInstance: The specified instance type S5.MEDIUM4 is sold out in zone ap-guangzhou-3.", ports.ErrorKindCapacity, "ResourceInsufficient.ZoneSoldOutForSpecifiedInstance"},
		{"ResourcesSoldOut.SpecifiedInstanceType", ports.ErrorKindCapacity, "ResourcesSoldOut.SpecifiedInstanceType"},
		{"InvalidParameterValue.InsufficientOffering: spot", ports.ErrorKindCapacity, "InvalidParameterValue.InsufficientOffering"},
		{"LimitExceeded.SpotQuota", ports.ErrorKindCapacity, "LimitExceeded.SpotQuota"},
		// No code: words meaning out of stock, English or Chinese.
		{"Launch failed: the resource is sold out", ports.ErrorKindCapacity, ""},
		{"创建失败：库存不足", ports.ErrorKindCapacity, ""},
		{"Insufficient resources in the zone", ports.ErrorKindCapacity, ""},
		// A known code that is not about capacity keeps its kind, even
		// when the words would say otherwise.
		{"InvalidImageId.NotFound: insufficient image info", ports.ErrorKindInvalidParameters, "InvalidImageId.NotFound"},
		{"the simulated host failed to create the instance", ports.ErrorKindUnknown, ""},
		// An unknown code is no code: the words decide.
		{"Foo.Bar: something else", ports.ErrorKindUnknown, ""},
	} {
		le := launchError(tc.msg, "ap-guangzhou-3", "S5.MEDIUM4")
		if le == nil || le.Kind != tc.kind || le.Code != tc.code {
			t.Errorf("launchError(%q) = %+v, want kind %s code %q", tc.msg, le, tc.kind, tc.code)
			continue
		}
		if !strings.Contains(le.Message, "ap-guangzhou-3") || !strings.Contains(le.Message, "S5.MEDIUM4") || !strings.Contains(le.Message, tc.msg) {
			t.Errorf("message %q must name zone, type and the cloud's reason", le.Message)
		}
	}
	if le := launchError("  ", "z", "t"); le != nil {
		t.Errorf("no reason: %+v, want nil", le)
	}
}
