package tencent

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common"
	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"

	"github.com/nodesmith/nodesmith/services/cloud-adapter/internal/ports"
)

// shrinkingAPI lists VMs by offset like DescribeInstances, and terminates
// the first VM after serving the first page of the first `shrinks`
// listings, as a deletion racing with a paged listing does.
type shrinkingAPI struct {
	API
	mu      sync.Mutex
	vms     []string
	shrinks int
	calls   int
}

func (a *shrinkingAPI) DescribeInstancesWithContext(_ context.Context, r *cvm.DescribeInstancesRequest) (*cvm.DescribeInstancesResponse, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.calls++
	off, lim := int(*r.Offset), int(*r.Limit)
	resp := cvm.NewDescribeInstancesResponse()
	resp.Response = &cvm.DescribeInstancesResponseParams{TotalCount: common.Int64Ptr(int64(len(a.vms)))}
	for _, id := range a.vms[min(off, len(a.vms)):min(off+lim, len(a.vms))] {
		resp.Response.InstanceSet = append(resp.Response.InstanceSet, &cvm.Instance{InstanceId: common.StringPtr(id), InstanceState: common.StringPtr("RUNNING")})
	}
	if off == 0 && a.shrinks > 0 {
		a.shrinks--
		a.vms = a.vms[1:] // the next page starts one VM later
	}
	return resp, nil
}

func TestListByTagNeverMissesAVMBecauseOthersWentAway(t *testing.T) {
	for _, tc := range []struct {
		name    string
		shrinks int
		wantErr bool
	}{
		{"stable", 0, false},
		{"one deletion during the listing", 1, false},
		{"deletions during every listing", listAttempts, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &shrinkingAPI{shrinks: tc.shrinks}
			for i := range 150 {
				api.vms = append(api.vms, fmt.Sprintf("ins-%03d", i))
			}
			c := New(Options{Clients: func(string, string) (API, error) { return api, nil }})
			got, err := c.ListByTag(context.Background(), ports.Target{Account: "a", Region: "r"}, "c1")
			if tc.wantErr {
				if err == nil || !ports.IsRetryable(err) {
					t.Fatalf("ListByTag = %d VMs, %v; want a retryable error", len(got), err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			listed := map[string]bool{}
			for _, s := range got {
				listed[s.CloudID] = true
			}
			api.mu.Lock()
			defer api.mu.Unlock()
			for _, id := range api.vms {
				if !listed[id] {
					t.Fatalf("VM %s exists but was not listed (%d listed of %d)", id, len(got), len(api.vms))
				}
			}
		})
	}
}
