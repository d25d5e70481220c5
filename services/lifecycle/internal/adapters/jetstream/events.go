package jetstream

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/worker"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	hookv1 "github.com/nodesmith/nodesmith/proto/nodesmith/hook/v1"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/protoconv"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/ports"
)

// EventSink is what the event handler drives.
type EventSink interface {
	HandleEvent(ctx context.Context, instanceID string, ev domain.Event) error
	HandleInventory(ctx context.Context, inv app.Inventory) error
	HandleTagged(ctx context.Context, r app.TagResult) error
}

// EventHandler returns the worker.Handler of the lifecycle consumer: it
// decodes cloud events and hook results and hands them to sink. An
// undecodable message is terminated (it can never succeed); a sink error
// naks the message for redelivery.
func EventHandler(sink EventSink) worker.Handler {
	return tracedEvents(func(ctx context.Context, msg jetstream.Msg) error {
		subject := msg.Subject()
		switch {
		case strings.HasPrefix(subject, messaging.SubjectCloudEvents+"."):
			var ev cloudv1.Event
			if err := proto.Unmarshal(msg.Data(), &ev); err != nil {
				return worker.Permanent(fmt.Errorf("decoding cloud event on %s: %w", subject, err))
			}
			return HandleCloudEvent(ctx, sink, &ev)
		case strings.HasPrefix(subject, messaging.SubjectHookEvents+"."):
			var res hookv1.HookResult
			if err := proto.Unmarshal(msg.Data(), &res); err != nil {
				return worker.Permanent(fmt.Errorf("decoding hook result on %s: %w", subject, err))
			}
			return HandleHookResult(ctx, sink, &res)
		}
		return worker.Permanent(fmt.Errorf("unexpected subject %s", subject))
	})
}

func cloudErr(e *cloudv1.CloudError) domain.CloudError {
	return domain.CloudError{Kind: domain.ErrorKind(e.GetKind()), Code: e.GetCode(), Message: e.GetMessage()}
}

// HandleCloudEvent applies one cloud event (one per instance it names).
func HandleCloudEvent(ctx context.Context, sink EventSink, ev *cloudv1.Event) error {
	var errs []error
	each := func(refs []*cloudv1.InstanceRef, mk func(*cloudv1.InstanceRef) domain.Event) {
		for _, r := range refs {
			if r.GetInstanceId() == "" {
				continue
			}
			if err := sink.HandleEvent(ctx, r.GetInstanceId(), mk(r)); err != nil {
				errs = append(errs, err)
			}
		}
	}
	switch b := ev.GetBody().(type) {
	case *cloudv1.Event_Created:
		var offering *cloudspec.Offering
		if o := b.Created.GetOffering(); o != nil {
			x := protoconv.OfferingFromProto(o)
			offering = &x
		}
		each(b.Created.GetInstances(), func(r *cloudv1.InstanceRef) domain.Event {
			return domain.CloudCreated{Attempt: r.GetAttempt(), BatchID: b.Created.GetBatchId(), CloudID: r.GetCloudId(), Offering: offering}
		})
	case *cloudv1.Event_CreateFailed:
		each(b.CreateFailed.GetInstances(), func(r *cloudv1.InstanceRef) domain.Event {
			return domain.CloudCreateFailed{Attempt: r.GetAttempt(), BatchID: b.CreateFailed.GetBatchId(), Err: cloudErr(b.CreateFailed.GetError())}
		})
	case *cloudv1.Event_Observed:
		o := b.Observed
		r := o.GetInstance()
		if r.GetInstanceId() == "" {
			break
		}
		// The create command that made the VM watches it and its events
		// are handled concurrently, so an observation can overtake the
		// InstancesCreated naming its VM: the cloud id it carries is
		// recorded first (a duplicate once the create result was applied;
		// ignored for another attempt), so no observation is lost to that
		// race.
		if id := r.GetCloudId(); id != "" {
			if err := sink.HandleEvent(ctx, r.GetInstanceId(), domain.CloudCreated{Attempt: r.GetAttempt(), CloudID: id}); err != nil {
				return err
			}
		}
		ev := domain.CloudObserved{Attempt: r.GetAttempt(), CloudID: r.GetCloudId(), State: domain.CloudState(o.GetState()), PrivateIP: o.GetPrivateIp()}
		if o.GetLaunchError() != nil {
			e := cloudErr(o.GetLaunchError())
			ev.LaunchError = &e
		}
		if err := sink.HandleEvent(ctx, r.GetInstanceId(), ev); err != nil {
			errs = append(errs, err)
		}
	case *cloudv1.Event_Terminated:
		each(b.Terminated.GetInstances(), func(r *cloudv1.InstanceRef) domain.Event {
			return domain.CloudTerminated{Attempt: r.GetAttempt()}
		})
	case *cloudv1.Event_TerminateFailed:
		each(b.TerminateFailed.GetInstances(), func(r *cloudv1.InstanceRef) domain.Event {
			return domain.CloudTerminateFailed{Attempt: r.GetAttempt(), Err: cloudErr(b.TerminateFailed.GetError())}
		})
	case *cloudv1.Event_Inventory:
		return sink.HandleInventory(ctx, inventory(b.Inventory))
	case *cloudv1.Event_Tagged:
		return sink.HandleTagged(ctx, tagResult(b.Tagged))
	default:
		return worker.Permanent(errors.New("cloud event without a body"))
	}
	// Applying the same event again is harmless (stale attempts are
	// ignored), so a partial failure redelivers the whole event.
	return errors.Join(errs...)
}

