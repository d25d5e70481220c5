package service_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	reflectionpb "google.golang.org/grpc/reflection/grpc_reflection_v1"
	"google.golang.org/grpc/status"

	"github.com/nodesmith/nodesmith/libs/config"
	"github.com/nodesmith/nodesmith/libs/health"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"

	"github.com/nodesmith/nodesmith/services/api-gateway/internal/testcerts"
	"github.com/nodesmith/nodesmith/services/api-gateway/service"
)

func TestConfigValidate(t *testing.T) {
	base := service.DefaultConfig()
	base.GRPCInsecure, base.RESTInsecure = true, true
	tests := []struct {
		name    string
		mutate  func(*service.Config)
		wantErr string
	}{
		{"insecure explicitly", func(*service.Config) {}, ""},
		{"mTLS", func(c *service.Config) {
			c.GRPCInsecure = false
			c.GRPCCertFile, c.GRPCKeyFile, c.GRPCClientCAFile = "c", "k", "ca"
		}, ""},
		{"neither TLS nor insecure", func(c *service.Config) { c.GRPCInsecure = false }, "refusing to serve gRPC without TLS"},
		{"TLS without client CA", func(c *service.Config) {
			c.GRPCInsecure = false
			c.GRPCCertFile, c.GRPCKeyFile = "c", "k"
		}, "all of --grpc-cert-file"},
		{"TLS and insecure", func(c *service.Config) { c.GRPCCertFile, c.GRPCKeyFile, c.GRPCClientCAFile = "c", "k", "ca" }, "conflicts"},
		{"no grpc address", func(c *service.Config) { c.GRPCAddr = "" }, "--grpc-addr"},
		{"attempt beyond deadline", func(c *service.Config) { c.LifecycleAttemptTimeout = 10 * time.Second }, "--lifecycle-attempt-timeout"},
		{"no gpu label", func(c *service.Config) { c.GPULabel = "" }, "--gpu-label"},
		{"tiny messages", func(c *service.Config) { c.GRPCMaxRecvMsgBytes = 10 }, "--grpc-max-recv-msg-bytes"},
		{"bad topology", func(c *service.Config) { c.Topology.Replicas = 0 }, "topology"},
		{"REST over TLS", func(c *service.Config) {
			c.RESTInsecure = false
			c.RESTCertFile, c.RESTKeyFile = "c", "k"
		}, ""},
		{"REST over mTLS", func(c *service.Config) {
			c.RESTInsecure = false
			c.RESTCertFile, c.RESTKeyFile, c.RESTClientCAFile = "c", "k", "ca"
		}, ""},
		{"REST neither TLS nor insecure", func(c *service.Config) { c.RESTInsecure = false }, "refusing to serve REST without TLS"},
		{"REST disabled needs no TLS decision", func(c *service.Config) { c.RESTInsecure, c.RESTAddr = false, "" }, ""},
		{"REST TLS without key", func(c *service.Config) {
			c.RESTInsecure = false
			c.RESTCertFile = "c"
		}, "both --rest-tls-cert-file and --rest-tls-key-file"},
		{"REST TLS and insecure", func(c *service.Config) { c.RESTCertFile, c.RESTKeyFile = "c", "k" }, "--rest-insecure conflicts"},
		{"no concurrent streams", func(c *service.Config) { c.GRPCMaxConcurrentStreams = 0 }, "--grpc-max-concurrent-streams"},
		{"no stream workers", func(c *service.Config) { c.GRPCStreamWorkers = 0 }, ""},
		{"too many stream workers", func(c *service.Config) { c.GRPCStreamWorkers = service.MaxStreamWorkers + 1 }, "--grpc-stream-workers must be at most 1024"},
		{"negative rate", func(c *service.Config) { c.RESTRateLimit = -1 }, "--rest-rate-limit"},
		{"rate without burst", func(c *service.Config) { c.RESTRateBurst = 0 }, "--rest-rate-burst"},
		{"rate limit off", func(c *service.Config) { c.RESTRateLimit, c.RESTRateBurst = 0, 0 }, ""},
		{"no watchers", func(c *service.Config) { c.RESTMaxWatchers = 0 }, "--rest-max-watchers"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := base
			tt.mutate(&c)
			err := c.Validate()
			if tt.wantErr == "" && err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.wantErr)
			}
		})
	}
}

