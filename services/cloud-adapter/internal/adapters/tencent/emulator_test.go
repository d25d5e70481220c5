package tencent_test

// These tests drive the official tencentcloud-sdk-go, through the adapter,
// against the CVM emulator (tools/cvmemu) over HTTP with TC3 signatures.

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/libs/backoff"
	"github.com/nodesmith/nodesmith/libs/testwait"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/adaptertest"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/tencent"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports/cloudtest"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ratelimit"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

const (
	secretID  = "AKIDtest"
	secretKey = "test-secret"
	region    = "ap-guangzhou"
	template  = `{"InstanceType":"S5.MEDIUM4","ImageId":"img-test","Placement":{"Zone":"ap-guangzhou-3"},"InstanceName":"node"}`
)

// emulator is the emulator's CVM front end, with a SecretId and SecretKey.
var emulator = adaptertest.Emulator{Start: cvmemu.Start, KeyID: secretID, Secret: secretKey}

var target = ports.Target{Account: adaptertest.Account, Region: region}

func startEmulator(t *testing.T, tweak func(*cvmemu.Config)) *cvmemu.Server {
	t.Helper()
	return emulator.Run(t, tweak)
}

type adapterOpts struct {
	limits ratelimit.Limits
	retry  backoff.Policy
	creds  *cloudtest.Creds
}

func newAdapter(t *testing.T, srv *cvmemu.Server, o adapterOpts) *tencent.Cloud {
	t.Helper()
	var cr ports.Credentials
	if o.creds != nil {
		cr = o.creds
	}
	if o.retry.Attempts == 0 {
		o.retry = backoff.Policy{Initial: 5 * time.Millisecond, Max: 50 * time.Millisecond, Attempts: 5}
	}
	clients := tencent.NewClients(emulator.ClientOptions(srv, cr))
	return tencent.New(tencent.Options{Clients: clients.Get, Settings: adaptertest.Settings(o.limits, o.retry)})
}

func create(t *testing.T, c *tencent.Cloud, token string, n int, tags []domain.Tag) []string {
	t.Helper()
	ids, err := c.CreateBatch(context.Background(), ports.CreateRequest{
		Target: target, ClientToken: token, Template: "small", Parameters: template, Count: n, Tags: tags,
	})
	if err != nil {
		t.Fatalf("CreateBatch(%s): %v", token, err)
	}
	if len(ids) != n {
		t.Fatalf("CreateBatch(%s) returned %d ids, want %d", token, len(ids), n)
	}
	return ids
}

func TestEmulatorCreateTagsAndIdempotency(t *testing.T) {
	srv := startEmulator(t, nil)
	c := newAdapter(t, srv, adapterOpts{})
	tags := domain.CreationTags("c1", "g1", "b1", "")
	ids := create(t, c, "tok-b1", 3, tags)
	// Two redeliveries of the same command: same token, same VMs.
	for range 2 {
		if again := create(t, c, "tok-b1", 3, tags); !slices.Equal(again, ids) {
			t.Fatalf("replay returned %v, want %v", again, ids)
		}
	}
	st := srv.Stats()
	// The emulator keys accounts by SecretId unless told otherwise.
	if st.VMsCreated != 3 || st.ClientTokenReplays[secretID+"/tok-b1"] != 2 {
		t.Fatalf("VMs created %d (want 3), replays %v (want 2)", st.VMsCreated, st.ClientTokenReplays)
	}
	if st.VMsCreatedWithoutToken != 0 {
		t.Fatalf("%d VMs created without a ClientToken", st.VMsCreatedWithoutToken)
	}
	for _, id := range ids {
		vm, ok := srv.VM(id)
		if !ok {
			t.Fatalf("VM %s unknown to the emulator", id)
		}
		for _, tag := range tags {
			if vm.Tags[tag.Key] != tag.Value {
				t.Fatalf("VM %s tags = %v, want %v", id, vm.Tags, tags)
			}
		}
		if vm.ClientToken != "tok-b1" || vm.Zone != "ap-guangzhou-3" || vm.InstanceType != "S5.MEDIUM4" {
			t.Fatalf("VM %+v does not follow the template", vm)
		}
	}
	single := create(t, c, "tok-b2", 1, domain.CreationTags("c1", "g1", "b2", "i-single"))
	if vm, _ := srv.VM(single[0]); vm.Tags[domain.TagInstance] != "i-single" {
		t.Fatalf("single-instance VM tags = %v, want the instance tag", vm.Tags)
	}
}

