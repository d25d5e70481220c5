package cloudspec

import (
	"reflect"
	"regexp"
	"strings"

	"github.com/nodesmith/nodesmith/libs/cloudspec/internal/alibabaecs"
	"github.com/nodesmith/nodesmith/libs/cloudspec/internal/tencentcvm"
)

var (
	// qcloudProviderID is the format of the Tencent cloud-controller-manager
	// (TKE) and of Cluster Autoscaler's tencentcloud provider:
	// qcloud:///<zone>/<instance id>.
	qcloudProviderID = regexp.MustCompile(`^qcloud:///([a-z0-9-]+)/(ins-[a-z0-9]+)$`)
	// alicloudProviderID is the format of the Alibaba cloud-controller-
	// manager and of Cluster Autoscaler's alicloud provider:
	// <region>.<instance id>, which the CCM also accepts with an
	// "alicloud://" scheme in front.
	alicloudProviderID = regexp.MustCompile(`^(?:alicloud://)?([a-z0-9-]+)\.(i-[a-z0-9]+)$`)
)

func init() {
	register(Provider{
		Name:  Tencent,
		Title: "Tencent Cloud",
		Credentials: CredentialNames{
			KeyID: "SecretId", Secret: "SecretKey", SecurityToken: "Token",
		},
		ZoneField:         "Placement.Zone",
		InstanceTypeField: "InstanceType",
		SubnetField:       "VirtualPrivateCloud.SubnetId",
		request:           reflect.TypeFor[tencentcvm.RunInstancesRequest](),
		requestName:       "Tencent Cloud RunInstances request",
		capacity:          tencentCapacity,
		capacityFields:    []string{"InstanceChargeType", "InstanceMarketOptions"},
		isSpot: func(obj map[string]any) bool {
			charge, _ := lookupString(obj, "InstanceChargeType")
			return charge == tencentSpotPaid
		},
		checkSpot: tencentCheckSpot,
		providerID: func(_, zone, cloudID string) string {
			return "qcloud:///" + zone + "/" + cloudID
		},
		parseProviderID: func(s string) (ProviderIDParts, bool) {
			m := qcloudProviderID.FindStringSubmatch(s)
			if m == nil {
				return ProviderIDParts{}, false
			}
			return ProviderIDParts{Zone: m[1], CloudID: m[2]}, true
		},
	})
	register(Provider{
		Name:  Alibaba,
		Title: "Alibaba Cloud",
		Credentials: CredentialNames{
			KeyID: "AccessKeyId", Secret: "AccessKeySecret", SecurityToken: "SecurityToken",
		},
		ZoneField:         "ZoneId",
		InstanceTypeField: "InstanceType",
		SubnetField:       "VSwitchId",
		request:           reflect.TypeFor[alibabaecs.RunInstancesRequest](),
		requestName:       "Alibaba Cloud ECS RunInstances request",
		capacity:          alibabaCapacity,
		capacityFields:    []string{"SpotStrategy", "SpotPriceLimit"},
		isSpot: func(obj map[string]any) bool {
			s, _ := lookupString(obj, "SpotStrategy")
			return s == alibabaSpotWithLimit || s == alibabaSpotAsPriceGo
		},
		checkSpot: alibabaCheckSpot,
		required: [][]string{
			{"ZoneId"}, {"InstanceType"}, {"ImageId"}, {"VSwitchId"},
			{"SecurityGroupId", "SecurityGroupIds"},
		},
		forbidden: map[string]string{
			"RegionId":    "the region is the template's region",
			"Amount":      "nodesmith sets it (the size of a batch)",
			"MinAmount":   "nodesmith creates a batch whole or not at all",
			"ClientToken": "nodesmith sets it to make retries idempotent",
			"Tag":         "nodesmith tags its instances itself",
		},
		providerID: func(region, _, cloudID string) string {
			return region + "." + cloudID
		},
		parseProviderID: func(s string) (ProviderIDParts, bool) {
			m := alicloudProviderID.FindStringSubmatch(s)
			if m == nil {
				return ProviderIDParts{}, false
			}
			return ProviderIDParts{Region: m[1], CloudID: m[2]}, true
		},
	})
}

// fieldPath splits a dotted field path ("Placement.Zone").
func fieldPath(p string) []string { return strings.Split(p, ".") }
