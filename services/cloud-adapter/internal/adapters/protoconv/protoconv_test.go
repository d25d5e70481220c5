package protoconv_test

import (
	"reflect"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nodesmith/nodesmith/libs/contract"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/protoconv"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
)

func TestCommandCarriesEveryField(t *testing.T) {
	wt := &cloudv1.Target{Provider: "tencentcloud", Account: "prod", Region: "ap-beijing"}
	dt := domain.Target{Provider: "tencentcloud", Account: "prod", Region: "ap-beijing"}
	wref := &cloudv1.InstanceRef{InstanceId: "i1", Attempt: 2, CloudId: "ins-1", Group: "g", Adopted: true}
	dref := domain.InstanceRef{InstanceID: "i1", Attempt: 2, CloudID: "ins-1", Group: "g", Adopted: true}
	for name, tc := range map[string]struct {
		in   *cloudv1.Command
		want domain.Command
	}{
		"create": {
			&cloudv1.Command{Body: &cloudv1.Command_Create{Create: &cloudv1.CreateInstances{
				BatchId: "b", ClientToken: "tok", Target: wt, TemplateName: "small", ParametersJson: `{}`,
				Instances: []*cloudv1.InstanceRef{wref}, ClusterId: "c", Group: "g", Zone: "z", InstanceType: "S5",
				SecretParameters: map[string]string{"p": "sealed"},
			}}},
			&domain.CreateInstances{
				BatchID: "b", ClientToken: "tok", Target: dt, TemplateName: "small", ParametersJSON: `{}`,
				Instances: []domain.InstanceRef{dref}, ClusterID: "c", Group: "g", Zone: "z", InstanceType: "S5",
				SecretParameters: map[string]string{"p": "sealed"},
			},
		},
		"watch": {
			&cloudv1.Command{Body: &cloudv1.Command_Watch{Watch: &cloudv1.WatchInstances{Target: wt, Instances: []*cloudv1.InstanceRef{wref}}}},
			&domain.WatchInstances{Target: dt, Instances: []domain.InstanceRef{dref}},
		},
		"terminate": {
			&cloudv1.Command{Body: &cloudv1.Command_Terminate{Terminate: &cloudv1.TerminateInstances{
				Target: wt, Instances: []*cloudv1.InstanceRef{wref}, ClusterId: "c"}}},
			&domain.TerminateInstances{Target: dt, Instances: []domain.InstanceRef{dref}, ClusterID: "c"},
		},
		"inventory": {
			&cloudv1.Command{Body: &cloudv1.Command_ListInventory{ListInventory: &cloudv1.ListInventory{Target: wt, ClusterId: "c", RequestId: "r"}}},
			&domain.ListInventory{Target: dt, ClusterID: "c", RequestID: "r"},
		},
		"tag": {
			&cloudv1.Command{Body: &cloudv1.Command_Tag{Tag: &cloudv1.TagInstances{
				RequestId: "r", Target: wt, ClusterId: "c", Instances: []*cloudv1.InstanceRef{wref}, CheckOnly: true}}},
			&domain.TagInstances{RequestID: "r", Target: dt, ClusterID: "c", Instances: []domain.InstanceRef{dref}, CheckOnly: true},
		},
		"no body": {&cloudv1.Command{}, nil},
	} {
		if got := protoconv.Command(tc.in); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%s: Command = %#v, want %#v", name, got, tc.want)
		}
	}
}

