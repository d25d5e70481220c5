package natsauth_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	"github.com/nodesmith/nodesmith/libs/natstest"
)

// dialer connects to the server under test as an identity, or anonymously
// (id == "").
type dialer func(t *testing.T, id natsauth.Identity, opts ...nats.Option) (*nats.Conn, error)

// client is a connection that records the server's asynchronous errors
// (permission violations arrive that way).
type client struct {
	nc   *nats.Conn
	js   jetstream.JetStream
	errs chan error
}

func connect(t *testing.T, dial dialer, id natsauth.Identity) *client {
	t.Helper()
	errs := make(chan error, 64)
	nc, err := dial(t, id, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		select {
		case errs <- err:
		default:
		}
	}))
	if err != nil {
		t.Fatalf("connecting as %s: %v", id, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return &client{nc: nc, js: js, errs: errs}
}

// forbidden runs do and wants the server's permissions violation naming
// subject (do's own error, a timeout, does not matter).
func (c *client) forbidden(t *testing.T, what, subject string, do func(ctx context.Context) error) {
	t.Helper()
	for len(c.errs) > 0 {
		<-c.errs
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	doErr := do(ctx)
	deadline := time.After(5 * time.Second)
	for {
		select {
		case err := <-c.errs:
			if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), `"`+subject) {
				return
			}
		case <-deadline:
			t.Errorf("%s: no permissions violation for %s (the call returned %v)", what, subject, doErr)
			return
		}
	}
}

