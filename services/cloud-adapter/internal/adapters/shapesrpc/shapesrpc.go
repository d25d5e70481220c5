// Package shapesrpc answers instance-shape questions (cloudv1.ShapesRequest
// on messaging.SubjectCloudShapes, core NATS request/reply) from the
// gateway and lifecycle, which check templates' offerings against them.
// Every replica subscribes in one queue group, so any one answers.
package shapesrpc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/nodesmith/nodesmith/libs/cloudshapes"
	"github.com/nodesmith/nodesmith/libs/contract"
	"github.com/nodesmith/nodesmith/libs/messaging"
	libmetrics "github.com/nodesmith/nodesmith/libs/metrics"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/app"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// Defaults of Options.
const (
	DefaultTimeout     = 10 * time.Second
	DefaultConcurrency = 4
)

// Options tune the responder.
type Options struct {
	// Timeout bounds answering one question, the cloud call included
	// (DefaultTimeout when zero). An answer the asker no longer waits
	// for still fills the cache.
	Timeout time.Duration
	// Concurrency bounds the questions answered at once
	// (DefaultConcurrency when zero); more wait their turn.
	Concurrency int
	Logger      *slog.Logger
	// Registry receives nodesmith_cloud_shape_questions_total; nil: none.
	Registry prometheus.Registerer
	// Ready, when set, delays answering until it is closed (the catalog's
	// credentials are loaded).
	Ready <-chan struct{}
}

// Serve answers questions from shapes on nc (once o.Ready is closed)
// until ctx ends, then unsubscribes and waits for the answers under way.
// It returns an error only when it cannot subscribe.
func Serve(ctx context.Context, nc *nats.Conn, shapes *app.Shapes, o Options) error {
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.Concurrency <= 0 {
		o.Concurrency = DefaultConcurrency
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	questions := libmetrics.Register(o.Registry, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "nodesmith_cloud_shape_questions_total",
		Help: "Instance-shape questions answered (template offering checks), by provider and result: cached, cloud (asked the cloud), not_supported, error.",
	}, []string{"provider", "result"}))
	if o.Ready != nil {
		select {
		case <-o.Ready:
		case <-ctx.Done():
			return nil
		}
	}
	sem := make(chan struct{}, o.Concurrency)
	sub, err := nc.QueueSubscribe(messaging.SubjectCloudShapes, messaging.QueueCloudShapes, func(m *nats.Msg) {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return
		}
		go func() {
			defer func() { <-sem }()
			answer(ctx, m, shapes, o, questions)
		}()
	})
	if err != nil {
		return fmt.Errorf("subscribing to %s: %w", messaging.SubjectCloudShapes, err)
	}
	o.Logger.Info("answering instance-shape questions", "subject", messaging.SubjectCloudShapes)
	<-ctx.Done()
	_ = sub.Unsubscribe()
	for range o.Concurrency {
		sem <- struct{}{}
	}
	return nil
}

func answer(ctx context.Context, m *nats.Msg, shapes *app.Shapes, o Options, questions *prometheus.CounterVec) {
	reply, provider, result := answerOf(ctx, m.Data, shapes, o.Timeout)
	questions.WithLabelValues(provider, result).Inc()
	if e := reply.GetError(); e != nil && e.GetCode() != cloudshapes.CodeNotSupported {
		o.Logger.Warn("instance-shape question not answered", "provider", provider, "kind", e.GetKind().String(), "code", e.GetCode(), "err", e.GetMessage())
	}
	data, err := proto.Marshal(reply)
	if err != nil {
		o.Logger.Error("encoding an instance-shape answer", "err", err)
		return
	}
	if err := m.Respond(data); err != nil && !errors.Is(err, nats.ErrMsgNoReply) {
		o.Logger.Warn("sending an instance-shape answer", "err", err)
	}
}

// answerOf decodes a cloudv1.ShapesRequest and answers it within
// timeout; provider and result label the question's metric.
func answerOf(ctx context.Context, data []byte, shapes *app.Shapes, timeout time.Duration) (reply *cloudv1.ShapesReply, provider, result string) {
	var req cloudv1.ShapesRequest
	if err := proto.Unmarshal(data, &req); err != nil {
		return &cloudv1.ShapesReply{Error: &cloudv1.CloudError{Kind: cloudv1.ErrorKind_ERROR_KIND_INVALID_PARAMETERS, Code: "InvalidShapesRequest", Message: "malformed ShapesRequest: " + err.Error()}}, "", "error"
	}
	t := req.GetTarget()
	// Only the providers this adapter knows label the metric (the
	// question is anyone's to write).
	if shapes.Knows(t.GetProvider()) {
		provider = t.GetProvider()
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	got, cached, err := shapes.Shapes(ctx, domain.Target{Provider: t.GetProvider(), Account: t.GetAccount(), Region: t.GetRegion()}, req.GetZones(), req.GetInstanceTypes())
	switch {
	case errors.Is(err, ports.ErrNotSupported):
		return &cloudv1.ShapesReply{Error: cloudError(ctx, err)}, provider, "not_supported"
	case err != nil:
		return &cloudv1.ShapesReply{Error: cloudError(ctx, err)}, provider, "error"
	case cached:
		result = "cached"
	default:
		result = "cloud"
	}
	out := &cloudv1.ShapesReply{Shapes: make([]*cloudv1.InstanceShape, 0, len(got))}
	for _, s := range got {
		out.Shapes = append(out.Shapes, &cloudv1.InstanceShape{
			Zone: s.Zone, InstanceType: s.InstanceType, Cpu: int32(s.VCPU), MemoryMib: s.MemoryMiB,
			GpuCount: int32(s.GPU), GpuType: s.GPUModel, Arch: s.Arch,
		})
	}
	return out, provider, result
}

// cloudError is err as a reply's error: not supported has its own code.
func cloudError(ctx context.Context, err error) *cloudv1.CloudError {
	switch ce, ok := ports.AsCloudError(err); {
	case errors.Is(err, ports.ErrNotSupported):
		return &cloudv1.CloudError{Code: cloudshapes.CodeNotSupported, Message: err.Error()}
	case ok:
		return &cloudv1.CloudError{Kind: protoKind(ce.Kind), Code: ce.Code, Message: ce.Message}
	case ctx.Err() != nil:
		return &cloudv1.CloudError{Kind: cloudv1.ErrorKind_ERROR_KIND_TRANSIENT, Code: "Timeout", Message: "the cloud did not answer in time: " + err.Error()}
	}
	return &cloudv1.CloudError{Message: err.Error()}
}

// protoKind: contract.ErrorKind values equal cloudv1.ErrorKind's.
func protoKind(k contract.ErrorKind) cloudv1.ErrorKind {
	if _, ok := cloudv1.ErrorKind_name[int32(k)]; !ok {
		return cloudv1.ErrorKind_ERROR_KIND_UNSPECIFIED
	}
	return cloudv1.ErrorKind(k)
}
