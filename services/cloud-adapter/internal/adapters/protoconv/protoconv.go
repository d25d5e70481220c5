// Package protoconv maps the cloud adapter's commands and events between
// the wire shapes (nodesmith.cloud.v1) and the domain's, in one place: the
// application and its ports speak domain types only.
package protoconv

import (
	"maps"
	"time"

	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nodesmith/nodesmith/libs/contract"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
)

// Command returns cmd's body as a domain command, nil when it has no body
// the adapter knows (the application drops such a command as invalid).
func Command(cmd *cloudv1.Command) domain.Command {
	switch b := cmd.GetBody().(type) {
	case *cloudv1.Command_Create:
		c := b.Create
		return &domain.CreateInstances{
			BatchID:          c.GetBatchId(),
			ClientToken:      c.GetClientToken(),
			Target:           target(c.GetTarget()),
			TemplateName:     c.GetTemplateName(),
			ParametersJSON:   c.GetParametersJson(),
			Instances:        refs(c.GetInstances()),
			ClusterID:        c.GetClusterId(),
			Group:            c.GetGroup(),
			Zone:             c.GetZone(),
			InstanceType:     c.GetInstanceType(),
			SecretParameters: maps.Clone(c.GetSecretParameters()),
			Offerings:        offerings(c.GetOfferings()),
			MaxPrice:         c.GetMaxPrice(),
		}
	case *cloudv1.Command_Watch:
		return &domain.WatchInstances{Target: target(b.Watch.GetTarget()), Instances: refs(b.Watch.GetInstances())}
	case *cloudv1.Command_Terminate:
		t := b.Terminate
		return &domain.TerminateInstances{Target: target(t.GetTarget()), Instances: refs(t.GetInstances()), ClusterID: t.GetClusterId()}
	case *cloudv1.Command_ListInventory:
		l := b.ListInventory
		return &domain.ListInventory{Target: target(l.GetTarget()), ClusterID: l.GetClusterId(), RequestID: l.GetRequestId()}
	case *cloudv1.Command_Tag:
		t := b.Tag
		return &domain.TagInstances{
			RequestID: t.GetRequestId(),
			Target:    target(t.GetTarget()),
			ClusterID: t.GetClusterId(),
			Instances: refs(t.GetInstances()),
			CheckOnly: t.GetCheckOnly(),
		}
	default:
		return nil
	}
}

func target(t *cloudv1.Target) domain.Target {
	return domain.Target{Provider: t.GetProvider(), Account: t.GetAccount(), Region: t.GetRegion()}
}

func refs(rs []*cloudv1.InstanceRef) []domain.InstanceRef {
	if rs == nil {
		return nil
	}
	out := make([]domain.InstanceRef, len(rs))
	for i, r := range rs {
		out[i] = domain.InstanceRef{
			InstanceID: r.GetInstanceId(),
			Attempt:    r.GetAttempt(),
			CloudID:    r.GetCloudId(),
			Group:      r.GetGroup(),
			Adopted:    r.GetAdopted(),
		}
	}
	return out
}

func offerings(os []*cloudv1.Offering) []domain.Offering {
	if len(os) == 0 {
		return nil
	}
	out := make([]domain.Offering, len(os))
	for i, o := range os {
		out[i] = Offering(o)
	}
	return out
}

// Offering returns o as the domain's.
func Offering(o *cloudv1.Offering) domain.Offering {
	return domain.Offering{
		Zone: o.GetZone(), SubnetID: o.GetSubnetId(), InstanceType: o.GetInstanceType(), CapacityType: o.GetCapacityType(),
	}
}

// ProtoOffering returns o's wire shape (nil for nil).
func ProtoOffering(o *domain.Offering) *cloudv1.Offering {
	if o == nil {
		return nil
	}
	return &cloudv1.Offering{Zone: o.Zone, SubnetId: o.SubnetID, InstanceType: o.InstanceType, CapacityType: o.CapacityType}
}

// Target returns t as the domain's.
func Target(t *cloudv1.Target) domain.Target { return target(t) }

// ProtoTarget returns t's wire shape (nil for the zero target).
func ProtoTarget(t domain.Target) *cloudv1.Target { return protoTarget(t) }

// ProtoCloudError returns e's wire shape (nil for nil).
func ProtoCloudError(e *domain.CloudError) *cloudv1.CloudError { return protoError(e) }

// CloudError returns e as the domain's (nil for nil).
func CloudError(e *cloudv1.CloudError) *domain.CloudError {
	if e == nil {
		return nil
	}
	return &domain.CloudError{Kind: kindOf(e.GetKind()), Code: e.GetCode(), Message: e.GetMessage()}
}

func kindOf(k cloudv1.ErrorKind) contract.ErrorKind {
	switch k {
	case cloudv1.ErrorKind_ERROR_KIND_CAPACITY:
		return contract.ErrorKindCapacity
	case cloudv1.ErrorKind_ERROR_KIND_THROTTLED:
		return contract.ErrorKindThrottled
	case cloudv1.ErrorKind_ERROR_KIND_NOT_FOUND:
		return contract.ErrorKindNotFound
	case cloudv1.ErrorKind_ERROR_KIND_INVALID_PARAMETERS:
		return contract.ErrorKindInvalidParameters
	case cloudv1.ErrorKind_ERROR_KIND_AUTH:
		return contract.ErrorKindAuth
	case cloudv1.ErrorKind_ERROR_KIND_TRANSIENT:
		return contract.ErrorKindTransient
	default:
		return contract.ErrorKindUnknown
	}
}