func (c *client) allowed(t *testing.T, what string, do func(ctx context.Context) error) {
	t.Helper()
	for len(c.errs) > 0 {
		<-c.errs
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := do(ctx); err != nil {
		t.Errorf("%s: %v", what, err)
	}
	select {
	case err := <-c.errs:
		t.Errorf("%s: %v", what, err)
	default:
	}
}

// checkPermissions is the acceptance check of the shipped identities
// against a real server: no anonymous access, and for each identity what
// it needs works and what it must not do is refused by the server.
func checkPermissions(t *testing.T, dial dialer) {
	if nc, err := dial(t, ""); err == nil {
		nc.Close()
		t.Fatal("an anonymous connection was accepted")
	} else if !strings.Contains(strings.ToLower(err.Error()), "authorization") {
		t.Errorf("anonymous connection: %v, want an authorization violation", err)
	}

	lc := connect(t, dial, natsauth.Lifecycle)
	gw := connect(t, dial, natsauth.APIGateway)
	ca := connect(t, dial, natsauth.CloudAdapter)
	hr := connect(t, dial, natsauth.HookRunner)

	// lifecycle: bootstraps the topology, writes state, sends commands,
	// answers operations.
	lc.allowed(t, "lifecycle ensures the topology", func(ctx context.Context) error {
		return messaging.Ensure(ctx, lc.js, messaging.DefaultOptions())
	})
	lc.allowed(t, "lifecycle writes an instance", func(ctx context.Context) error {
		kv, err := lc.js.KeyValue(ctx, messaging.BucketInstances)
		if err == nil {
			_, err = kv.Put(ctx, messaging.InstanceKey("g", "i-1"), []byte("x"))
		}
		return err
	})
	lc.allowed(t, "lifecycle writes catalog entries", func(ctx context.Context) error {
		kv, err := lc.js.KeyValue(ctx, messaging.BucketCatalog)
		if err == nil {
			_, err = kv.Put(ctx, messaging.CatalogKey(messaging.CatalogKeyAccount, "main"), []byte("sealed"))
		}
		if err == nil {
			_, err = kv.Put(ctx, messaging.CatalogKey(messaging.CatalogKeyTemplate, "t"), []byte("template"))
		}
		return err
	})
	pub := messaging.NewPublisher(lc.js)
	lc.allowed(t, "lifecycle commands the workers", func(ctx context.Context) error {
		if _, err := pub.Publish(ctx, messaging.SubjectCloudCreate, "c1", nil); err != nil {
			return err
		}
		_, err := pub.Publish(ctx, messaging.SubjectHookRun, "h1", nil)
		return err
	})
	ops, err := lc.nc.QueueSubscribe(messaging.SubjectLifecycleOps, "lifecycle", func(m *nats.Msg) { _ = m.Respond([]byte("pong")) })
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ops.Unsubscribe() }()
	if err := lc.nc.Flush(); err != nil {
		t.Fatal(err)
	}

	// api-gateway: requests operations, reads KV.
	gw.allowed(t, "the gateway requests an operation (lifecycle answers)", func(ctx context.Context) error {
		_, err := gw.nc.RequestWithContext(ctx, messaging.SubjectLifecycleOps, []byte("ping"))
		return err
	})
	for _, b := range []string{messaging.BucketGroups, messaging.BucketInstances, messaging.BucketCatalog} {
		gw.allowed(t, "the gateway watches "+b, func(ctx context.Context) error {
			return watchOnce(ctx, gw.js, b, ">")
		})
	}
	// nats.go re-creates an ordered consumer through the legacy endpoint
	// while reconnecting (a NATS restart): allowed for whole-bucket watches.
	gw.allowed(t, "the gateway re-creates a whole-bucket watch through the legacy endpoint", func(ctx context.Context) error {
		_, err := gw.nc.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE.KV_"+messaging.BucketGroups, legacyConsumerCreate(messaging.BucketGroups, natsauth.APIGateway.InboxPrefix()+".legacy"))
		return err
	})
	gw.allowed(t, "the gateway watches the offering marks", func(ctx context.Context) error {
		return watchOnce(ctx, gw.js, messaging.BucketOfferings, ">")
	})
	offeringKey := messaging.OfferingKey("tencentcloud", "main", "ap-guangzhou", "ap-guangzhou-3", "S5.MEDIUM2", "on-demand")
	gw.forbidden(t, "the gateway marks an offering", "$KV."+messaging.BucketOfferings+"."+offeringKey, func(ctx context.Context) error {
		kv, err := gw.js.KeyValue(ctx, messaging.BucketOfferings)
		if err == nil {
			_, err = kv.Put(ctx, offeringKey, []byte("x"))
		}
		return err
	})
	gw.forbidden(t, "the gateway writes an instance", "$KV."+messaging.BucketInstances+".g.i-2", func(ctx context.Context) error {
		_, err := gw.nc.Request("$KV."+messaging.BucketInstances+".g.i-2", []byte("x"), time.Second)
		return err
	})
	gw.forbidden(t, "the gateway creates a stream", "$JS.API.STREAM.CREATE.EVIL", func(ctx context.Context) error {
		_, err := gw.js.CreateStream(ctx, jetstream.StreamConfig{Name: "EVIL", Subjects: []string{"evil.>"}})
		return err
	})
	gw.forbidden(t, "the gateway publishes a command", messaging.SubjectCloudTerminate, func(ctx context.Context) error {
		return gw.nc.Publish(messaging.SubjectCloudTerminate, []byte("x"))
	})
	gw.forbidden(t, "the gateway updates a consumer", "$JS.API.CONSUMER.CREATE."+messaging.CommandStream, func(ctx context.Context) error {
		_, err := gw.js.CreateOrUpdateConsumer(ctx, messaging.CommandStream, jetstream.ConsumerConfig{Durable: messaging.ConsumerCloudAdapter, FilterSubject: messaging.SubjectCloudCommands + ".>", AckPolicy: jetstream.AckExplicitPolicy})
		return err
	})
	gw.forbidden(t, "the gateway reads lifecycle's replies", "_INBOX.lifecycle.>", func(ctx context.Context) error {
		_, err := gw.nc.SubscribeSync("_INBOX.lifecycle.>")
		return err
	})

	// cloud-adapter: its consumer, cloud events, account credentials.
	ca.allowed(t, "the cloud adapter pulls and acks a cloud command", func(ctx context.Context) error {
		return pullOne(ctx, ca.js, messaging.ConsumerCloudAdapter)
	})
	ca.allowed(t, "the cloud adapter publishes a cloud event", func(ctx context.Context) error {
		_, err := messaging.NewPublisher(ca.js).Publish(ctx, messaging.SubjectCloudCreated, "e1", nil)
		return err
	})
	ca.allowed(t, "the cloud adapter watches the accounts", func(ctx context.Context) error {
		return watchOnce(ctx, ca.js, messaging.BucketCatalog, messaging.CatalogKey(messaging.CatalogKeyAccount, ">"))
	})
	ca.allowed(t, "the cloud adapter marks an offering", func(ctx context.Context) error {
		kv, err := ca.js.KeyValue(ctx, messaging.BucketOfferings)
		if err == nil {
			_, err = kv.Put(ctx, offeringKey, []byte("mark"))
		}
		return err
	})
	ca.allowed(t, "the cloud adapter watches the offering marks", func(ctx context.Context) error {
		return watchOnce(ctx, ca.js, messaging.BucketOfferings, ">")
	})
	ca.allowed(t, "the cloud adapter re-creates its offerings watch through the legacy endpoint", func(ctx context.Context) error {
		_, err := ca.nc.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE.KV_"+messaging.BucketOfferings, legacyConsumerCreate(messaging.BucketOfferings, natsauth.CloudAdapter.InboxPrefix()+".legacy"))
		return err
	})
	ca.forbidden(t, "the cloud adapter writes the instances bucket", "$KV."+messaging.BucketInstances+".g.i-3", func(ctx context.Context) error {
		return ca.nc.Publish("$KV."+messaging.BucketInstances+".g.i-3", []byte("x"))
	})
	ca.forbidden(t, "the cloud adapter pulls hook commands", "$JS.API.CONSUMER.MSG.NEXT."+messaging.CommandStream+"."+messaging.ConsumerHookRunner, func(ctx context.Context) error {
		_, err := ca.nc.Request("$JS.API.CONSUMER.MSG.NEXT."+messaging.CommandStream+"."+messaging.ConsumerHookRunner, []byte(`{"batch":1,"no_wait":true}`), time.Second)
		return err
	})
	ca.forbidden(t, "the cloud adapter watches the templates", "$JS.API.CONSUMER.CREATE.KV_"+messaging.BucketCatalog, func(ctx context.Context) error {
		return watchOnce(ctx, ca.js, messaging.BucketCatalog, messaging.CatalogKey(messaging.CatalogKeyTemplate, ">"))
	})
	ca.forbidden(t, "the cloud adapter creates an unfiltered catalog consumer through the legacy endpoint", "$JS.API.CONSUMER.CREATE.KV_"+messaging.BucketCatalog, func(ctx context.Context) error {
		_, err := ca.nc.RequestWithContext(ctx, "$JS.API.CONSUMER.CREATE.KV_"+messaging.BucketCatalog, legacyConsumerCreate(messaging.BucketCatalog, natsauth.CloudAdapter.InboxPrefix()+".legacy"))
		return err
	})
	ca.forbidden(t, "the cloud adapter reads a catalog key directly", "$JS.API.DIRECT.GET.KV_"+messaging.BucketCatalog, func(ctx context.Context) error {
		kv, err := ca.js.KeyValue(ctx, messaging.BucketCatalog)
		if err == nil {
			_, err = kv.Get(ctx, messaging.CatalogKey(messaging.CatalogKeyTemplate, "t"))
		}
		return err
	})
	ca.forbidden(t, "the cloud adapter publishes a hook event", messaging.SubjectHookResult, func(ctx context.Context) error {
		return ca.nc.Publish(messaging.SubjectHookResult, []byte("x"))
	})
	ca.forbidden(t, "the cloud adapter writes KV", "$KV."+messaging.BucketCatalog+".accounts.main", func(ctx context.Context) error {
		return ca.nc.Publish("$KV."+messaging.BucketCatalog+".accounts.main", []byte("x"))
	})

	// hook-runner: its consumer, hook events.
	hr.allowed(t, "the hook runner pulls and acks a hook command", func(ctx context.Context) error {
		return pullOne(ctx, hr.js, messaging.ConsumerHookRunner)
	})
	hr.allowed(t, "the hook runner publishes a hook result", func(ctx context.Context) error {
		_, err := messaging.NewPublisher(hr.js).Publish(ctx, messaging.SubjectHookResult, "r1", nil)
		return err
	})
	hr.forbidden(t, "the hook runner terminates VMs", messaging.SubjectCloudTerminate, func(ctx context.Context) error {
		_, err := hr.js.Publish(ctx, messaging.SubjectCloudTerminate, []byte("x"))
		return err
	})
	hr.forbidden(t, "the hook runner publishes a cloud event", messaging.SubjectCloudTerminated, func(ctx context.Context) error {
		return hr.nc.Publish(messaging.SubjectCloudTerminated, []byte("x"))
	})
	hr.forbidden(t, "the hook runner reads the catalog", "$JS.API.STREAM.INFO.KV_"+messaging.BucketCatalog, func(ctx context.Context) error {
		_, err := hr.js.KeyValue(ctx, messaging.BucketCatalog)
		return err
	})
	hr.forbidden(t, "the hook runner marks an offering", "$KV."+messaging.BucketOfferings+"."+offeringKey, func(ctx context.Context) error {
		return hr.nc.Publish("$KV."+messaging.BucketOfferings+"."+offeringKey, []byte("x"))
	})
	hr.forbidden(t, "the hook runner reads the cloud adapter's replies", "_INBOX.cloud-adapter.>", func(ctx context.Context) error {
		_, err := hr.nc.SubscribeSync("_INBOX.cloud-adapter.>")
		return err
	})
	hr.forbidden(t, "the hook runner answers operations", messaging.SubjectLifecycleOps, func(ctx context.Context) error {
		_, err := hr.nc.SubscribeSync(messaging.SubjectLifecycleOps)
		return err
	})
}