func TestRunRefusesPlaintextByDefault(t *testing.T) {
	err := service.Run(context.Background(), service.DefaultConfig(), service.Deps{})
	if err == nil || !strings.Contains(err.Error(), "refusing to serve gRPC without TLS") || !strings.Contains(err.Error(), "refusing to serve REST without TLS") {
		t.Fatalf("Run = %v", err)
	}
	cfg := service.DefaultConfig()
	cfg.GRPCInsecure = true
	if err := service.Run(context.Background(), cfg, service.Deps{}); err == nil || !strings.Contains(err.Error(), "refusing to serve REST without TLS") {
		t.Fatalf("Run with only --grpc-insecure = %v", err)
	}
}

func TestFlagsAndEnvironment(t *testing.T) {
	cfg := service.DefaultConfig()
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	env := map[string]string{
		"NODESMITH_GRPC_INSECURE":               "true",
		"NODESMITH_REST_TLS_CERT_FILE":          "/tls/tls.crt",
		"NODESMITH_REST_TLS_KEY_FILE":           "/tls/tls.key",
		"NODESMITH_REST_TLS_CLIENT_CA_FILE":     "/tls/ca.crt",
		"NODESMITH_GRPC_ALLOWED_CLIENTS":        "spiffe://example.org/a, b.example.org,",
		"NODESMITH_GRPC_MAX_CONCURRENT_STREAMS": "32",
		"NODESMITH_REST_RATE_LIMIT":             "2.5",
		"NODESMITH_REST_RATE_BURST":             "5",
		"NODESMITH_GPU_LABEL":                   "example.com/gpu",
		"NODESMITH_LIFECYCLE_TIMEOUT":           "3s",
		service.EnvAdminTokens:                  "tok-aaaaaaaaaaaaaaaa, tok-bbbbbbbbbbbbbbbb\n",
		service.EnvReadOnlyTokens:               "tok-cccccccccccccccc",
		"NODESMITH_REST_ADMIN_TOKENS_X":         "ignored",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := config.Parse(fs, []string{"--grpc-addr=127.0.0.1:9999"}, lookup); err != nil {
		t.Fatal(err)
	}
	cfg.LoadEnv(lookup)
	if !cfg.GRPCInsecure || cfg.GPULabel != "example.com/gpu" || cfg.LifecycleTimeout != 3*time.Second || cfg.GRPCAddr != "127.0.0.1:9999" {
		t.Errorf("flags/env not applied: %+v", cfg)
	}
	if cfg.RESTCertFile != "/tls/tls.crt" || cfg.RESTKeyFile != "/tls/tls.key" || cfg.RESTClientCAFile != "/tls/ca.crt" || cfg.RESTInsecure {
		t.Errorf("REST TLS from env: %+v", cfg)
	}
	if !slices.Equal(cfg.GRPCAllowedClients, []string{"spiffe://example.org/a", "b.example.org"}) || cfg.GRPCMaxConcurrentStreams != 32 || cfg.RESTRateLimit != 2.5 || cfg.RESTRateBurst != 5 {
		t.Errorf("allowed clients / streams / rate from env: %q %d %v %d", cfg.GRPCAllowedClients, cfg.GRPCMaxConcurrentStreams, cfg.RESTRateLimit, cfg.RESTRateBurst)
	}
	if !slices.Equal(cfg.AdminTokens, []string{"tok-aaaaaaaaaaaaaaaa", "tok-bbbbbbbbbbbbbbbb"}) || !slices.Equal(cfg.ReadOnlyTokens, []string{"tok-cccccccccccccccc"}) {
		t.Errorf("tokens: %q %q", cfg.AdminTokens, cfg.ReadOnlyTokens)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
}

// The operational surface: gRPC health and reflection (grpcurl works
// without -proto), REST with tokens, /readyz and /metrics.
func TestOperationalEndpoints(t *testing.T) {
	gw := startGateway(t, nil)
	conn, err := grpc.NewClient(gw.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	for _, svc := range []string{"", service.GRPCServiceName} {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: svc})
		if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			t.Errorf("health(%q) = %v, %v", svc, resp.GetStatus(), err)
		}
	}

	stream, err := reflectionpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&reflectionpb.ServerReflectionRequest{MessageRequest: &reflectionpb.ServerReflectionRequest_ListServices{}}); err != nil {
		t.Fatal(err)
	}
	resp, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range resp.GetListServicesResponse().GetService() {
		names = append(names, s.GetName())
	}
	if !slices.Contains(names, service.GRPCServiceName) {
		t.Errorf("reflection lists %v, want %s", names, service.GRPCServiceName)
	}

	get := func(url, token string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer func() { _ = resp.Body.Close() }()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	if code, _ := get("http://"+gw.addrs.REST+"/api/v1/status", ""); code != http.StatusUnauthorized {
		t.Errorf("anonymous REST = %d", code)
	}
	code, body := get("http://"+gw.addrs.REST+"/api/v1/status", readOnlyToken)
	var st struct {
		Synced bool           `json:"synced"`
		Totals map[string]int `json:"totals"`
	}
	if code != http.StatusOK || json.Unmarshal(body, &st) != nil || !st.Synced || st.Totals["RUNNING"] != 2 {
		t.Errorf("REST status = %d %s", code, body)
	}
	if code, body := get("http://"+gw.addrs.Health+"/readyz", ""); code != http.StatusOK {
		t.Errorf("/readyz = %d %s", code, body)
	}
	// One CA call, then its metric.
	if _, err := pb.NewCloudProviderClient(conn).Refresh(ctx, &pb.RefreshRequest{}); err != nil {
		t.Fatal(err)
	}
	_, metrics := get("http://"+gw.addrs.Health+"/metrics", "")
	for _, want := range []string{
		`nodesmith_gateway_grpc_requests_total{code="OK",method="Refresh"} 1`,
		"nodesmith_gateway_grpc_request_duration_seconds_bucket",
		"nodesmith_gateway_readmodel_synced 1",
		`nodesmith_gateway_readmodel_revision{bucket="instances"}`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

// CA's cloud-config with cert, key and cacert: mTLS, the server name
// checked against the address, and certificates rotated in place.
func TestMutualTLS(t *testing.T) {
	dir := t.TempDir()
	ca, _, files := serverCert(t, dir, "cluster-ca", "api-gateway")
	gw := startGateway(t, func(c *service.Config) {
		c.GRPCInsecure = false
		c.GRPCCertFile, c.GRPCKeyFile, c.GRPCClientCAFile = files.Cert, files.Key, files.ClientCA
	})
	// CA's certificate as components/mtls issues it: the default
	// --grpc-allowed-clients names its SPIFFE id.
	clientPair, err := ca.ClientWith("cluster-autoscaler", []string{service.DefaultAllowedClient}, nil)
	if err != nil {
		t.Fatal(err)
	}

	call := func(cfg *tls.Config) error {
		conn, err := grpc.NewClient(gw.addrs.GRPC, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			return err
		}
		defer func() { _ = conn.Close() }()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = pb.NewCloudProviderClient(conn).NodeGroups(ctx, &pb.NodeGroupsRequest{})
		return err
	}
	if err := call(testcerts.ClientConfig(ca, clientPair, "localhost")); err != nil {
		t.Fatalf("mTLS call: %v", err)
	}
	if err := call(testcerts.ClientConfig(ca, nil, "localhost")); status.Code(err) != codes.Unavailable {
		t.Errorf("call without a client certificate = %v, want a failed handshake", err)
	}
	if err := call(testcerts.ClientConfig(ca, clientPair, "wrong-name.example")); err == nil {
		t.Error("server name not matching the certificate SAN was accepted by the client")
	}
	plain, err := grpc.NewClient(gw.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = plain.Close() }()
	pctx, pcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer pcancel()
	if _, err := pb.NewCloudProviderClient(plain).NodeGroups(pctx, &pb.NodeGroupsRequest{}); err == nil {
		t.Error("plaintext call accepted by the mTLS server")
	}

	// Rotate to a new CA; new connections use it without a restart.
	ca2 := mustCA(t, "cluster-ca-2")
	server2, _ := ca2.Server("api-gateway")
	client2, _ := ca2.ClientWith("cluster-autoscaler", []string{service.DefaultAllowedClient}, nil)
	if _, err := testcerts.WriteServerFiles(dir, server2, ca2.PEM, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := call(testcerts.ClientConfig(ca2, client2, "localhost")); err != nil {
		t.Fatalf("after rotation: %v", err)
	}
	if err := call(testcerts.ClientConfig(ca, clientPair, "localhost")); err == nil {
		t.Error("the retired CA still works after rotation")
	}
}

// serverCert makes a CA named caName and a server certificate for
// serverName, and writes them into dir as the gateway reads them, dated an
// hour back so that a rotation the test writes later is newer.
func serverCert(t *testing.T, dir, caName, serverName string) (*testcerts.CA, *testcerts.Pair, testcerts.Files) {
	t.Helper()
	ca := mustCA(t, caName)
	pair, err := ca.Server(serverName)
	if err != nil {
		t.Fatal(err)
	}
	files, err := testcerts.WriteServerFiles(dir, pair, ca.PEM, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return ca, pair, files
}

func mustCA(t *testing.T, name string) *testcerts.CA {
	t.Helper()
	ca, err := testcerts.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// The embedded launcher may restart the gateway in-process with the same
// registry and health checks.
func TestRestartWithSharedRegistry(t *testing.T) {
	env := natstest.Start(t)
	reg := prometheus.NewRegistry()
	checks := &health.Checks{}
	for round := range 2 {
		cfg := service.DefaultConfig()
		cfg.GRPCAddr, cfg.RESTAddr, cfg.HealthAddr = "127.0.0.1:0", "", ""
		cfg.GRPCInsecure = true
		nc, _ := env.ConnectAs(t, natsauth.APIGateway)
		ctx, cancel := context.WithCancel(context.Background())
		ready := make(chan service.Addrs, 1)
		done := make(chan error, 1)
		go func() {
			done <- service.Run(ctx, cfg, service.Deps{Conn: nc, Registry: reg, Health: checks, OnReady: func(a service.Addrs) { ready <- a }})
		}()
		select {
		case <-ready:
		case err := <-done:
			t.Fatalf("round %d: Run: %v", round, err)
		case <-time.After(30 * time.Second):
			t.Fatalf("round %d: not ready", round)
		}
		if failed := checks.Run(context.Background()); len(failed) != 0 {
			t.Errorf("round %d: readiness failed: %v", round, failed)
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("round %d: Run returned %v", round, err)
		}
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "nodesmith_gateway_") {
			t.Errorf("metric %s still registered after Run returned", mf.GetName())
		}
	}
}

// After start-up the gRPC health service follows /readyz's conditions: a
// gateway cut off from NATS stops reporting SERVING (gRPC probes and load
// balancers then take it out).
func TestGRPCHealthFollowsReadiness(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for the NATS client to notice a stopped server")
	}
	gw := startGateway(t, nil)
	conn, err := grpc.NewClient(gw.addrs.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	status := func() healthpb.HealthCheckResponse_ServingStatus {
		resp, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service.GRPCServiceName})
		if err != nil {
			t.Fatalf("health check: %v", err)
		}
		return resp.GetStatus()
	}
	if got := status(); got != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("before: %v, want SERVING", got)
	}
	gw.env.Server.Shutdown()
	for status() != healthpb.HealthCheckResponse_NOT_SERVING {
		select {
		case <-ctx.Done():
			t.Fatal("still SERVING a minute after NATS stopped")
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func TestDefaults(t *testing.T) {
	cfg := service.DefaultConfig()
	if !slices.Equal(cfg.GRPCAllowedClients, []string{service.DefaultAllowedClient}) || service.DefaultAllowedClient != "spiffe://cluster.local/ns/nodesmith/sa/cluster-autoscaler" {
		t.Errorf("default allowed clients %q", cfg.GRPCAllowedClients)
	}
	if cfg.RESTMaxWatchers != 100 {
		t.Errorf("default --rest-max-watchers %d", cfg.RESTMaxWatchers)
	}
	if cfg.GRPCMaxConcurrentStreams != 256 || cfg.RESTRateLimit != 10 || cfg.RESTRateBurst != 40 || cfg.RESTInsecure {
		t.Errorf("defaults: streams %d rate %v burst %d rest-insecure %v", cfg.GRPCMaxConcurrentStreams, cfg.RESTRateLimit, cfg.RESTRateBurst, cfg.RESTInsecure)
	}
	// An empty variable clears the list (every verified client admitted).
	fs := flag.NewFlagSet("t", flag.ContinueOnError)
	cfg.RegisterFlags(fs)
	if err := config.Parse(fs, nil, func(k string) (string, bool) { return "", k == "NODESMITH_GRPC_ALLOWED_CLIENTS" }); err != nil {
		t.Fatal(err)
	}
	if len(cfg.GRPCAllowedClients) != 0 {
		t.Errorf("empty NODESMITH_GRPC_ALLOWED_CLIENTS left %q", cfg.GRPCAllowedClients)
	}
}
