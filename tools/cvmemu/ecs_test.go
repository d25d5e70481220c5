package cvmemu

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	ecs "github.com/alibabacloud-go/ecs-20140526/v7/client"
	"github.com/alibabacloud-go/tea/dara"
	"github.com/alibabacloud-go/tea/tea"
)

const (
	ecsRegion = "cn-hangzhou"
	ecsZone   = "cn-hangzhou-h"
	ecsType   = "ecs.g6.large"
	ecsImage  = "aliyun_3_x64_20G_alibase_20240819.vhd"
)

func startECS(t *testing.T, cfg Config, opts ...Option) *Server {
	t.Helper()
	return startWith(t, StartECS, cfg, opts...)
}

func ecsClient(t *testing.T, s *Server, id, secret string) *ecs.Client {
	t.Helper()
	c, err := NewECSClient(s.Endpoint(), id, secret, ecsRegion)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// sdkErr returns the code and HTTP status of an SDK error.
func sdkErr(err error) (string, int) {
	var se *tea.SDKError
	if errors.As(err, &se) {
		return dara.StringValue(se.Code), dara.IntValue(se.StatusCode)
	}
	return "", 0
}

func wantECSErr(t *testing.T, err error, code string, status int) {
	t.Helper()
	if err == nil {
		t.Fatalf("got success, want %s", code)
	}
	gotCode, gotStatus := sdkErr(err)
	if gotCode != code || gotStatus != status {
		t.Fatalf("got %s (HTTP %d), want %s (HTTP %d); error: %v", gotCode, gotStatus, code, status, err)
	}
}

type ecsRunOpts struct {
	amount int32
	token  string
	zone   string
	typ    string
	tags   map[string]string
}

func ecsRun(c *ecs.Client, o ecsRunOpts) ([]string, error) {
	req := &ecs.RunInstancesRequest{
		RegionId:        dara.String(ecsRegion),
		ZoneId:          dara.String(ecsZone),
		InstanceType:    dara.String(ecsType),
		ImageId:         dara.String(ecsImage),
		VSwitchId:       dara.String("vsw-test"),
		SecurityGroupId: dara.String("sg-test"),
	}
	if o.amount > 0 {
		req.Amount = dara.Int32(o.amount)
	}
	if o.token != "" {
		req.ClientToken = dara.String(o.token)
	}
	if o.zone != "" {
		req.ZoneId = dara.String(o.zone)
	}
	if o.typ != "" {
		req.InstanceType = dara.String(o.typ)
	}
	for _, k := range slices.Sorted(mapsKeys(o.tags)) {
		req.Tag = append(req.Tag, &ecs.RunInstancesRequestTag{Key: dara.String(k), Value: dara.String(o.tags[k])})
	}
	resp, err := c.RunInstances(req)
	if err != nil {
		return nil, err
	}
	return dara.StringSliceValue(resp.Body.InstanceIdSets.InstanceIdSet), nil
}

func mapsKeys(m map[string]string) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

func ecsDescribe(c *ecs.Client, ids []string) ([]*ecs.DescribeInstancesResponseBodyInstancesInstance, error) {
	req := &ecs.DescribeInstancesRequest{RegionId: dara.String(ecsRegion), PageSize: dara.Int32(100)}
	if ids != nil {
		req.InstanceIds = dara.String(`["` + strings.Join(ids, `","`) + `"]`)
	}
	resp, err := c.DescribeInstances(req)
	if err != nil {
		return nil, err
	}
	return resp.Body.Instances.Instance, nil
}

// ecsWaitStatus polls until every id has status.
func ecsWaitStatus(t *testing.T, c *ecs.Client, ids []string, status string) []*ecs.DescribeInstancesResponseBodyInstancesInstance {
	t.Helper()
	deadline := time.Now().Add(testTimeout)
	for {
		insts, err := ecsDescribe(c, ids)
		if err != nil {
			t.Fatal(err)
		}
		ok := len(insts) == len(ids)
		for _, in := range insts {
			ok = ok && dara.StringValue(in.Status) == status
		}
		if ok {
			return insts
		}
		if time.Now().After(deadline) {
			t.Fatalf("instances %v did not all reach %s", ids, status)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ecsDelete(c *ecs.Client, force bool, ids ...string) error {
	_, err := c.DeleteInstances(&ecs.DeleteInstancesRequest{
		RegionId: dara.String(ecsRegion), InstanceId: dara.StringSlice(ids), Force: dara.Bool(force),
	})
	return err
}

func TestECSRunDescribeDelete(t *testing.T) {
	s := startECS(t, testConfig())
	c := ecsClient(t, s, testSecretID, testKey)

	ids, err := ecsRun(c, ecsRunOpts{amount: 2, tags: map[string]string{"group": "g1"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != 2 {
		t.Fatalf("got %d ids, want 2", len(ids))
	}
	for _, id := range ids {
		if !ecsInstanceIDPattern.MatchString(id) {
			t.Errorf("instance id %q is not i- + 20 lowercase alphanumerics", id)
		}
	}
	insts := ecsWaitStatus(t, c, ids, ECSStatusRunning)
	for _, in := range insts {
		if got := dara.StringValue(in.ZoneId); got != ecsZone {
			t.Errorf("ZoneId = %q, want %q", got, ecsZone)
		}
		if got := dara.Int32Value(in.Cpu); got != 2 {
			t.Errorf("Cpu = %d, want 2", got)
		}
		if got := dara.Int32Value(in.Memory); got != 8192 {
			t.Errorf("Memory = %d, want 8192", got)
		}
		// The admin listing (what the simulated kubelets register)
		// reports the same shape as DescribeInstances.
		if info, ok := s.VM(dara.StringValue(in.InstanceId)); !ok || info.CPU != 2 || info.MemoryMiB != 8192 {
			t.Errorf("VM(%s) shape = %d vCPU %d MiB (found %v), want 2 and 8192", dara.StringValue(in.InstanceId), info.CPU, info.MemoryMiB, ok)
		}
		if ips := dara.StringSliceValue(in.VpcAttributes.PrivateIpAddress.IpAddress); len(ips) != 1 || !strings.HasPrefix(ips[0], "127.") {
			t.Errorf("private IPs %v, want one loopback address", ips)
		}
		if got := dara.StringValue(in.VpcAttributes.VSwitchId); got != "vsw-test" {
			t.Errorf("VSwitchId = %q", got)
		}
		if tags := in.Tags.Tag; len(tags) != 1 || dara.StringValue(tags[0].TagKey) != "group" || dara.StringValue(tags[0].TagValue) != "g1" {
			t.Errorf("tags = %v", tags)
		}
	}

	// A Running instance needs Force, as in the real API; nothing is
	// deleted by the refused call (all or nothing).
	wantECSErr(t, ecsDelete(c, false, ids...), ECSCodeIncorrectStatus, http.StatusForbidden)
	if err := ecsDelete(c, true, ids...); err != nil {
		t.Fatal(err)
	}
	// Being deleted: Stopping, then gone; deleting again is refused.
	wantECSErr(t, ecsDelete(c, true, ids[0]), ECSCodeIncorrectStatus, http.StatusForbidden)
	deadline := time.Now().Add(testTimeout)
	for {
		insts, err := ecsDescribe(c, ids)
		if err != nil {
			t.Fatal(err)
		}
		if len(insts) == 0 {
			break
		}
		for _, in := range insts {
			if st := dara.StringValue(in.Status); st != ECSStatusStopping {
				t.Fatalf("deleted instance is %s, want Stopping until gone", st)
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("deleted instances still listed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	wantECSErr(t, ecsDelete(c, true, ids[0]), ECSCodeInstanceNotFound, http.StatusNotFound)
}

func TestECSSignatureRejected(t *testing.T) {
	cfg := testConfig()
	s := startECS(t, cfg)

	_, err := ecsRun(ecsClient(t, s, testSecretID, "wrong-secret"), ecsRunOpts{})
	wantECSErr(t, err, ecsCodeSignatureMismatch, http.StatusBadRequest)
	_, err = ecsDescribe(ecsClient(t, s, "LTAIunknown", testKey), nil)
	wantECSErr(t, err, ecsCodeAccessKeyNotFound, http.StatusNotFound)
	if st := s.Stats(); st.VMsCreated != 0 || st.ErrorCodes[ecsCodeSignatureMismatch] != 1 {
		t.Fatalf("stats after rejected calls: %+v", st)
	}
	if _, err := ecsDescribe(ecsClient(t, s, testSecretID, testKey), nil); err != nil {
		t.Fatalf("a correctly signed call: %v", err)
	}

	// The SDK stamps requests with the real time; a server clock 20
	// minutes ahead sees them as stale, 4 minutes is within the skew.
	cfg.Now = func() time.Time { return time.Now().Add(20 * time.Minute) }
	_, err = ecsDescribe(ecsClient(t, startECS(t, cfg), testSecretID, testKey), nil)
	wantECSErr(t, err, ecsCodeInvalidTimeStampExpired, http.StatusBadRequest)
	cfg.Now = func() time.Time { return time.Now().Add(-4 * time.Minute) }
	if _, err := ecsDescribe(ecsClient(t, startECS(t, cfg), testSecretID, testKey), nil); err != nil {
		t.Fatalf("4 minute skew must be accepted: %v", err)
	}
}

// TestECSAndCVMShareOneCore: one emulator serves both APIs; each lists
// only its own VMs, and quotas count them all.
func TestECSAndCVMShareOneCore(t *testing.T) {
	s := startServer(t, testConfig()) // CVM
	endpoint, err := s.ServeECS("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ec, err := NewECSClient(endpoint, testSecretID, testKey, ecsRegion)
	if err != nil {
		t.Fatal(err)
	}

	cvmIDs, err := runInstances(sdkClient(t, s, testSecretID, testKey), runOpts{count: 1})
	if err != nil {
		t.Fatal(err)
	}
	ecsIDs, err := ecsRun(ec, ecsRunOpts{})
	if err != nil {
		t.Fatal(err)
	}
	insts, err := ecsDescribe(ec, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(insts) != 1 || dara.StringValue(insts[0].InstanceId) != ecsIDs[0] {
		t.Fatalf("ECS lists %v, want only %v (not the CVM VM %v)", insts, ecsIDs, cvmIDs)
	}
	infos := s.ListVMs()
	if len(infos) != 2 || infos[0].API != "cvm" || infos[1].API != "ecs" {
		t.Fatalf("ListVMs = %+v", infos)
	}
	// State is the core's, whatever the API (dev tools compare it with
	// StateTerminating etc.); APIStatus is the API's own word.
	ecsInfo := infos[1]
	if !slices.Contains([]string{StatePending, StateRunning}, ecsInfo.State) ||
		!slices.Contains([]string{ECSStatusPending, ECSStatusStarting, ECSStatusRunning}, ecsInfo.APIStatus) {
		t.Errorf("ECS VM State %q, APIStatus %q", ecsInfo.State, ecsInfo.APIStatus)
	}
	if got := DefaultGuestEnv(infos[1])["PROVIDER_ID"]; got != fmt.Sprintf("%s.%s", ecsRegion, ecsIDs[0]) {
		t.Errorf("ECS provider ID = %q", got)
	}
	s.SetQuota(Quota{MaxInstances: 2})
	_, err = ecsRun(ec, ecsRunOpts{})
	wantECSErr(t, err, ECSCodeQuota, http.StatusForbidden)
}

func TestECSInstanceShape(t *testing.T) {
	for _, tc := range []struct {
		typ      string
		cpu, mib int32
	}{
		{"ecs.g6.large", 2, 8192},
		{"ecs.c7.xlarge", 4, 8192},
		{"ecs.r6.2xlarge", 8, 65536},
		{"ecs.t6-c1m2.large", 2, 4096},
		{"ecs.t5-c1m1.large", 2, 2048},
		{"ecs.t6-c2m1.large", 2, 1024},
		{"ecs.g8i.16xlarge", 64, 262144},
		{"S5.MEDIUM4", 0, 0},
		{"ecs.bogus", 0, 0},
	} {
		if cpu, mib := ECSInstanceShape(tc.typ); cpu != tc.cpu || mib != tc.mib {
			t.Errorf("ECSInstanceShape(%q) = %d, %d; want %d, %d", tc.typ, cpu, mib, tc.cpu, tc.mib)
		}
	}
	// InstanceShape (what dev/kubesim registers) knows both clouds' names.
	if cpu, gib := InstanceShape("ecs.g6.large"); cpu != 2 || gib != 8 {
		t.Errorf("InstanceShape(ecs.g6.large) = %d, %d", cpu, gib)
	}
	if cpu, gib := InstanceShape("S5.MEDIUM4"); cpu != 2 || gib != 4 {
		t.Errorf("InstanceShape(S5.MEDIUM4) = %d, %d", cpu, gib)
	}
}
