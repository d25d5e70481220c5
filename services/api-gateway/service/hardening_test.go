package service_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/testcerts"
	"github.com/nodesmith/nodesmith/services/api-gateway/service"
)

// grpcCall makes one NodeGroups call with a fresh connection.
func grpcCall(t *testing.T, addr string, cfg *tls.Config) error {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		return err
	}
	defer func() { _ = conn.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = pb.NewCloudProviderClient(conn).NodeGroups(ctx, &pb.NodeGroupsRequest{})
	return err
}

// Only the allowed client identities may call over mTLS; another
// certificate from the same CA gets PermissionDenied naming what it
// presented. Real TLS over loopback.
func TestGRPCAllowedClients(t *testing.T) {
	dir := t.TempDir()
	ca, _, files := serverCert(t, dir, "cluster-ca", "api-gateway")
	mtls := func(c *service.Config) {
		c.GRPCInsecure = false
		c.GRPCCertFile, c.GRPCKeyFile, c.GRPCClientCAFile = files.Cert, files.Key, files.ClientCA
	}
	issue := func(cn string, uris, dns []string) *tls.Config {
		p, err := ca.ClientWith(cn, uris, dns)
		if err != nil {
			t.Fatal(err)
		}
		return testcerts.ClientConfig(ca, p, "localhost")
	}

	t.Run("default", func(t *testing.T) {
		gw := startGateway(t, mtls)
		if err := grpcCall(t, gw.addrs.GRPC, issue("cluster-autoscaler", []string{service.DefaultAllowedClient}, nil)); err != nil {
			t.Fatalf("Cluster Autoscaler's identity: %v", err)
		}
		// The same CA, another workload: refused, and told what it showed.
		other := issue("intruder", []string{"spiffe://cluster.local/ns/default/sa/intruder"}, []string{"intruder.default.svc"})
		err := grpcCall(t, gw.addrs.GRPC, other)
		if status.Code(err) != codes.PermissionDenied {
			t.Fatalf("other certificate: %v, want PermissionDenied", err)
		}
		for _, id := range []string{"spiffe://cluster.local/ns/default/sa/intruder", "intruder.default.svc", "intruder"} {
			if !strings.Contains(status.Convert(err).Message(), id) {
				t.Errorf("denial %q does not name the identity %q", status.Convert(err).Message(), id)
			}
		}
		// A common name alone equal to CA's does not pass the SPIFFE default.
		if err := grpcCall(t, gw.addrs.GRPC, issue("cluster-autoscaler", nil, nil)); status.Code(err) != codes.PermissionDenied {
			t.Errorf("CN-only certificate: %v, want PermissionDenied", err)
		}
		// Health stays callable by any verified client (load balancers,
		// probes with their own certificate).
		conn, err := grpc.NewClient(gw.addrs.GRPC, grpc.WithTransportCredentials(credentials.NewTLS(other)))
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = conn.Close() }()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Errorf("health check by a verified but not allowed client: %v", err)
		}
		// Streams are checked too (reflection is a stream).
		st, err := conn.NewStream(ctx, &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}, "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo")
		if err == nil {
			_, err = st.Header()
			if err == nil {
				err = st.RecvMsg(new(healthpb.HealthCheckResponse))
			}
		}
		if status.Code(err) != codes.PermissionDenied {
			t.Errorf("reflection stream by another client: %v, want PermissionDenied", err)
		}
	})

	t.Run("DNS SAN and CN", func(t *testing.T) {
		gw := startGateway(t, func(c *service.Config) {
			mtls(c)
			c.GRPCAllowedClients = []string{"ca.example.org", "legacy-autoscaler"}
		})
		if err := grpcCall(t, gw.addrs.GRPC, issue("x", nil, []string{"ca.example.org"})); err != nil {
			t.Errorf("allowed DNS SAN: %v", err)
		}
		if err := grpcCall(t, gw.addrs.GRPC, issue("legacy-autoscaler", nil, nil)); err != nil {
			t.Errorf("allowed common name: %v", err)
		}
		if err := grpcCall(t, gw.addrs.GRPC, issue("cluster-autoscaler", []string{service.DefaultAllowedClient}, nil)); status.Code(err) != codes.PermissionDenied {
			t.Errorf("identity not in the configured list: %v, want PermissionDenied", err)
		}
	})

	t.Run("empty list admits every verified client", func(t *testing.T) {
		gw := startGateway(t, func(c *service.Config) {
			mtls(c)
			c.GRPCAllowedClients = nil
		})
		if err := grpcCall(t, gw.addrs.GRPC, issue("anyone", nil, nil)); err != nil {
			t.Errorf("empty allow-list: %v", err)
		}
	})
}

