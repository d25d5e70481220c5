package cloudcall

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/libs/backoff"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/domain"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ratelimit"
)

// fakeAPI is a test SDK client: it counts the requests it is handed.
type fakeAPI struct{ requests []*int }

func newAdapter(api *fakeAPI) *Adapter[*fakeAPI] {
	c := newCaller(nil)
	return NewAdapter(Profile{Provider: "test", Classify: c.o.Classify, DefaultLimits: ratelimit.Limits{}}, AdapterOptions[*fakeAPI]{
		Clients: func(string, string) (*fakeAPI, error) { return api, nil },
		Settings: Settings{
			Retry: c.o.Retry,
		},
	})
}

var tgt = ports.Target{Account: "a", Region: "r"}

// TestCreateChecksBuildsOnceUpFrontAndAfreshPerAttempt: a request no cloud
// should see and a template that does not build make no call; a retried
// call gets a new request each attempt; the error names the action,
// template and token.
func TestCreateChecksBuildsOnceUpFrontAndAfreshPerAttempt(t *testing.T) {
	api := &fakeAPI{}
	a := newAdapter(api)
	builds := 0
	build := func(req ports.CreateRequest) (*int, error) {
		if req.Parameters == "broken" {
			return nil, ports.NewInvalidParametersError("InvalidTemplate", "broken")
		}
		builds++
		n := builds
		return &n, nil
	}
	attempts := 0
	run := func(_ context.Context, api *fakeAPI, r *int) ([]string, error) {
		api.requests = append(api.requests, r)
		attempts++
		if attempts < 3 {
			return nil, sdkError{"Throttling"}
		}
		return []string{"i-1"}, nil
	}
	req := ports.CreateRequest{Target: tgt, ClientToken: "tok", Template: "small", Count: 1}

	bad := req
	bad.ClientToken = ""
	if _, err := Create(context.Background(), a, bad, "Run", build, run); !ports.IsInvalidParametersError(err) {
		t.Fatalf("no token: %v", err)
	}
	bad = req
	bad.Parameters = "broken"
	if _, err := Create(context.Background(), a, bad, "Run", build, run); !ports.IsInvalidParametersError(err) {
		t.Fatalf("broken template: %v", err)
	}
	if attempts != 0 {
		t.Fatalf("%d calls for requests refused up front", attempts)
	}

	ids, err := Create(context.Background(), a, req, "Run", build, run)
	if err != nil || len(ids) != 1 {
		t.Fatalf("Create = %v, %v", ids, err)
	}
	if len(api.requests) != 3 || api.requests[0] == api.requests[1] || api.requests[1] == api.requests[2] {
		t.Fatalf("attempts shared a request: %v", api.requests)
	}

	attempts = -10 // throttled beyond the retry bound
	_, err = Create(context.Background(), a, req, "Run", build, run)
	if !ports.IsThrottledError(err) || !strings.Contains(err.Error(), `Run (template "small", token tok)`) {
		t.Fatalf("failed Create = %v", err)
	}
}

// TestDescribe: no ids make no call, too many are refused, a failure names
// the action and the number of ids.
func TestDescribe(t *testing.T) {
	a := newAdapter(&fakeAPI{})
	calls := 0
	fn := func(context.Context, *fakeAPI) ([]domain.Status, error) {
		calls++
		return nil, sdkError{"Definitive"}
	}
	if sts, err := a.Describe(context.Background(), tgt, nil, "Describe", fn); sts != nil || err != nil || calls != 0 {
		t.Fatalf("no ids: %v, %v after %d calls", sts, err, calls)
	}
	if _, err := a.Describe(context.Background(), tgt, make([]string, ports.MaxBatch+1), "Describe", fn); !ports.IsInvalidParametersError(err) || calls != 0 {
		t.Fatalf("too many ids: %v after %d calls", err, calls)
	}
	_, err := a.Describe(context.Background(), tgt, []string{"i-1", "i-2"}, "Describe", fn)
	if ErrorCode(err) != "Definitive" || !strings.HasPrefix(err.Error(), "Describe (2 ids): ") || calls != 1 {
		t.Fatalf("failure: %v after %d calls", err, calls)
	}
}