func inventory(inv *cloudv1.Inventory) app.Inventory {
	out := app.Inventory{
		RequestID: inv.GetRequestId(),
		Target:    ports.Target{Provider: inv.GetTarget().GetProvider(), Account: inv.GetTarget().GetAccount(), Region: inv.GetTarget().GetRegion()},
	}
	if inv.GetError() != nil {
		e := cloudErr(inv.GetError())
		out.Err = &e
	}
	for _, it := range inv.GetItems() {
		item := app.InventoryItem{
			CloudID: it.GetCloudId(), InstanceID: it.GetInstanceId(), BatchID: it.GetBatchId(), Group: it.GetGroup(),
			State: domain.CloudState(it.GetState()),
		}
		if it.GetCreatedAt() != nil {
			item.CreatedAt = it.GetCreatedAt().AsTime()
		}
		out.Items = append(out.Items, item)
	}
	return out
}

func tagResult(t *cloudv1.InstancesTagged) app.TagResult {
	out := app.TagResult{RequestID: t.GetRequestId()}
	if t.GetError() != nil {
		e := cloudErr(t.GetError())
		out.Err = &e
	}
	for _, r := range t.GetResults() {
		vm := app.TagVMResult{CloudID: r.GetInstance().GetCloudId(), State: domain.CloudState(r.GetState()), PrivateIP: r.GetPrivateIp()}
		if r.GetError() != nil {
			e := cloudErr(r.GetError())
			vm.Err = &e
		}
		out.Results = append(out.Results, vm)
	}
	return out
}

// HandleHookResult applies one hook result.
func HandleHookResult(ctx context.Context, sink EventSink, r *hookv1.HookResult) error {
	if r.GetInstanceId() == "" {
		return worker.Permanent(errors.New("hook result without an instance id"))
	}
	return sink.HandleEvent(ctx, r.GetInstanceId(), domain.HookFinished{
		Attempt:    r.GetAttempt(),
		Kind:       domain.HookKind(r.GetHook()),
		Succeeded:  r.GetSucceeded(),
		Skipped:    r.GetSkipped(),
		Retryable:  r.GetRetryable(),
		ExitCode:   int(r.GetExitCode()),
		Error:      r.GetError(),
		OutputTail: r.GetOutputTail(),
		HostKey:    r.GetHostKey(),
	})
}