// TestEmulatorAnswerLostAfterCommit: the cloud created the VMs but the
// answer was an error or never arrived; the adapter's retry with the same
// ClientToken gets the same VMs.
func TestEmulatorAnswerLostAfterCommit(t *testing.T) {
	for _, f := range []cvmemu.Fault{
		{Code: cvmemu.CodeInternalError, AfterCommit: true},
		{DropConnection: true, AfterCommit: true},
		{Code: cvmemu.CodeRequestLimitExceeded},
	} {
		t.Run(fmt.Sprintf("%+v", f), func(t *testing.T) {
			srv := startEmulator(t, nil)
			srv.InjectFaults(cvmemu.ActionRunInstances, f)
			ids := create(t, newAdapter(t, srv, adapterOpts{}), "tok", 5, nil)
			st := srv.Stats()
			if st.VMsCreated != 5 || st.RunInstancesCalls != 2 {
				t.Fatalf("VMs %d (want 5), RunInstances calls %d (want 2), ids %v", st.VMsCreated, st.RunInstancesCalls, ids)
			}
		})
	}
}

// codesFromSDK reads the CVM SDK's error codes (testdata, see errors.go).
func codesFromSDK(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("testdata/cvm_error_codes.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var codes []string
	for sc := bufio.NewScanner(f); sc.Scan(); {
		if l := strings.TrimSpace(sc.Text()); l != "" && !strings.HasPrefix(l, "#") {
			codes = append(codes, l)
		}
	}
	return codes
}

// TestEmulatorEveryErrorCodeIsMapped answers every CVM error code (and the
// common ones) through the real SDK and checks the kind the adapter reports.
func TestEmulatorEveryErrorCodeIsMapped(t *testing.T) {
	srv := startEmulator(t, nil)
	// One attempt per call: this is about mapping, not retrying.
	c := newAdapter(t, srv, adapterOpts{retry: backoff.Policy{Initial: time.Millisecond, Max: time.Millisecond, Attempts: 1}})
	ids := create(t, c, "tok", 1, nil)
	codes := append(codesFromSDK(t),
		"RequestLimitExceeded", "RequestLimitExceeded.UinLimitExceeded", "AuthFailure.SignatureFailure",
		"AuthFailure.SecretIdNotFound", "AuthFailure.SignatureExpire", "UnsupportedRegion", "InvalidAction",
		"InternalError", "ResourceUnavailable", "UnknownParameter", "MissingParameter")
	want := map[string]ports.ErrorKind{
		"LimitExceeded.InstanceQuota":                ports.ErrorKindCapacity,
		"ResourceInsufficient.SpecifiedInstanceType": ports.ErrorKindCapacity,
		"ResourcesSoldOut.SpecifiedInstanceType":     ports.ErrorKindCapacity,
		"RequestLimitExceeded":                       ports.ErrorKindThrottled,
		"InvalidInstanceId.NotFound":                 ports.ErrorKindNotFound,
		"InvalidParameterValue":                      ports.ErrorKindInvalidParameters,
		"AuthFailure.SignatureFailure":               ports.ErrorKindAuth,
		"InternalError":                              ports.ErrorKindTransient,
	}
	for _, code := range codes {
		srv.InjectFaults(cvmemu.ActionDescribeInstances, cvmemu.Fault{Code: code, Message: "injected"})
		_, err := c.Describe(context.Background(), target, ids)
		ce, ok := ports.AsCloudError(err)
		if !ok || ce.Code != code {
			t.Errorf("%s: Describe = %v, want a CloudError with that code", code, err)
			continue
		}
		if ce.Kind == ports.ErrorKindUnknown {
			t.Errorf("%s: no kind", code)
		}
		if k, ok := want[code]; ok && ce.Kind != k {
			t.Errorf("%s: kind %s, want %s", code, ce.Kind, k)
		}
	}
}

func TestEmulatorRealFailures(t *testing.T) {
	for _, tc := range []struct {
		name     string
		emulator func(*cvmemu.Config)
		creds    ports.Credential
		params   string
		want     ports.ErrorKind
		code     string
	}{
		{name: "quota", emulator: func(c *cvmemu.Config) { c.Quota.MaxInstances = 2 }, want: ports.ErrorKindCapacity, code: cvmemu.CodeInstanceQuota},
		{name: "stock-out", emulator: func(c *cvmemu.Config) { c.StockOuts = []cvmemu.StockOut{{Zone: "ap-guangzhou-3"}} }, want: ports.ErrorKindCapacity, code: cvmemu.CodeInsufficientInstanceType},
		{name: "sold out", emulator: func(c *cvmemu.Config) {
			c.StockOuts = []cvmemu.StockOut{{InstanceType: "S5.MEDIUM4", Code: cvmemu.CodeSoldOutInstanceType}}
		}, want: ports.ErrorKindCapacity, code: cvmemu.CodeSoldOutInstanceType},
		{name: "wrong secret", creds: ports.Credential{KeyID: secretID, Secret: "wrong"}, want: ports.ErrorKindAuth, code: cvmemu.CodeAuthSignatureFailure},
		{name: "unknown key", creds: ports.Credential{KeyID: "AKIDnobody", Secret: "x"}, want: ports.ErrorKindAuth, code: cvmemu.CodeAuthSecretIDNotFound},
		{name: "template without zone", params: `{"ImageId":"img-1"}`, want: ports.ErrorKindInvalidParameters, code: cvmemu.CodeMissingParameter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startEmulator(t, tc.emulator)
			o := adapterOpts{}
			if tc.creds.Valid() {
				o.creds = cloudtest.NewCreds(map[string]ports.Credential{"acct": tc.creds})
			}
			params := template
			if tc.params != "" {
				params = tc.params
			}
			_, err := newAdapter(t, srv, o).CreateBatch(context.Background(), ports.CreateRequest{
				Target: target, ClientToken: "tok", Parameters: params, Count: 3,
			})
			ce, ok := ports.AsCloudError(err)
			if !ok || ce.Kind != tc.want || ce.Code != tc.code {
				t.Fatalf("CreateBatch = %v, want %s (%s)", err, tc.code, tc.want)
			}
			if st := srv.Stats(); st.VMsCreated != 0 || st.RunInstancesCalls != 1 {
				t.Fatalf("created %d VMs in %d calls, want 0 in 1 (definitive errors are not retried)", st.VMsCreated, st.RunInstancesCalls)
			}
		})
	}
}