// REST over TLS with the gRPC server's reloader: HTTPS with the bearer
// token, plaintext refused, a rotated certificate served without a
// restart, and an optional client CA for mTLS.
func TestRESTOverTLS(t *testing.T) {
	dir := t.TempDir()
	ca, serverPair, files := serverCert(t, dir, "rest-ca", "api-gateway-rest")
	gw := startGateway(t, func(c *service.Config) {
		c.RESTInsecure = false
		c.RESTCertFile, c.RESTKeyFile = files.Cert, files.Key
	})
	// get answers the status and protocol of a GET with the admin token.
	type answer struct {
		status int
		proto  string
	}
	get := func(cfg *tls.Config, scheme string) (answer, error) {
		// ForceAttemptHTTP2 offers h2 by ALPN unless cfg.NextProtos says
		// otherwise.
		tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: cfg == nil || len(cfg.NextProtos) == 0}
		defer tr.CloseIdleConnections()
		req, _ := http.NewRequest(http.MethodGet, scheme+"://"+gw.addrs.REST+"/api/v1/nodegroups", nil)
		req.Header.Set("Authorization", "Bearer "+adminToken)
		resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			return answer{}, err
		}
		defer func() { _ = resp.Body.Close() }()
		_, _ = io.Copy(io.Discard, resp.Body)
		return answer{resp.StatusCode, resp.Proto}, nil
	}
	a, err := get(testcerts.ClientConfig(ca, nil, "localhost"), "https")
	if err != nil || a.status != http.StatusOK {
		t.Fatalf("HTTPS: %+v %v", a, err)
	}
	if a.proto != "HTTP/2.0" {
		t.Errorf("HTTPS answered over %s, want HTTP/2 negotiated by ALPN", a.proto)
	}
	// A client offering only HTTP/1.1 by ALPN is served too.
	h1 := testcerts.ClientConfig(ca, nil, "localhost")
	h1.NextProtos = []string{"http/1.1"}
	if a, err := get(h1, "https"); err != nil || a.status != http.StatusOK || a.proto != "HTTP/1.1" {
		t.Errorf("HTTP/1.1 over TLS: %+v %v", a, err)
	}
	if a, err := get(nil, "http"); err == nil && a.status < 400 {
		t.Errorf("plaintext request answered %d on the TLS port", a.status)
	}

	// Rotate to a certificate from a new CA: new connections get it.
	ca2 := mustCA(t, "rest-ca-2")
	server2, _ := ca2.Server("api-gateway-rest")
	if _, err := testcerts.WriteServerFiles(dir, server2, ca2.PEM, time.Now()); err != nil {
		t.Fatal(err)
	}
	if a, err := get(testcerts.ClientConfig(ca2, nil, "localhost"), "https"); err != nil || a.status != http.StatusOK {
		t.Fatalf("after rotation: %+v %v", a, err)
	}
	if _, err := get(testcerts.ClientConfig(ca, nil, "localhost"), "https"); err == nil {
		t.Error("the retired certificate is still served after rotation")
	}

	t.Run("client CA", func(t *testing.T) {
		dir := t.TempDir()
		files, err := testcerts.WriteServerFiles(dir, serverPair, ca.PEM, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		gw := startGateway(t, func(c *service.Config) {
			c.RESTInsecure = false
			c.RESTCertFile, c.RESTKeyFile, c.RESTClientCAFile = files.Cert, files.Key, files.ClientCA
		})
		client, _ := ca.Client("operator")
		call := func(cfg *tls.Config) (int, error) {
			tr := &http.Transport{TLSClientConfig: cfg}
			defer tr.CloseIdleConnections()
			req, _ := http.NewRequest(http.MethodGet, "https://"+gw.addrs.REST+"/api/v1/status", nil)
			req.Header.Set("Authorization", "Bearer "+readOnlyToken)
			resp, err := (&http.Client{Transport: tr, Timeout: 5 * time.Second}).Do(req)
			if err != nil {
				return 0, err
			}
			defer func() { _ = resp.Body.Close() }()
			var body map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&body)
			return resp.StatusCode, nil
		}
		if code, err := call(testcerts.ClientConfig(ca, client, "localhost")); err != nil || code != http.StatusOK {
			t.Errorf("with a client certificate: %d %v", code, err)
		}
		if code, err := call(testcerts.ClientConfig(ca, nil, "localhost")); err == nil {
			t.Errorf("without a client certificate: answered %d", code)
		}
	})
}

