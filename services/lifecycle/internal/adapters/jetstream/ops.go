package jetstream

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"time"

	"github.com/nodesmith/nodesmith/libs/contract"

	"github.com/nats-io/nats.go"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/tracing"
	lifecyclev1 "github.com/nodesmith/nodesmith/proto/nodesmith/lifecycle/v1"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/protoconv"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/app"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
)

// Ops is what the responder drives (implemented by *app.App).
type Ops interface {
	IncreaseSize(ctx context.Context, group string, delta int) (app.Revisions, error)
	DecreaseTargetSize(ctx context.Context, group string, delta int) (app.Revisions, error)
	DeleteNodes(ctx context.Context, group string, nodes []app.NodeRef) (app.Revisions, error)
	PutGroup(ctx context.Context, req app.PutGroupRequest) (app.Revisions, error)
	DeleteGroup(ctx context.Context, id string, expectedRevision uint64) (app.Revisions, error)
	SetTargetSize(ctx context.Context, group string, target int) (app.Revisions, error)
	ActOnInstance(ctx context.Context, id string, action app.InstanceAction) (app.Revisions, error)
	PutCatalogEntry(ctx context.Context, req app.PutCatalogRequest) (app.Revisions, error)
	DeleteCatalogEntry(ctx context.Context, ref domain.CatalogRef, expectedRevision uint64) (app.Revisions, error)
	ReleaseOrphans(ctx context.Context) (app.Revisions, error)
	AdoptVMs(ctx context.Context, req app.AdoptRequest) ([]app.AdoptOutcome, app.Revisions, error)
	// Once runs f at most once per request id (see app.App.Once).
	Once(ctx context.Context, requestID, fingerprint string, f func(ctx context.Context) (app.Revisions, error)) (app.Revisions, error)
}

var _ Ops = (*app.App)(nil)

// QueueGroup is the queue group of the ops subscription: should two leaders
// overlap for a moment, each request is still answered once.
const QueueGroup = "lifecycle"

// ServeOps answers lifecycle operations on messaging.SubjectLifecycleOps
// until ctx ends, then drains the subscription (in-flight requests are
// answered). Each request runs under timeout.
func ServeOps(ctx context.Context, nc *nats.Conn, ops Ops, timeout time.Duration, log *slog.Logger) error {
	sub, err := nc.QueueSubscribe(messaging.SubjectLifecycleOps, QueueGroup, func(m *nats.Msg) {
		rctx := tracing.Extract(context.WithoutCancel(ctx), m.Header)
		rctx, cancel := context.WithTimeout(rctx, timeout)
		defer cancel()
		reply := Handle(rctx, ops, m.Data)
		data, err := proto.Marshal(reply)
		if err != nil {
			log.Error("encoding an ops reply", "err", err)
			return
		}
		if m.Reply == "" {
			return
		}
		if err := m.Respond(data); err != nil {
			log.Warn("answering an ops request", "err", err)
		}
	})
	if err != nil {
		return fmt.Errorf("subscribing to %s: %w", messaging.SubjectLifecycleOps, err)
	}
	log.Info("answering lifecycle operations", "subject", messaging.SubjectLifecycleOps)
	<-ctx.Done()
	if err := sub.Drain(); err != nil {
		_ = sub.Unsubscribe()
	}
	return nil
}

// Handle decodes and runs one request; it never fails: errors travel in
// Reply.error. A request with a request_id is applied at most once per id
// (app.App.Once): a repeat is answered with the first outcome.
func Handle(ctx context.Context, ops Ops, data []byte) *lifecyclev1.Reply {
	var req lifecyclev1.Request
	if err := proto.Unmarshal(data, &req); err != nil {
		return errReply(codes.InvalidArgument, "decoding request: "+err.Error())
	}
	ctx, span := startOpSpan(ctx, &req)
	reply := handle(ctx, ops, &req)
	endOpSpan(span, reply)
	return reply
}