func TestEmulatorRotatedCredentialsApplyToExistingClients(t *testing.T) {
	srv := startEmulator(t, nil)
	cr := cloudtest.NewCreds(map[string]ports.Credential{"acct": {KeyID: secretID, Secret: "old-and-wrong"}})
	c := newAdapter(t, srv, adapterOpts{creds: cr})
	if _, err := c.Describe(context.Background(), target, []string{"ins-00000000"}); !ports.IsAuthError(err) {
		t.Fatalf("Describe with a wrong key = %v, want an auth error", err)
	}
	cr.Set("acct", ports.Credential{KeyID: secretID, Secret: secretKey})
	if _, err := c.Describe(context.Background(), target, []string{"ins-00000000"}); err != nil {
		t.Fatalf("Describe after rotation: %v", err)
	}
}

func TestEmulatorDescribeTerminateAndList(t *testing.T) {
	srv := startEmulator(t, nil)
	c := newAdapter(t, srv, adapterOpts{})
	ctx := context.Background()
	var ids []string
	for i := range 3 { // 250 VMs: ListByTag needs three pages
		ids = append(ids, create(t, c, fmt.Sprintf("tok-%d", i), []int{100, 100, 50}[i], domain.CreationTags("c1", "g1", fmt.Sprintf("b%d", i), ""))...)
	}
	other := create(t, c, "tok-other", 2, domain.CreationTags("c2", "g1", "bx", ""))

	// Poll like a watch until the first 100 run with an IP.
	deadline := time.Now().Add(20 * time.Second)
	for {
		sts, err := c.Describe(ctx, target, ids[:100])
		if err != nil {
			t.Fatalf("Describe: %v", err)
		}
		running := 0
		for _, s := range sts {
			if s.State == domain.StateRunning && s.PrivateIP != "" && s.Zone == "ap-guangzhou-3" {
				running++
			}
		}
		if running == 100 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of 100 VMs RUNNING with an IP", running)
		}
		time.Sleep(50 * time.Millisecond)
	}

	listed, err := c.ListByTag(ctx, target, "c1")
	if err != nil {
		t.Fatalf("ListByTag: %v", err)
	}
	got := map[string]bool{}
	for _, s := range listed {
		got[s.CloudID] = true
		if s.Tags[domain.TagCluster] != "c1" || s.CreatedAt.IsZero() {
			t.Fatalf("listed VM %+v lacks its tags or creation time", s)
		}
	}
	if len(got) != 250 || got[other[0]] {
		t.Fatalf("ListByTag(c1) listed %d VMs (want the 250 of c1)", len(got))
	}

	// Terminate a set where one VM never existed and one is already going.
	if err := c.Terminate(ctx, target, []string{ids[0]}); err != nil {
		t.Fatalf("Terminate: %v", err)
	}
	set := []string{ids[0], "ins-00000000", ids[1], ids[2]}
	if err := c.Terminate(ctx, target, set); err != nil {
		t.Fatalf("Terminate with gone VMs: %v", err)
	}
	if err := c.Terminate(ctx, target, set); err != nil {
		t.Fatalf("Terminate again: %v", err)
	}
	for _, id := range ids[:3] {
		if vm, ok := srv.VM(id); ok && vm.State != cvmemu.StateTerminating {
			t.Fatalf("VM %s is %s, want terminating or gone", id, vm.State)
		}
	}
	if st := srv.Stats(); st.VMsTerminated != 3 {
		t.Fatalf("emulator terminated %d VMs, want 3", st.VMsTerminated)
	}
	eventually(t, "terminated VMs vanish", func() bool {
		sts, err := c.Describe(ctx, target, ids[:3])
		return err == nil && len(sts) == 0
	})
}