// A start with unusable REST certificate files fails fast.
func TestRESTTLSFailsFast(t *testing.T) {
	cfg := service.DefaultConfig()
	cfg.GRPCInsecure = true
	cfg.RESTCertFile, cfg.RESTKeyFile = "/nonexistent/tls.crt", "/nonexistent/tls.key"
	err := service.Run(context.Background(), cfg, service.Deps{})
	if err == nil || !strings.Contains(err.Error(), "REST TLS") {
		t.Fatalf("Run = %v", err)
	}
}

// --grpc-max-concurrent-streams bounds the calls one connection has open:
// with 2 health watches (long-lived streams) open, a third call waits for
// a slot, and runs once a watch ends.
func TestGRPCMaxConcurrentStreams(t *testing.T) {
	gw := startGateway(t, func(c *service.Config) { c.GRPCMaxConcurrentStreams = 2 })
	conn, err := grpc.NewClient(gw.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	hc := healthpb.NewHealthClient(conn)
	// A first call establishes the connection and its SETTINGS.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
		t.Fatal(err)
	}
	var cancels []context.CancelFunc
	for range 2 {
		wctx, wcancel := context.WithCancel(ctx)
		cancels = append(cancels, wcancel)
		w, err := hc.Watch(wctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recv(); err != nil { // the stream is open on the server
			t.Fatal(err)
		}
	}
	short, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer scancel()
	if _, err := hc.Check(short, &healthpb.HealthCheckRequest{}); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("third call with two streams open: %v, want it to wait (DeadlineExceeded)", err)
	}
	cancels[0]()
	deadline := time.Now().Add(5 * time.Second)
	for {
		c, cc := context.WithTimeout(ctx, 300*time.Millisecond)
		_, err := hc.Check(c, &healthpb.HealthCheckRequest{})
		cc()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("call after a watch ended: %v", err)
		}
	}
	cancels[1]()
}

// --grpc-stream-workers keeps goroutines to serve calls, but never makes a
// call wait for one: with the only worker held by a long-lived health
// watch (and a second watch beside it), unary calls are still served.
func TestGRPCStreamWorkersNeverQueueCalls(t *testing.T) {
	gw := startGateway(t, func(c *service.Config) { c.GRPCStreamWorkers = 1 })
	conn, err := grpc.NewClient(gw.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = conn.Close() }()
	hc := healthpb.NewHealthClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for range 2 {
		w, err := hc.Watch(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Recv(); err != nil { // the stream is open on the server
			t.Fatal(err)
		}
	}
	for i := range 20 {
		if _, err := hc.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			t.Fatalf("call %d with the worker held by a watch: %v", i, err)
		}
	}
}

// The REST rate limit is wired from the configuration: past the burst a
// token gets 429 with Retry-After and the JSON error body; another token
// is served.
func TestRESTRateLimitWired(t *testing.T) {
	gw := startGateway(t, func(c *service.Config) { c.RESTRateLimit, c.RESTRateBurst = 0.5, 2 })
	// get answers the status code, Retry-After header and body of a GET.
	get := func(token string) (code int, retryAfter string, body []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, "http://"+gw.addrs.REST+"/api/v1/status", nil)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		body, _ = io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header.Get("Retry-After"), body
	}
	for range 2 {
		if code, _, body := get(readOnlyToken); code != http.StatusOK {
			t.Fatalf("within the burst: %d %s", code, body)
		}
	}
	code, retryAfter, body := get(readOnlyToken)
	var e struct {
		Code    string         `json:"code"`
		Details map[string]any `json:"details"`
	}
	if code != http.StatusTooManyRequests || json.Unmarshal(body, &e) != nil || e.Code != "resource_exhausted" {
		t.Fatalf("past the burst: %d %s", code, body)
	}
	if retryAfter != "2" {
		t.Errorf("Retry-After = %q, want 2 (0.5/s)", retryAfter)
	}
	if code, _, _ := get(adminToken); code != http.StatusOK {
		t.Errorf("another token: %d", code)
	}
}