// watchOnce watches bucket's keys matching filter until the initial values
// are delivered.
func watchOnce(ctx context.Context, js jetstream.JetStream, bucket, filter string) error {
	kv, err := js.KeyValue(ctx, bucket)
	if err != nil {
		return err
	}
	w, err := kv.Watch(ctx, filter)
	if err != nil {
		return err
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case e := <-w.Updates():
			if e == nil {
				return nil
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func pullOne(ctx context.Context, js jetstream.JetStream, consumer string) error {
	c, err := js.Consumer(ctx, messaging.CommandStream, consumer)
	if err != nil {
		return err
	}
	batch, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	if err != nil {
		return err
	}
	if m, ok := <-batch.Messages(); ok {
		if err := m.InProgress(); err != nil {
			return err
		}
		return m.DoubleAck(ctx)
	}
	if batch.Error() != nil {
		return batch.Error()
	}
	return errors.New("no command delivered")
}

// (a) The embedded server every test and `make run` use.
func TestPermissionsOnTheEmbeddedServer(t *testing.T) {
	env := natstest.StartIn(t, t.TempDir(), false) // lifecycle ensures it in the check
	checkPermissions(t, func(t *testing.T, id natsauth.Identity, opts ...nats.Option) (*nats.Conn, error) {
		if id != "" {
			opts = append(env.NATSOptions(t, id), opts...)
		}
		return nats.Connect(env.Server.ClientURL(), append(opts, nats.NoReconnect())...)
	})
}

// (b) A nats-server configured from the production files: nats.conf,
// the generated nats-authorization.conf and components/nats-tls, with the
// public keys in NODESMITH_NKEY_* as the StatefulSet sets them. Adjusted
// only where a single local server requires it: the TLS files' directories
// (/etc/nats-tls, the client CA's; /etc/nats-route-tls, the route CA's)
// point at certificates made here, and after parsing, the listen port,
// monitoring port, store and pid paths are local and the cluster block
// (routes to nats-N.nats-headless, which would keep JetStream waiting for a
// quorum) is dropped, once its TLS configuration is checked: it refuses a
// service's client certificate (routes bypass the NKey permissions).
func TestPermissionsOnTheProductionConfiguration(t *testing.T) {
	deploy := filepath.Join("..", "..", "deploy", "kustomize")
	dir := t.TempDir()
	tlsDir, routeDir := filepath.Join(dir, "tls"), filepath.Join(dir, "route-tls")
	caFile, clientCert, clientKey := writeTLS(t, tlsDir, "test-nats-ca")
	writeTLS(t, routeDir, "test-nats-route-ca")
	copyConf := func(src, name string) {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		s := strings.ReplaceAll(string(b), "/etc/nats-route-tls", routeDir)
		s = strings.ReplaceAll(s, "/etc/nats-tls", tlsDir)
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	copyConf(filepath.Join(deploy, "base", "files", "nats.conf"), "nats.conf")
	copyConf(filepath.Join(deploy, "base", "files", "nats-authorization.conf"), "nats-authorization.conf")
	copyConf(filepath.Join(deploy, "components", "nats-tls", "nats-tls.conf"), "nats-tls.conf")
	copyConf(filepath.Join(deploy, "components", "nats-tls", "nats-route-tls.conf"), "nats-route-tls.conf")

	keys, err := natsauth.GenerateKeys()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("POD_NAME", "nats-0")
	for _, id := range natsauth.All() {
		// As make secrets writes them: one key per file, newline-terminated.
		t.Setenv(id.EnvVar(), keys.PublicKey(id)+"\n")
	}
	opts, err := server.ProcessConfigFile(filepath.Join(dir, "nats.conf"))
	if err != nil {
		t.Fatalf("the production nats.conf: %v", err)
	}
	if len(opts.Nkeys) != len(natsauth.All()) || len(opts.Users) != 0 || opts.NoAuthUser != "" {
		t.Fatalf("production users: %d nkeys, %d users, no_auth_user %q; want exactly one nkey per identity", len(opts.Nkeys), len(opts.Users), opts.NoAuthUser)
	}
	if opts.TLSConfig == nil || opts.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatal("production clients are not required to present verified certificates")
	}
	if opts.Cluster.TLSConfig == nil || opts.Cluster.TLSConfig.ClientAuth != tls.RequireAndVerifyClientCert {
		t.Fatal("production routes are not mutually verified TLS")
	}
	// A route trusts the route CA only: a service's client certificate
	// (client CA) is refused there, a server's route certificate accepted;
	// and a route certificate is no client certificate.
	routeCert, routeKey := filepath.Join(routeDir, "tls.crt"), filepath.Join(routeDir, "tls.key")
	if err := handshake(t, opts.Cluster.TLSConfig, clientCert, clientKey); !refused(err) {
		t.Errorf("the route TLS did not refuse a service's client certificate (%v): a service could open a route and bypass its permissions", err)
	}
	if err := handshake(t, opts.Cluster.TLSConfig, routeCert, routeKey); err != nil {
		t.Errorf("the route TLS refused a route certificate: %v", err)
	}
	if err := handshake(t, opts.TLSConfig, routeCert, routeKey); !refused(err) {
		t.Errorf("the client TLS did not refuse a route certificate (%v)", err)
	}
	if err := handshake(t, opts.TLSConfig, clientCert, clientKey); err != nil {
		t.Errorf("the client TLS refused a service's client certificate: %v", err)
	}
	opts.Host, opts.Port, opts.HTTPPort = "127.0.0.1", -1, 0
	opts.StoreDir, opts.PidFile = filepath.Join(dir, "data"), filepath.Join(dir, "nats.pid")
	opts.Cluster, opts.Routes = server.ClusterOpts{}, nil
	opts.NoSigs, opts.LameDuckDuration = true, 0
	ns := natstest.RunServer(t, opts)

	url := strings.Replace(ns.ClientURL(), "nats://", "tls://", 1)
	tlsOpts := []nats.Option{nats.RootCAs(caFile), nats.ClientCert(clientCert, clientKey), nats.NoReconnect()}
	if nc, err := nats.Connect(url, append(keys.NATSOptions(natsauth.Lifecycle), nats.RootCAs(caFile), nats.NoReconnect())...); err == nil {
		nc.Close()
		t.Error("a client without a certificate was accepted")
	}
	checkPermissions(t, func(t *testing.T, id natsauth.Identity, extra ...nats.Option) (*nats.Conn, error) {
		o := append([]nats.Option{}, tlsOpts...)
		if id != "" {
			o = append(o, keys.NATSOptions(id)...)
		}
		return nats.Connect(url, append(o, extra...)...)
	})
}

// handshake runs a TLS handshake on loopback between a server with the
// configuration server and a client presenting the certificate in
// certFile/keyFile (not verifying the server's): the server's error, nil
// if it accepted the client's certificate.
func handshake(t *testing.T, server *tls.Config, certFile, keyFile string) error {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		// Presented whatever CAs the server names as acceptable, as an
		// attacker would.
		tc := tls.Client(c, &tls.Config{ //nolint:gosec // only the server's verification is tested
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil },
			InsecureSkipVerify:   true, MinVersion: tls.VersionTLS12,
		})
		if tc.Handshake() == nil {
			_, _ = tc.Read(make([]byte, 1)) // until the server closes
		}
	}()
	defer func() { <-done }()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	return tls.Server(c, server.Clone()).Handshake()
}

// refused: the server verified the client's certificate and refused it.
func refused(err error) bool {
	var v *tls.CertificateVerificationError
	return errors.As(err, &v)
}

// writeTLS makes a CA named caName, a server certificate for 127.0.0.1
// (tls.crt, server and client auth) and a client certificate, as
// components/nats-tls's Secrets hold them.
func writeTLS(t *testing.T, dir, caName string) (caFile, clientCert, clientKey string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: caName}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, der []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	caFile = write("ca.crt", "CERTIFICATE", caDER)
	issue := func(serial int64, usage x509.ExtKeyUsage, ips []net.IP) ([]byte, []byte) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "test"}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
			KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage, x509.ExtKeyUsageClientAuth}, IPAddresses: ips}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(key)
		return der, kder
	}
	sder, skey := issue(2, x509.ExtKeyUsageServerAuth, []net.IP{net.ParseIP("127.0.0.1")})
	write("tls.crt", "CERTIFICATE", sder)
	write("tls.key", "EC PRIVATE KEY", skey)
	cder, ckey := issue(3, x509.ExtKeyUsageClientAuth, nil)
	return caFile, write("client.crt", "CERTIFICATE", cder), write("client.key", "EC PRIVATE KEY", ckey)
}

// legacyConsumerCreate is the request nats.go sends to the legacy
// ephemeral endpoint: an ordered push consumer of the whole bucket.
func legacyConsumerCreate(bucket, deliver string) []byte {
	return []byte(`{"stream_name":"KV_` + bucket + `","config":{"deliver_subject":"` + deliver + `","deliver_policy":"last_per_subject","ack_policy":"none","filter_subject":"$KV.` + bucket + `.>","flow_control":true,"idle_heartbeat":5000000000,"mem_storage":true,"inactive_threshold":5000000000,"num_replicas":1}}`)
}
