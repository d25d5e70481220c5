package cvmemu

import (
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	ecs "github.com/alibabacloud-go/ecs-20140526/v7/client"
	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"
)

// bothAPIs starts one emulator serving CVM and ECS, with a client of each
// for the same account.
func bothAPIs(t *testing.T, cfg Config) (*Server, *cvm.Client, *ecs.Client) {
	t.Helper()
	s := startServer(t, cfg)
	endpoint, err := s.ServeECS("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ec, err := NewECSClient(endpoint, testSecretID, testKey, ecsRegion)
	if err != nil {
		t.Fatal(err)
	}
	return s, sdkClient(t, s, testSecretID, testKey), ec
}

func TestFaultsScopedPerAPI(t *testing.T) {
	s, cc, ec := bothAPIs(t, testConfig())

	// A queued fault for ECS is not taken by a CVM call of the same
	// action, and answers ECS's code to the ECS call.
	s.InjectFaultsFor(APIECS, ActionRunInstances, Fault{Code: ECSCodeThrottling})
	if _, err := runInstances(cc, runOpts{count: 1, token: "cvm-1"}); err != nil {
		t.Fatalf("CVM RunInstances took the fault queued for ECS: %v", err)
	}
	_, err := ecsRun(ec, ecsRunOpts{token: "ecs-1"})
	wantECSErr(t, err, ECSCodeThrottling, http.StatusBadRequest)
	if _, err := ecsRun(ec, ecsRunOpts{token: "ecs-1"}); err != nil {
		t.Fatalf("the ECS fault was not one-shot: %v", err)
	}

	// And the other way round.
	s.InjectFaultsFor(APICVM, ActionDescribeInstances, Fault{Code: CodeRequestLimitExceeded})
	if _, err := ecsDescribe(ec, nil); err != nil {
		t.Fatalf("ECS DescribeInstances took the fault queued for CVM: %v", err)
	}
	_, err = describeIDs(cc, nil)
	wantCode(t, err, CodeRequestLimitExceeded)

	// A call takes its own API's queue before the shared one.
	s.InjectFaults(ActionDescribeInstances, Fault{Code: "Shared"})
	s.InjectFaultsFor(APIECS, ActionDescribeInstances, Fault{Code: "Own"})
	_, err = ecsDescribe(ec, nil)
	wantECSErr(t, err, "Own", http.StatusBadRequest)
	_, err = ecsDescribe(ec, nil)
	wantECSErr(t, err, "Shared", http.StatusBadRequest)
	if _, err := describeIDs(cc, nil); err != nil {
		t.Fatalf("the shared fault was answered twice: %v", err)
	}

	// Standing faults: one API's setting wins over the shared one and
	// leaves the other API alone.
	s.SetFaults(ActionDescribeInstances, ActionFaults{ErrorRate: 1, ErrorCode: "SharedStanding"})
	s.SetFaultsFor(APIECS, ActionDescribeInstances, ActionFaults{ErrorRate: 1, ErrorCode: ECSCodeServiceUnavailable})
	_, err = ecsDescribe(ec, nil)
	wantECSErr(t, err, ECSCodeServiceUnavailable, http.StatusServiceUnavailable)
	_, err = describeIDs(cc, nil)
	wantCode(t, err, "SharedStanding")
	s.SetFaults(ActionDescribeInstances, ActionFaults{})
	if _, err := describeIDs(cc, nil); err != nil {
		t.Fatalf("CVM after clearing the shared fault: %v", err)
	}
	_, err = ecsDescribe(ec, nil)
	wantECSErr(t, err, ECSCodeServiceUnavailable, http.StatusServiceUnavailable)
	s.SetFaultsFor(APIECS, ActionDescribeInstances, ActionFaults{})
	if _, err := ecsDescribe(ec, nil); err != nil {
		t.Fatalf("ECS after clearing its fault: %v", err)
	}

	// ClearFaults clears every scope.
	s.InjectFaultsFor(APICVM, ActionRunInstances, Fault{})
	s.InjectFaultsFor(APIECS, ActionRunInstances, Fault{})
	s.ClearFaults()
	if _, err := runInstances(cc, runOpts{count: 1}); err != nil {
		t.Fatal(err)
	}
	if _, err := ecsRun(ec, ecsRunOpts{}); err != nil {
		t.Fatal(err)
	}
}

func TestRateLimitsScopedPerAPI(t *testing.T) {
	s, cc, ec := bothAPIs(t, testConfig())

	// A limit for ECS throttles ECS calls with ECS's code and leaves CVM
	// calls of the same action alone.
	s.SetRateLimitFor(APIECS, ActionDescribeInstances, 0.001) // a burst of one, then nothing for 1000s
	for range 3 {
		if _, err := describeIDs(cc, nil); err != nil {
			t.Fatalf("CVM throttled by the ECS limit: %v", err)
		}
	}
	if _, err := ecsDescribe(ec, nil); err != nil {
		t.Fatal(err)
	}
	_, err := ecsDescribe(ec, nil)
	wantECSErr(t, err, ECSCodeThrottling, http.StatusBadRequest)
	s.SetRateLimitFor(APIECS, ActionDescribeInstances, 0)

	// A shared limit throttles each API with its own code, in buckets of
	// their own (another rate: a new bucket for ECS too).
	s.SetRateLimit(ActionDescribeInstances, 0.002)
	if _, err := describeIDs(cc, nil); err != nil {
		t.Fatal(err)
	}
	_, err = describeIDs(cc, nil)
	wantCode(t, err, CodeRequestLimitExceeded)
	if _, err := ecsDescribe(ec, nil); err != nil {
		t.Fatalf("ECS throttled by the CVM bucket: %v", err)
	}
	_, err = ecsDescribe(ec, nil)
	wantECSErr(t, err, ECSCodeThrottling, http.StatusBadRequest)

	// One API's limit wins over the shared one.
	s.SetRateLimitFor(APICVM, ActionDescribeInstances, 1000)
	for range 3 {
		if _, err := describeIDs(cc, nil); err != nil {
			t.Fatalf("CVM's own limit did not win over the shared one: %v", err)
		}
	}
	if st := s.Stats(); st.Throttled[ActionDescribeInstances] != 3 {
		t.Fatalf("throttled %v, want 3 DescribeInstances", st.Throttled)
	}
}

func TestUnknownAPIPanics(t *testing.T) {
	s := startServer(t, testConfig())
	defer func() {
		if recover() == nil {
			t.Fatal("SetFaultsFor with an unknown API did not panic")
		}
	}()
	s.SetFaultsFor("aws", ActionRunInstances, ActionFaults{ErrorRate: 1})
}

func TestClientTokensScopedPerAPI(t *testing.T) {
	cfg := testConfig()
	cfg.StateFile = filepath.Join(t.TempDir(), "state.json")
	s, cc, ec := bothAPIs(t, cfg)

	// The same account and token on both APIs: two separate requests,
	// neither replays the other's VMs.
	cvmIDs, err := runInstances(cc, runOpts{count: 1, token: "same-token"})
	if err != nil {
		t.Fatal(err)
	}
	ecsIDs, err := ecsRun(ec, ecsRunOpts{amount: 2, token: "same-token"})
	if err != nil {
		t.Fatal(err)
	}
	if len(ecsIDs) != 2 || slices.Contains(ecsIDs, cvmIDs[0]) {
		t.Fatalf("ECS with CVM's token answered %v (CVM: %v)", ecsIDs, cvmIDs)
	}
	again, err := runInstances(cc, runOpts{count: 1, token: "same-token"})
	if err != nil || !slices.Equal(again, cvmIDs) {
		t.Fatalf("CVM replay = %v, %v; want %v", again, err, cvmIDs)
	}
	st := s.Stats()
	if st.VMsCreated != 3 || st.TokensCreatedTwice != 0 ||
		st.ClientTokenCreations["acct1/same-token"] != 1 || st.ClientTokenCreations["acct1/ecs:same-token"] != 1 ||
		st.ClientTokenReplays["acct1/same-token"] != 1 {
		t.Fatalf("stats: created %d, twice %d, creations %v, replays %v", st.VMsCreated, st.TokensCreatedTwice, st.ClientTokenCreations, st.ClientTokenReplays)
	}

	// The records survive a restart, each on its API.
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(cfg.StateFile)
	if err != nil {
		t.Fatal(err)
	}
	s2, cc2, ec2 := bothAPIs(t, cfg)
	ecsAgain, err := ecsRun(ec2, ecsRunOpts{amount: 2, token: "same-token"})
	if err != nil || !slices.Equal(ecsAgain, ecsIDs) {
		t.Fatalf("ECS replay after restart = %v, %v; want %v (state: %s)", ecsAgain, err, ecsIDs, b)
	}
	cvmAgain, err := runInstances(cc2, runOpts{count: 1, token: "same-token"})
	if err != nil || !slices.Equal(cvmAgain, cvmIDs) {
		t.Fatalf("CVM replay after restart = %v, %v; want %v", cvmAgain, err, cvmIDs)
	}
	if st := s2.Stats(); st.VMsCreated != 3 || st.VMsCreatedECS != 2 {
		t.Fatalf("created %d VMs (%d by ECS) after restart, want 3 (2)", st.VMsCreated, st.VMsCreatedECS)
	}
}

// A state file written before tokens were kept per API holds ECS tokens
// without "api": they are recognised by their instance ids.
func TestECSTokensOfOldStateFiles(t *testing.T) {
	cfg := testConfig()
	cfg.StateFile = filepath.Join(t.TempDir(), "state.json")
	s, _, ec := bothAPIs(t, cfg)
	ids, err := ecsRun(ec, ecsRunOpts{amount: 2, token: "old-token"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(cfg.StateFile)
	if err != nil {
		t.Fatal(err)
	}
	old := strings.Replace(string(b), `{"api":"ecs","token"`, `{"token"`, 1)
	if old == string(b) {
		t.Fatalf("no api field for the ECS token in the state file: %s", b)
	}
	if err := os.WriteFile(cfg.StateFile, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	s2, _, ec2 := bothAPIs(t, cfg)
	again, err := ecsRun(ec2, ecsRunOpts{amount: 2, token: "old-token"})
	if err != nil || !slices.Equal(again, ids) {
		t.Fatalf("ECS replay from an old state file = %v, %v; want %v", again, err, ids)
	}
	if st := s2.Stats(); st.VMsCreated != 2 || st.ClientTokenReplays["acct1/ecs:old-token"] != 1 {
		t.Fatalf("created %d, replays %v", st.VMsCreated, st.ClientTokenReplays)
	}
}
