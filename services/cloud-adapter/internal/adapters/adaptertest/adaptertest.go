// Package adaptertest is what the cloud adapters' tests share: the
// emulator (tools/cvmemu) started with a test key, quiet cloudcall settings,
// SDK clients pointed at the emulator, and the emulator's faults for the
// ports.Cloud contract suite. What is one cloud's own (its keys, templates,
// actions and error codes) stays in that adapter's tests. Only tests
// import it.
package adaptertest

import (
	"io"
	"log/slog"
	"reflect"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/backoff"
	"github.com/nodesmith/nodesmith/libs/cloudspec"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/cloudcall"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports/cloudtest"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ratelimit"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// Account is the account the tests' commands name.
const Account = "acct"

// CallTimeout bounds one call in tests: long enough for -race on a busy
// machine, short enough that a hung call fails the test.
const CallTimeout = 10 * time.Second

// Emulator is one cloud's front end of the emulator and the key its tests
// sign with.
type Emulator struct {
	// Start is cvmemu.Start (CVM) or cvmemu.StartECS (ECS).
	Start  func(addr string, cfg cvmemu.Config, opts ...cvmemu.Option) (*cvmemu.Server, error)
	KeyID  string
	Secret string
}

// Run starts the emulator on a free local port, knowing only e's key, with
// VMs that boot and go in 100ms and no rate limits; tweak, if not nil,
// changes the configuration first. The emulator is closed when t ends.
func (e Emulator) Run(t testing.TB, tweak func(*cvmemu.Config)) *cvmemu.Server {
	t.Helper()
	cfg := cvmemu.DefaultConfig()
	cfg.Credentials = map[string]string{e.KeyID: e.Secret}
	cfg.BootDelay = 100 * time.Millisecond
	cfg.TerminateDelay = 100 * time.Millisecond
	cfg.RateLimits = nil // unlimited unless a test says otherwise
	if tweak != nil {
		tweak(&cfg)
	}
	srv, err := e.Start("127.0.0.1:0", cfg)
	if err != nil {
		t.Fatalf("starting the emulator: %v", err)
	}
	t.Cleanup(func() { _ = srv.Close() })
	return srv
}

// Creds are e's key as Account's credentials.
func (e Emulator) Creds() *cloudtest.Creds {
	return cloudtest.NewCreds(map[string]ports.Credential{Account: {KeyID: e.KeyID, Secret: e.Secret}})
}

// ClientOptions point an adapter's SDK clients at the emulator srv over
// HTTP, signing with creds (nil means e.Creds()).
func (e Emulator) ClientOptions(srv *cvmemu.Server, creds ports.Credentials) cloudcall.ClientOptions {
	if creds == nil {
		creds = e.Creds()
	}
	return cloudcall.ClientOptions{Credentials: creds, Endpoint: srv.Endpoint(), Scheme: "http", Timeout: CallTimeout}
}

// Settings are cloudcall settings for tests: no logs, CallTimeout, calls
// paced by limits (nil means not paced; the adapters' defaults would slow
// the tests) and retried by retry (zero means three quick attempts).
func Settings(limits ratelimit.Limits, retry backoff.Policy) cloudcall.Settings {
	if limits == nil {
		limits = ratelimit.Limits{}
	}
	if retry.Attempts == 0 {
		retry = backoff.Policy{Initial: time.Millisecond, Max: 5 * time.Millisecond, Attempts: 3}
	}
	return cloudcall.Settings{
		Limits: limits, Retry: retry, CallTimeout: CallTimeout,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}
}

// Faults are how one cloud's emulator refuses, for the contract suite.
type Faults struct {
	// Terminate is the emulator's action of the cloud's terminate call
	// (both clouds create with RunInstances and describe and list with
	// DescribeInstances).
	Terminate string
	// Throttled is the cloud's throttling error code.
	Throttled string
	// StockOut makes the template's zone sell out.
	StockOut cvmemu.StockOut
}

// Env is env with its Throttle and StockOut set to f's faults on srv.
func (f Faults) Env(srv *cvmemu.Server, env cloudtest.Env) cloudtest.Env {
	actions := map[cloudtest.Op]string{
		cloudtest.OpCreate:    cvmemu.ActionRunInstances,
		cloudtest.OpDescribe:  cvmemu.ActionDescribeInstances,
		cloudtest.OpList:      cvmemu.ActionDescribeInstances,
		cloudtest.OpTerminate: f.Terminate,
	}
	env.Throttle = func(_ *testing.T, op cloudtest.Op) func() {
		srv.SetFaults(actions[op], cvmemu.ActionFaults{ErrorRate: 1, ErrorCode: f.Throttled})
		return func() { srv.SetFaults(actions[op], cvmemu.ActionFaults{}) }
	}
	env.StockOut = func(*testing.T) func() {
		srv.SetStockOuts([]cvmemu.StockOut{f.StockOut})
		return func() { srv.SetStockOuts(nil) }
	}
	return env
}

// SpecMatchesSDK fails t unless libs/cloudspec's template rules of
// provider (which the gateway and the configuration loader accept
// parameters by) have the shape of run, the SDK's RunInstances request the
// adapter decodes them into; and checks that the check can fail, with
// other, another request type of the SDK.
func SpecMatchesSDK(t *testing.T, provider string, run, other reflect.Type) {
	t.Helper()
	spec, ok := cloudspec.Lookup(provider)
	if !ok {
		t.Fatalf("libs/cloudspec does not know %q", provider)
	}
	if err := spec.CheckRequest(run); err != nil {
		t.Fatal(err)
	}
	if err := spec.CheckRequest(other); err == nil {
		t.Fatalf("%s passed for %s", other, run)
	}
}