func handle(ctx context.Context, ops Ops, req *lifecyclev1.Request) *lifecyclev1.Reply {
	if op, ok := req.GetOp().(*lifecyclev1.Request_AdoptVms); ok {
		// Idempotent by itself (a VM already owned is reported, never
		// adopted twice), and its answer is the outcome per VM, which the
		// request log does not keep: not run through Once.
		return adoptVMs(ctx, ops, op.AdoptVms)
	}
	revs, err := ops.Once(ctx, req.GetRequestId(), fingerprint(req), func(ctx context.Context) (app.Revisions, error) {
		return dispatch(ctx, ops, req)
	})
	reply := &lifecyclev1.Reply{GroupsRevision: revs.Groups, InstancesRevision: revs.Instances, CatalogRevision: revs.Catalog}
	if err != nil {
		reply.Error = &lifecyclev1.Status{Code: int32(Code(err)), Message: err.Error()}
	}
	return reply
}

// fingerprint identifies a request's operation and arguments (everything
// but its id), so an id reused for another operation is recognised.
func fingerprint(req *lifecyclev1.Request) string {
	op := proto.Clone(req).(*lifecyclev1.Request)
	op.RequestId = ""
	data, err := proto.MarshalOptions{Deterministic: true}.Marshal(op)
	if err != nil {
		// Unreachable for a message that was just decoded; an empty
		// fingerprint still deduplicates by id.
		return ""
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func dispatch(ctx context.Context, ops Ops, req *lifecyclev1.Request) (app.Revisions, error) {
	switch op := req.GetOp().(type) {
	case *lifecyclev1.Request_IncreaseSize:
		return ops.IncreaseSize(ctx, op.IncreaseSize.GetGroup(), int(op.IncreaseSize.GetDelta()))
	case *lifecyclev1.Request_DecreaseTargetSize:
		return ops.DecreaseTargetSize(ctx, op.DecreaseTargetSize.GetGroup(), int(op.DecreaseTargetSize.GetDelta()))
	case *lifecyclev1.Request_DeleteNodes:
		var nodes []app.NodeRef
		for _, n := range op.DeleteNodes.GetNodes() {
			nodes = append(nodes, app.NodeRef{ProviderID: n.GetProviderId(), Name: n.GetName()})
		}
		return ops.DeleteNodes(ctx, op.DeleteNodes.GetGroup(), nodes)
	case *lifecyclev1.Request_PutGroup:
		if op.PutGroup.GetGroup() == nil {
			return app.Revisions{}, domain.Errorf(contract.CodeInvalidArgument, "put_group without a group")
		}
		return ops.PutGroup(ctx, app.PutGroupRequest{
			Group:            protoconv.GroupFromProto(op.PutGroup.GetGroup()),
			ExpectedRevision: op.PutGroup.GetExpectedRevision(),
			Upsert:           op.PutGroup.GetUpsert(),
		})
	case *lifecyclev1.Request_DeleteGroup:
		return ops.DeleteGroup(ctx, op.DeleteGroup.GetId(), op.DeleteGroup.GetExpectedRevision())
	case *lifecyclev1.Request_SetTargetSize:
		return ops.SetTargetSize(ctx, op.SetTargetSize.GetGroup(), int(op.SetTargetSize.GetTargetSize()))
	case *lifecyclev1.Request_InstanceAction:
		var action app.InstanceAction
		switch op.InstanceAction.GetAction() {
		case lifecyclev1.InstanceAction_ACTION_RETRY:
			action = app.ActionRetry
		case lifecyclev1.InstanceAction_ACTION_FORCE_DELETE:
			action = app.ActionForceDelete
		case lifecyclev1.InstanceAction_ACTION_CANCEL:
			action = app.ActionCancel
		default:
			return app.Revisions{}, domain.Errorf(contract.CodeInvalidArgument, "unknown instance action")
		}
		return ops.ActOnInstance(ctx, op.InstanceAction.GetInstanceId(), action)
	case *lifecyclev1.Request_PutCatalogEntry:
		e := protoconv.CatalogFromProto(op.PutCatalogEntry.GetEntry())
		if e.Kind() == domain.KindUnknown {
			return app.Revisions{}, domain.Errorf(contract.CodeInvalidArgument, "put_catalog_entry without a template, account or hook")
		}
		return ops.PutCatalogEntry(ctx, app.PutCatalogRequest{
			Entry:            e,
			ExpectedRevision: op.PutCatalogEntry.GetExpectedRevision(),
			Upsert:           op.PutCatalogEntry.GetUpsert(),
		})
	case *lifecyclev1.Request_DeleteCatalogEntry:
		kind := catalogKind(op.DeleteCatalogEntry.GetKind())
		if kind == domain.KindUnknown {
			return app.Revisions{}, domain.Errorf(contract.CodeInvalidArgument, "delete_catalog_entry without a kind")
		}
		return ops.DeleteCatalogEntry(ctx, domain.CatalogRef{Kind: kind, Name: op.DeleteCatalogEntry.GetName()}, op.DeleteCatalogEntry.GetExpectedRevision())
	case *lifecyclev1.Request_ReleaseOrphans:
		return ops.ReleaseOrphans(ctx)
	}
	return app.Revisions{}, domain.Errorf(contract.CodeInvalidArgument, "request without an operation")
}

func adoptVMs(ctx context.Context, ops Ops, op *lifecyclev1.AdoptVMs) *lifecyclev1.Reply {
	req := app.AdoptRequest{Group: op.GetGroup(), DryRun: op.GetDryRun()}
	for _, vm := range op.GetVms() {
		req.VMs = append(req.VMs, app.AdoptVM{CloudID: vm.GetCloudId(), NodeName: vm.GetNodeName(), ProviderID: vm.GetProviderId(), PrivateIP: vm.GetPrivateIp()})
	}
	outcomes, revs, err := ops.AdoptVMs(ctx, req)
	reply := &lifecyclev1.Reply{GroupsRevision: revs.Groups, InstancesRevision: revs.Instances}
	for _, o := range outcomes {
		reply.Adopted = append(reply.Adopted, &lifecyclev1.AdoptOutcome{
			Vm:         &lifecyclev1.AdoptVM{CloudId: o.VM.CloudID, NodeName: o.VM.NodeName, ProviderId: o.VM.ProviderID, PrivateIp: o.VM.PrivateIP},
			Result:     adoptResult(o.Result),
			InstanceId: o.InstanceID,
			Message:    o.Message,
		})
	}
	if err != nil {
		reply.Error = &lifecyclev1.Status{Code: int32(Code(err)), Message: err.Error()}
	}
	return reply
}

func adoptResult(r app.AdoptResult) lifecyclev1.AdoptOutcome_Result {
	switch r {
	case app.AdoptAdopted:
		return lifecyclev1.AdoptOutcome_RESULT_ADOPTED
	case app.AdoptAlready:
		return lifecyclev1.AdoptOutcome_RESULT_ALREADY_ADOPTED
	case app.AdoptRefused:
		return lifecyclev1.AdoptOutcome_RESULT_REFUSED
	}
	return lifecyclev1.AdoptOutcome_RESULT_UNSPECIFIED
}

func catalogKind(k lifecyclev1.CatalogKind) domain.CatalogKind {
	switch k {
	case lifecyclev1.CatalogKind_CATALOG_KIND_TEMPLATE:
		return domain.KindTemplate
	case lifecyclev1.CatalogKind_CATALOG_KIND_ACCOUNT:
		return domain.KindAccount
	case lifecyclev1.CatalogKind_CATALOG_KIND_HOOK:
		return domain.KindHook
	}
	return domain.KindUnknown
}

func errReply(c codes.Code, msg string) *lifecyclev1.Reply {
	return &lifecyclev1.Reply{Error: &lifecyclev1.Status{Code: int32(c), Message: msg}}
}

// Code maps a domain error to its gRPC code: contract codes are gRPC
// numbers; an unclassified error is Internal.
func Code(err error) codes.Code {
	c := domain.CodeOf(err)
	if c == contract.CodeUnknown {
		return codes.Internal
	}
	return codes.Code(c)
}
