package cvmemu

import (
	"context"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common"
	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"
)

// startHold serves a Hold over s on its own address and returns an SDK
// client that goes through it.
func startHold(t *testing.T, s *Server) (*Hold, *cvm.Client) {
	t.Helper()
	h := NewHold(s)
	hs := httptest.NewServer(h)
	t.Cleanup(hs.Close)
	t.Cleanup(h.ReleaseAll) // runs first: a held call must not block Close
	c, err := NewClient(strings.TrimPrefix(hs.URL, "http://"), testSecretID, testKey, testRegion)
	if err != nil {
		t.Fatal(err)
	}
	return h, c
}

// A held RunInstances has created its VMs while its client still waits;
// released, the client gets them. Other actions and later calls pass.
func TestHoldReleasesTheAnswerOfACommittedCall(t *testing.T) {
	s := startServer(t, testConfig())
	h, c := startHold(t, s)
	call := h.Next(ActionRunInstances)

	type result struct {
		ids []string
		err error
	}
	done := make(chan result, 1)
	go func() {
		ids, err := runInstances(c, runOpts{count: 2, token: "held-1"})
		done <- result{ids, err}
	}()
	<-call.Held()
	if st := s.Stats(); st.VMsCreated != 2 {
		t.Fatalf("VMs created while the answer is held = %d, want 2 (the call committed)", st.VMsCreated)
	}
	if call.ClientToken() != "held-1" {
		t.Fatalf("held call's ClientToken = %q, want held-1", call.ClientToken())
	}
	select {
	case r := <-done:
		t.Fatalf("the client got an answer while it was held: %v %v", r.ids, r.err)
	default:
	}
	// Other calls are not held meanwhile.
	if _, err := describeIDs(c, nil); err != nil {
		t.Fatalf("DescribeInstances through the hold: %v", err)
	}
	call.Release()
	r := <-done
	if r.err != nil || len(r.ids) != 2 {
		t.Fatalf("released call = %v, %v; want 2 ids", r.ids, r.err)
	}
	if _, err := runInstances(c, runOpts{count: 1, token: "not-held"}); err != nil {
		t.Fatalf("a call nobody asked to hold: %v", err)
	}
}

// A client that goes away while its answer is held never gets it; its
// retry with the same ClientToken gets the VMs the held call created.
func TestHoldClientGoneAndRetryWithTheSameToken(t *testing.T) {
	s := startServer(t, testConfig())
	h, c := startHold(t, s)
	call := h.Next(ActionRunInstances)

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		req := cvm.NewRunInstancesRequest()
		req.Placement = &cvm.Placement{Zone: common.StringPtr(testZone)}
		req.ImageId = common.StringPtr(testImage)
		req.InstanceCount = common.Int64Ptr(3)
		req.ClientToken = common.StringPtr("held-2")
		_, err := c.RunInstancesWithContext(ctx, req)
		done <- err
	}()
	<-call.Held()
	cancel() // the client dies: its connection closes
	<-call.ClientGone()
	if err := <-done; err == nil {
		t.Fatal("the cancelled client got an answer")
	}
	var created []string
	for _, vm := range s.ListVMs() {
		created = append(created, vm.ID)
	}

	ids, err := runInstances(sdkClient(t, s, testSecretID, testKey), runOpts{count: 3, token: "held-2"})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(ids)
	slices.Sort(created)
	if !slices.Equal(ids, created) {
		t.Fatalf("retry with the same token got %v, the held call created %v", ids, created)
	}
	if st := s.Stats(); st.VMsCreated != 3 || st.ClientTokenReplays["acct1/held-2"] != 1 {
		t.Fatalf("VMs created %d (want 3), replays %v (want 1 for held-2)", st.VMsCreated, st.ClientTokenReplays)
	}
}