// TestTerminateSkipsWhatIsAlreadyGoing: a terminate refused because a VM
// is gone is repeated for the VMs not terminating yet.
func TestTerminateSkipsWhatIsAlreadyGoing(t *testing.T) {
	a := newAdapter(&fakeAPI{})
	gone := CodeSet{"Gone": true}
	var sets [][]string
	terminate := func(_ context.Context, _ *fakeAPI, ids []string) error {
		sets = append(sets, ids)
		if len(sets) == 1 {
			return sdkError{"Gone"}
		}
		return nil
	}
	describe := func(_ context.Context, _ ports.Target, ids []string) ([]domain.Status, error) {
		return []domain.Status{{CloudID: "i-1", State: domain.StateTerminating}, {CloudID: "i-2", State: domain.StateRunning}}, nil
	}
	if err := a.Terminate(context.Background(), tgt, []string{"i-1", "i-2", "i-3"}, "Term", gone.Has, describe, terminate); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(sets) != "[[i-1 i-2 i-3] [i-2]]" {
		t.Fatalf("terminated %v, want all, then i-2 only", sets)
	}
	other := func(context.Context, *fakeAPI, []string) error { return sdkError{"Definitive"} }
	err := a.Terminate(context.Background(), tgt, []string{"i-1"}, "Term", gone.Has, describe, other)
	if ErrorCode(err) != "Definitive" || !strings.HasPrefix(err.Error(), "Term (1 ids): ") {
		t.Fatalf("other failure: %v", err)
	}
}

func TestCodeSetHas(t *testing.T) {
	s := CodeSet{"Gone": true}
	for err, want := range map[error]bool{
		ports.NewNotFoundError("Gone", ""):                            true,
		fmt.Errorf("wrapped: %w", ports.NewNotFoundError("Gone", "")): true,
		ports.NewNotFoundError("Other", ""):                           false,
		errors.New("Gone"):                                            false,
	} {
		if got := s.Has(err); got != want {
			t.Errorf("Has(%v) = %v, want %v", err, got, want)
		}
	}
}

// TestListPages: pages until the last, wraps a failure with the cluster
// and page, and gives up after MaxPages.
func TestListPages(t *testing.T) {
	var seen []int
	err := ListPages("c1", func(n int) (bool, error) { seen = append(seen, n); return n == 2, nil })
	if err != nil || fmt.Sprint(seen) != "[0 1 2]" {
		t.Fatalf("pages %v, err %v", seen, err)
	}
	err = ListPages("c1", func(n int) (bool, error) {
		if n == 1 {
			return false, ports.NewThrottledError("Throttling", "")
		}
		return false, nil
	})
	if !ports.IsThrottledError(err) || !strings.HasPrefix(err.Error(), "listing instances of cluster c1 (page 1): ") {
		t.Fatalf("failure: %v", err)
	}
	pages := 0
	err = ListPages("c1", func(int) (bool, error) { pages++; return false, nil })
	if ErrorCode(err) != "TooManyPages" || !ports.IsTransientError(err) || pages != MaxPages {
		t.Fatalf("endless listing: %v after %d pages", err, pages)
	}
}

// TestNewAdapterFillsTheCloudsDefaultLimits: nil Limits are the cloud's.
func TestNewAdapterFillsTheCloudsDefaultLimits(t *testing.T) {
	a := NewAdapter(Profile{Provider: "test", DefaultLimits: ratelimit.Limits{"Act": {Rate: 0.01, Burst: 1}}}, AdapterOptions[int]{
		Clients:  func(string, string) (int, error) { return 0, nil },
		Settings: Settings{Retry: backoff.Policy{Attempts: 1}},
	})
	calls := 0
	fn := func(context.Context, int) error { calls++; return nil }
	if err := a.Call(context.Background(), tgt, "Act", fn); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := a.Call(ctx, tgt, "Act", fn); err == nil || calls != 1 {
		t.Fatalf("over the default limit: %v after %d calls", err, calls)
	}
}