// Event returns ev's wire shape, nil for an event the wire does not know.
func Event(ev domain.Event) *cloudv1.Event {
	switch e := ev.(type) {
	case *domain.InstancesCreated:
		return &cloudv1.Event{Body: &cloudv1.Event_Created{Created: &cloudv1.InstancesCreated{
			BatchId: e.BatchID, Instances: protoRefs(e.Instances), Offering: ProtoOffering(e.Offering),
		}}}
	case *domain.CreateFailed:
		return &cloudv1.Event{Body: &cloudv1.Event_CreateFailed{CreateFailed: &cloudv1.CreateFailed{
			BatchId: e.BatchID, Instances: protoRefs(e.Instances), Error: protoError(e.Error),
		}}}
	case *domain.InstanceObserved:
		return &cloudv1.Event{Body: &cloudv1.Event_Observed{Observed: &cloudv1.InstanceObserved{
			Instance:    protoRef(e.Instance),
			State:       protoState(e.State),
			PrivateIp:   e.PrivateIP,
			ObservedAt:  timestamppb.New(e.ObservedAt),
			Zone:        e.Zone,
			LaunchError: protoError(e.LaunchError),
		}}}
	case *domain.InstancesTerminated:
		return &cloudv1.Event{Body: &cloudv1.Event_Terminated{Terminated: &cloudv1.InstancesTerminated{
			Instances: protoRefs(e.Instances),
		}}}
	case *domain.TerminateFailed:
		return &cloudv1.Event{Body: &cloudv1.Event_TerminateFailed{TerminateFailed: &cloudv1.TerminateFailed{
			Instances: protoRefs(e.Instances), Error: protoError(e.Error),
		}}}
	case *domain.Inventory:
		inv := &cloudv1.Inventory{RequestId: e.RequestID, Target: protoTarget(e.Target), Error: protoError(e.Error)}
		for _, it := range e.Items {
			inv.Items = append(inv.Items, &cloudv1.InventoryItem{
				CloudId:    it.CloudID,
				InstanceId: it.InstanceID,
				Group:      it.Group,
				State:      protoState(it.State),
				CreatedAt:  optionalTime(it.CreatedAt),
				PrivateIp:  it.PrivateIP,
				BatchId:    it.BatchID,
				Zone:       it.Zone,
			})
		}
		return &cloudv1.Event{Body: &cloudv1.Event_Inventory{Inventory: inv}}
	case *domain.InstancesTagged:
		t := &cloudv1.InstancesTagged{
			RequestId: e.RequestID, Target: protoTarget(e.Target), Error: protoError(e.Error), CheckOnly: e.CheckOnly,
		}
		for _, r := range e.Results {
			t.Results = append(t.Results, &cloudv1.TagResult{
				Instance:  protoRef(r.Instance),
				State:     protoState(r.State),
				PrivateIp: r.PrivateIP,
				Zone:      r.Zone,
				Error:     protoError(r.Error),
			})
		}
		return &cloudv1.Event{Body: &cloudv1.Event_Tagged{Tagged: t}}
	default:
		return nil
	}
}

// protoTarget is t on the wire; the zero target (a command that named
// none) stays absent, as the command's was.
func protoTarget(t domain.Target) *cloudv1.Target {
	if t == (domain.Target{}) {
		return nil
	}
	return &cloudv1.Target{Provider: t.Provider, Account: t.Account, Region: t.Region}
}

func protoRef(r domain.InstanceRef) *cloudv1.InstanceRef {
	return &cloudv1.InstanceRef{
		InstanceId: r.InstanceID,
		Attempt:    r.Attempt,
		CloudId:    r.CloudID,
		Group:      r.Group,
		Adopted:    r.Adopted,
	}
}

func protoRefs(rs []domain.InstanceRef) []*cloudv1.InstanceRef {
	if rs == nil {
		return nil
	}
	out := make([]*cloudv1.InstanceRef, len(rs))
	for i, r := range rs {
		out[i] = protoRef(r)
	}
	return out
}

func optionalTime(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func protoError(e *domain.CloudError) *cloudv1.CloudError {
	if e == nil {
		return nil
	}
	return &cloudv1.CloudError{Kind: protoKind(e.Kind), Code: e.Code, Message: e.Message}
}

func protoKind(k contract.ErrorKind) cloudv1.ErrorKind {
	switch k {
	case contract.ErrorKindCapacity:
		return cloudv1.ErrorKind_ERROR_KIND_CAPACITY
	case contract.ErrorKindThrottled:
		return cloudv1.ErrorKind_ERROR_KIND_THROTTLED
	case contract.ErrorKindNotFound:
		return cloudv1.ErrorKind_ERROR_KIND_NOT_FOUND
	case contract.ErrorKindInvalidParameters:
		return cloudv1.ErrorKind_ERROR_KIND_INVALID_PARAMETERS
	case contract.ErrorKindAuth:
		return cloudv1.ErrorKind_ERROR_KIND_AUTH
	case contract.ErrorKindTransient:
		return cloudv1.ErrorKind_ERROR_KIND_TRANSIENT
	default:
		return cloudv1.ErrorKind_ERROR_KIND_UNSPECIFIED
	}
}

func protoState(s domain.State) cloudv1.CloudState {
	switch s {
	case domain.StatePending:
		return cloudv1.CloudState_CLOUD_STATE_PENDING
	case domain.StateRunning:
		return cloudv1.CloudState_CLOUD_STATE_RUNNING
	case domain.StateLaunchFailed:
		return cloudv1.CloudState_CLOUD_STATE_LAUNCH_FAILED
	case domain.StateStopped:
		return cloudv1.CloudState_CLOUD_STATE_STOPPED
	case domain.StateTerminating:
		return cloudv1.CloudState_CLOUD_STATE_TERMINATING
	case domain.StateNotFound:
		return cloudv1.CloudState_CLOUD_STATE_NOT_FOUND
	default:
		return cloudv1.CloudState_CLOUD_STATE_UNSPECIFIED
	}
}