// TestEmulatorRateLimitsHold creates 1000 VMs one per call from many
// goroutines (a burst of 1000 single-instance commands) and checks the
// emulator never saw more calls per second than its limit, so it never
// throttled. The limits are high to keep the test quick.
func TestEmulatorRateLimitsHold(t *testing.T) {
	if testing.Short() {
		t.Skip("burst of 1000 calls")
	}
	const emulatorLimit = 400
	srv := startEmulator(t, func(c *cvmemu.Config) {
		c.RateLimits = map[string]float64{cvmemu.ActionRunInstances: emulatorLimit, cvmemu.ActionTerminateInstances: emulatorLimit}
	})
	c := newAdapter(t, srv, adapterOpts{limits: ratelimit.Limits{
		tencent.ActionRunInstances:       {Rate: 300, Burst: 10},
		tencent.ActionTerminateInstances: {Rate: 300, Burst: 10},
	}})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var ids []string
	work := make(chan int)
	for range 64 {
		wg.Go(func() {
			for i := range work {
				got, err := c.CreateBatch(context.Background(), ports.CreateRequest{
					Target: target, ClientToken: fmt.Sprintf("tok-%04d", i), Parameters: template, Count: 1,
				})
				if err != nil {
					t.Errorf("CreateBatch %d: %v", i, err)
					continue
				}
				mu.Lock()
				ids = append(ids, got...)
				mu.Unlock()
			}
		})
	}
	for i := range 1000 {
		work <- i
	}
	close(work)
	wg.Wait()
	st := srv.Stats()
	if st.VMsCreated != 1000 || len(ids) != 1000 {
		t.Fatalf("created %d VMs, got %d ids; want 1000", st.VMsCreated, len(ids))
	}
	if peak := st.PeakRequestsPerSecond[cvmemu.ActionRunInstances]; peak > emulatorLimit || st.Throttled[cvmemu.ActionRunInstances] > 0 {
		t.Fatalf("RunInstances peak %d/s (limit %d), throttled %d times", peak, emulatorLimit, st.Throttled[cvmemu.ActionRunInstances])
	}
}

// TestEmulatorThrottlingIsRetried: with no client-side limit the
// emulator's own limiter answers RequestLimitExceeded; the adapter retries
// with backoff and every create succeeds, none reported as capacity.
func TestEmulatorThrottlingIsRetried(t *testing.T) {
	srv := startEmulator(t, func(c *cvmemu.Config) {
		c.RateLimits = map[string]float64{cvmemu.ActionRunInstances: 20}
	})
	c := newAdapter(t, srv, adapterOpts{retry: backoff.Policy{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond, Attempts: 30}})
	var wg sync.WaitGroup
	for i := range 40 {
		wg.Go(func() {
			if _, err := c.CreateBatch(context.Background(), ports.CreateRequest{
				Target: target, ClientToken: fmt.Sprintf("tok-%d", i), Parameters: template, Count: 1,
			}); err != nil {
				t.Errorf("CreateBatch %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	st := srv.Stats()
	if st.Throttled[cvmemu.ActionRunInstances] == 0 {
		t.Fatal("the emulator never throttled: the test did not exercise retries")
	}
	if st.VMsCreated != 40 {
		t.Fatalf("created %d VMs, want 40", st.VMsCreated)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 20*time.Second, what, cond)
}
