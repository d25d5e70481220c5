package grpcapi

import (
	"context"
	"crypto/x509"
	"log/slog"
	"runtime/debug"
	"slices"
	"strings"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// HealthServicePrefix is the method prefix of the gRPC health service,
// which ClientAllowList lets every verified client call: it reveals
// nothing but whether the gateway serves.
const HealthServicePrefix = "/grpc.health.v1.Health/"

// ClientAllowList admits a call only when the client certificate the TLS
// handshake verified names one of the allowed identities: a URI SAN
// (SPIFFE ids such as spiffe://cluster.local/ns/nodesmith/sa/cluster-autoscaler),
// a DNS SAN or the subject common name, compared exactly. Any other
// certificate, even one from the same CA, gets codes.PermissionDenied
// naming the identities it presented. It only makes sense with mTLS: a
// call without a verified client certificate is denied too.
type ClientAllowList struct {
	allowed []string
	log     *slog.Logger
}

// NewClientAllowList returns the allow-list of identities (empty entries
// are ignored). log may be nil.
func NewClientAllowList(identities []string, log *slog.Logger) *ClientAllowList {
	if log == nil {
		log = slog.Default()
	}
	a := &ClientAllowList{log: log}
	for _, id := range identities {
		if id = strings.TrimSpace(id); id != "" {
			a.allowed = append(a.allowed, id)
		}
	}
	return a
}

// Identities lists what a certificate presents, in the order URI SANs,
// DNS SANs, common name.
func Identities(c *x509.Certificate) []string {
	var ids []string
	for _, u := range c.URIs {
		ids = append(ids, u.String())
	}
	ids = append(ids, c.DNSNames...)
	if c.Subject.CommonName != "" {
		ids = append(ids, c.Subject.CommonName)
	}
	return ids
}

// check returns nil when the call's peer is allowed.
func (a *ClientAllowList) check(ctx context.Context, method string) error {
	if strings.HasPrefix(method, HealthServicePrefix) {
		return nil
	}
	var leaf *x509.Certificate
	if p, ok := peer.FromContext(ctx); ok {
		if info, ok := p.AuthInfo.(credentials.TLSInfo); ok {
			// Only a chain the handshake verified counts.
			if chains := info.State.VerifiedChains; len(chains) > 0 && len(chains[0]) > 0 {
				leaf = chains[0][0]
			}
		}
	}
	if leaf == nil {
		return status.Error(codes.PermissionDenied, "no verified client certificate: this server admits only allowed mTLS clients")
	}
	ids := Identities(leaf)
	for _, id := range ids {
		if slices.Contains(a.allowed, id) {
			return nil
		}
	}
	a.log.WarnContext(ctx, "gRPC client certificate not in --grpc-allowed-clients", "method", method, "identities", ids, "serial", leaf.SerialNumber.String())
	return status.Errorf(codes.PermissionDenied, "client certificate identities [%s] are not allowed to call this server (--grpc-allowed-clients)", strings.Join(ids, ", "))
}

// Unary is the unary interceptor.
func (a *ClientAllowList) Unary() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		if err := a.check(ctx, info.FullMethod); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	}
}

// Stream is the stream interceptor.
func (a *ClientAllowList) Stream() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		if err := a.check(ss.Context(), info.FullMethod); err != nil {
			return err
		}
		return handler(srv, ss)
	}
}

// StreamInterceptor records metrics of stream RPCs (reflection, health
// watches) and turns a panic in a stream handler into codes.Internal, as
// UnaryInterceptor does for unary calls.
func StreamInterceptor(m *Metrics, log *slog.Logger) grpc.StreamServerInterceptor {
	if m == nil {
		m = NewMetrics(nil)
	}
	if log == nil {
		log = slog.Default()
	}
	return func(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
		method := info.FullMethod[strings.LastIndexByte(info.FullMethod, '/')+1:]
		defer func() {
			if p := recover(); p != nil {
				log.ErrorContext(ss.Context(), "panic in gRPC stream handler", "method", method, "panic", p, "stack", string(debug.Stack()))
				err = status.Error(codes.Internal, "internal error")
			}
			code := status.Code(err)
			m.requests.WithLabelValues(method, code.String()).Inc()
			if code == codes.Internal || code == codes.Unknown || code == codes.DataLoss {
				log.ErrorContext(ss.Context(), "gRPC stream failed", "method", method, "code", code.String(), "err", status.Convert(err).Message())
			}
		}()
		return handler(srv, ss)
	}
}
