package alibaba_test

// These tests drive the official Alibaba Cloud SDK, through the adapter,
// against the ECS front end of the emulator (tools/cvmemu) over HTTP with
// ACS3-HMAC-SHA256 signatures.

import (
	"context"
	"fmt"
	"testing"

	"github.com/nodesmith/nodesmith/libs/backoff"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/adaptertest"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/adapters/alibaba"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports/cloudtest"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

const (
	region   = "cn-hangzhou"
	zone     = "cn-hangzhou-h"
	template = `{"InstanceType":"ecs.g7.large","ImageId":"aliyun_3_x64","ZoneId":"cn-hangzhou-h","VSwitchId":"vsw-test","SecurityGroupId":"sg-test","InstanceName":"node"}`
)

// emulator is the emulator's ECS front end, with a RAM AccessKey.
var emulator = adaptertest.Emulator{Start: cvmemu.StartECS, KeyID: "LTAI5tEmulatorTest", Secret: "emulator-secret"}

var target = ports.Target{Account: adaptertest.Account, Region: region}

func startEmulator(t *testing.T, tweak func(*cvmemu.Config)) *cvmemu.Server {
	t.Helper()
	return emulator.Run(t, tweak)
}

// newAdapter returns the adapter on srv, signing with cr (nil: the
// emulator's key) and retrying by retry (zero: three quick attempts).
func newAdapter(t *testing.T, srv *cvmemu.Server, cr ports.Credentials, retry backoff.Policy) *alibaba.Cloud {
	t.Helper()
	clients := alibaba.NewClients(emulator.ClientOptions(srv, cr))
	return alibaba.New(alibaba.Options{Clients: clients.Get, Settings: adaptertest.Settings(nil, retry)})
}

// TestContract runs the ports.Cloud contract suite against the adapter on
// the ECS emulator.
func TestContract(t *testing.T) {
	faults := adaptertest.Faults{
		Terminate: cvmemu.ActionDeleteInstances,
		Throttled: cvmemu.ECSCodeThrottling,
		StockOut:  cvmemu.StockOut{Zone: zone, Code: cvmemu.ECSCodeNoStock},
	}
	cloudtest.Run(t, func(t *testing.T) cloudtest.Env {
		srv := startEmulator(t, nil)
		return faults.Env(srv, cloudtest.Env{
			Cloud:       newAdapter(t, srv, nil, backoff.Policy{}),
			Target:      target,
			Parameters:  template,
			MissingID:   "i-bp1nonexistent000000",
			OtherRegion: "cn-shanghai",
			// The emulator's instance type table (cvmemu.DefaultInstanceTypes).
			Shapes: &cloudtest.ShapesEnv{
				Known: domain.InstanceShape{Zone: zone, InstanceType: "ecs.g7.large", Family: "ecs.g7", VCPU: 2, MemoryMiB: 8192, Arch: domain.ArchAMD64},
				Others: []domain.InstanceShape{
					{Zone: zone, InstanceType: "ecs.g8y.large", Family: "ecs.g8y", VCPU: 2, MemoryMiB: 8192, Arch: domain.ArchARM64},
					{Zone: zone, InstanceType: "ecs.gn7i-c8g1.2xlarge", Family: "ecs.gn7i", VCPU: 8, MemoryMiB: 30720, GPU: 1, GPUModel: "NVIDIA A10", Arch: domain.ArchAMD64},
				},
			},
		})
	})
}

// TestEmulatorFailuresAreTyped: the emulator's own refusals (wrong key,
// unknown key, quota, a zone sold out) reach the caller as the port's kinds
// after exactly one call (definitive answers are not retried).
func TestEmulatorFailuresAreTyped(t *testing.T) {
	for _, tc := range []struct {
		name     string
		emulator func(*cvmemu.Config)
		cred     ports.Credential
		want     ports.ErrorKind
		code     string
	}{
		{name: "wrong secret", cred: ports.Credential{KeyID: emulator.KeyID, Secret: "wrong"}, want: ports.ErrorKindAuth, code: "SignatureDoesNotMatch"},
		{name: "unknown key", cred: ports.Credential{KeyID: "LTAInobody", Secret: "x"}, want: ports.ErrorKindAuth, code: "InvalidAccessKeyId.NotFound"},
		{name: "quota", emulator: func(c *cvmemu.Config) { c.Quota.MaxInstances = 2 }, want: ports.ErrorKindCapacity, code: cvmemu.ECSCodeQuota},
		{name: "type not sold", emulator: func(c *cvmemu.Config) {
			c.StockOuts = []cvmemu.StockOut{{InstanceType: "ecs.g7.large", Code: cvmemu.ECSCodeResourceNotSupported}}
		}, want: ports.ErrorKindCapacity, code: cvmemu.ECSCodeResourceNotSupported},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := startEmulator(t, tc.emulator)
			var cr ports.Credentials
			if tc.cred.Valid() {
				cr = cloudtest.NewCreds(map[string]ports.Credential{adaptertest.Account: tc.cred})
			}
			_, err := newAdapter(t, srv, cr, backoff.Policy{}).CreateBatch(context.Background(), ports.CreateRequest{
				Target: target, ClientToken: "tok", Parameters: template, Count: 3, Tags: domain.CreationTags("c1", "g1", "b1", ""),
			})
			ce, ok := ports.AsCloudError(err)
			if !ok || ce.Kind != tc.want || ce.Code != tc.code {
				t.Fatalf("CreateBatch = %v, want %s (%s)", err, tc.code, tc.want)
			}
			if st := srv.Stats(); st.VMsCreated != 0 {
				t.Fatalf("created %d VMs", st.VMsCreated)
			}
		})
	}
}