// The events' wire shape: absent stays absent (no target, no creation
// time, no error), and states and kinds keep their wire numbers.
func TestEventWireShape(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	ref := domain.InstanceRef{InstanceID: "i1", Attempt: 2, CloudID: "ins-1", Group: "g", Adopted: true}
	wref := &cloudv1.InstanceRef{InstanceId: "i1", Attempt: 2, CloudId: "ins-1", Group: "g", Adopted: true}
	for name, tc := range map[string]struct {
		in   domain.Event
		want *cloudv1.Event
	}{
		"observed, unknown state": {
			&domain.InstanceObserved{Instance: ref, State: domain.StateUnknown, PrivateIP: "10.0.0.1", ObservedAt: at, Zone: "z"},
			&cloudv1.Event{Body: &cloudv1.Event_Observed{Observed: &cloudv1.InstanceObserved{
				Instance: wref, State: cloudv1.CloudState_CLOUD_STATE_UNSPECIFIED, PrivateIp: "10.0.0.1", ObservedAt: timestamppb.New(at), Zone: "z"}}},
		},
		"observed launch failure for capacity": {
			&domain.InstanceObserved{Instance: ref, State: domain.StateLaunchFailed, ObservedAt: at, Zone: "z",
				LaunchError: &domain.CloudError{Kind: contract.ErrorKindCapacity, Code: "ResourceInsufficient.SpecifiedInstanceType", Message: "launch failed in zone z"}},
			&cloudv1.Event{Body: &cloudv1.Event_Observed{Observed: &cloudv1.InstanceObserved{
				Instance: wref, State: cloudv1.CloudState_CLOUD_STATE_LAUNCH_FAILED, ObservedAt: timestamppb.New(at), Zone: "z",
				LaunchError: &cloudv1.CloudError{Kind: cloudv1.ErrorKind_ERROR_KIND_CAPACITY, Code: "ResourceInsufficient.SpecifiedInstanceType", Message: "launch failed in zone z"}}}},
		},
		"inventory without target or creation time": {
			&domain.Inventory{RequestID: "r", Items: []domain.InventoryItem{{CloudID: "ins-1", State: domain.StateStopped}}},
			&cloudv1.Event{Body: &cloudv1.Event_Inventory{Inventory: &cloudv1.Inventory{RequestId: "r",
				Items: []*cloudv1.InventoryItem{{CloudId: "ins-1", State: cloudv1.CloudState_CLOUD_STATE_STOPPED}}}}},
		},
		"create failed of unknown kind": {
			&domain.CreateFailed{BatchID: "b", Instances: []domain.InstanceRef{ref}, Error: &domain.CloudError{Kind: contract.ErrorKindUnknown, Message: "boom"}},
			&cloudv1.Event{Body: &cloudv1.Event_CreateFailed{CreateFailed: &cloudv1.CreateFailed{BatchId: "b",
				Instances: []*cloudv1.InstanceRef{wref}, Error: &cloudv1.CloudError{Message: "boom"}}}},
		},
		"tagged": {
			&domain.InstancesTagged{RequestID: "r", Target: domain.Target{Provider: "p"}, CheckOnly: true,
				Results: []domain.TagResult{{Instance: ref, State: domain.StateNotFound,
					Error: &domain.CloudError{Kind: contract.ErrorKindNotFound, Code: "InstanceNotFound"}}}},
			&cloudv1.Event{Body: &cloudv1.Event_Tagged{Tagged: &cloudv1.InstancesTagged{RequestId: "r", Target: &cloudv1.Target{Provider: "p"}, CheckOnly: true,
				Results: []*cloudv1.TagResult{{Instance: wref, State: cloudv1.CloudState_CLOUD_STATE_NOT_FOUND,
					Error: &cloudv1.CloudError{Kind: cloudv1.ErrorKind_ERROR_KIND_NOT_FOUND, Code: "InstanceNotFound"}}}}}},
		},
		"terminated": {
			&domain.InstancesTerminated{Instances: []domain.InstanceRef{ref}},
			&cloudv1.Event{Body: &cloudv1.Event_Terminated{Terminated: &cloudv1.InstancesTerminated{Instances: []*cloudv1.InstanceRef{wref}}}},
		},
	} {
		got := protoconv.Event(tc.in)
		if !proto.Equal(got, tc.want) {
			t.Errorf("%s: Event = %v, want %v", name, got, tc.want)
		}
	}
}