// TestEmulatorAnswerLostAfterCommit: ECS created the VMs but the answer was
// an error or never arrived; the retry with the same ClientToken gets the
// same VMs.
func TestEmulatorAnswerLostAfterCommit(t *testing.T) {
	for name, f := range map[string]cvmemu.Fault{
		"5xx after commit": {Code: cvmemu.ECSCodeServiceUnavailable, AfterCommit: true},
		"connection lost":  {DropConnection: true, AfterCommit: true},
		"throttled first":  {Code: cvmemu.ECSCodeThrottling},
	} {
		t.Run(name, func(t *testing.T) {
			srv := startEmulator(t, nil)
			srv.InjectFaults(cvmemu.ActionRunInstances, f)
			ids, err := newAdapter(t, srv, nil, backoff.Policy{}).CreateBatch(context.Background(), ports.CreateRequest{
				Target: target, ClientToken: "tok", Parameters: template, Count: 5, Tags: domain.CreationTags("c1", "g1", "b1", ""),
			})
			if err != nil {
				t.Fatal(err)
			}
			if st := srv.Stats(); st.VMsCreated != 5 || st.RunInstancesCalls != 2 || len(ids) != 5 {
				t.Fatalf("VMs %d (want 5), RunInstances calls %d (want 2), ids %v", st.VMsCreated, st.RunInstancesCalls, ids)
			}
		})
	}
}

// TestEmulatorTagOfAMissingVMIsNotFound: ports.Cloud's Tag on a VM that
// does not exist is a not-found error.
func TestEmulatorTagOfAMissingVMIsNotFound(t *testing.T) {
	srv := startEmulator(t, nil)
	c := newAdapter(t, srv, nil, backoff.Policy{})
	err := c.Tag(context.Background(), target, []string{"i-bp1nonexistent000000"}, []domain.Tag{{Key: domain.TagCluster, Value: "c1"}})
	if !ports.IsNotFoundError(err) {
		t.Fatalf("Tag(missing) = %v, want not found", err)
	}
}

// TestEmulatorListByTagPagesThroughNextToken: 250 VMs of a cluster take
// three DescribeInstances pages of the emulator, chained by NextToken; the
// other cluster's VMs are not listed.
func TestEmulatorListByTagPagesThroughNextToken(t *testing.T) {
	srv := startEmulator(t, nil)
	c := newAdapter(t, srv, nil, backoff.Policy{})
	ctx := context.Background()
	var mine []string
	for i, n := range []int{100, 100, 50} {
		ids, err := c.CreateBatch(ctx, ports.CreateRequest{
			Target: target, ClientToken: fmt.Sprintf("tok-%d", i), Parameters: template, Count: n,
			Tags: domain.CreationTags("c1", "g1", fmt.Sprintf("b%d", i), ""),
		})
		if err != nil {
			t.Fatal(err)
		}
		mine = append(mine, ids...)
	}
	if _, err := c.CreateBatch(ctx, ports.CreateRequest{
		Target: target, ClientToken: "tok-other", Parameters: template, Count: 2, Tags: domain.CreationTags("c2", "g1", "bx", ""),
	}); err != nil {
		t.Fatal(err)
	}
	sts, err := c.ListByTag(ctx, target, "c1")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, s := range sts {
		got[s.CloudID] = true
	}
	if len(sts) != 250 || len(got) != 250 {
		t.Fatalf("listed %d VMs (%d distinct), want the 250 of c1", len(sts), len(got))
	}
	for _, id := range mine {
		if !got[id] {
			t.Fatalf("%s not listed", id)
		}
	}
}
