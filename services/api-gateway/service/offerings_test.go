package service_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/restapi"
	cloudv1 "github.com/nodesmith/nodesmith/proto/nodesmith/cloud/v1"
	statev1 "github.com/nodesmith/nodesmith/proto/nodesmith/state/v1"
)

// spotGroup is a group whose spot template has three offerings; the
// first is marked unavailable by seedOfferings.
func spotGroup() *statev1.NodeGroup {
	return &statev1.NodeGroup{
		Id: "spot", MinSize: 0, MaxSize: 20, TargetSize: 0,
		InstanceTemplate: &statev1.InstanceTemplate{
			Name: "sp", Provider: "tencentcloud", Account: "prod", Region: "ap-guangzhou", Zone: "ap-guangzhou-3", InstanceType: "S5.LARGE8",
			CapacityType: "spot", OfferingStrategy: "balanced",
			Offerings: []*cloudv1.Offering{
				{Zone: "ap-guangzhou-3", InstanceType: "S5.LARGE8"},
				{Zone: "ap-guangzhou-4", SubnetId: "subnet-4", InstanceType: "S5.LARGE8"},
				{Zone: "ap-guangzhou-6", InstanceType: "S5.LARGE8", CapacityType: "on-demand"},
			},
		},
	}
}

const soldOut = "ResourceInsufficient.SpecifiedInstanceType"

// markKey is the key of the spot group's first offering's mark, named as
// the cloud adapter names it (capacity resolved to the template's).
var markKey = messaging.OfferingKey("tencentcloud", "prod", "ap-guangzhou", "ap-guangzhou-3", "S5.LARGE8", "spot")

// seedOfferings writes the spot group and, as a cloud adapter would, a
// mark on its first offering lasting until an hour from now; it returns
// the mark's until once the gateway shows it.
func seedOfferings(t *testing.T, gw *gateway) time.Time {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := gw.lifecycle.PutGroup(ctx, spotGroup()); err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	putMark(t, gw, markKey, &cloudv1.OfferingUnavailable{
		Target:   &cloudv1.Target{Provider: "tencentcloud", Account: "prod", Region: "ap-guangzhou"},
		Offering: &cloudv1.Offering{Zone: "ap-guangzhou-3", InstanceType: "S5.LARGE8", CapacityType: "spot"},
		At:       timestamppb.New(until.Add(-time.Hour)), Until: timestamppb.New(until),
		Reason: &cloudv1.CloudError{Kind: cloudv1.ErrorKind_ERROR_KIND_CAPACITY, Code: soldOut, Message: "sold out in ap-guangzhou-3"},
	})
	waitGroup(t, gw, "spot", func(g restapi.Group) bool {
		return g.Offerings != nil && len(g.Offerings.Items) == 3 && !g.Offerings.Items[0].Available
	})
	return until
}

func putMark(t *testing.T, gw *gateway, key string, m *cloudv1.OfferingUnavailable) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := gw.env.JS.KeyValue(ctx, messaging.BucketOfferings)
	if err != nil {
		t.Fatal(err)
	}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(ctx, key, b); err != nil {
		t.Fatal(err)
	}
}

// readJSON GETs path with the read-only token into v and returns the
// status code.
func readJSON(t *testing.T, gw *gateway, path string, v any) int {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+gw.addrs.REST+path, nil)
	req.Header.Set("Authorization", "Bearer "+readOnlyToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusOK {
		if err := json.Unmarshal(body, v); err != nil {
			t.Fatalf("GET %s: %v: %s", path, err, body)
		}
	}
	return resp.StatusCode
}

// waitGroup polls GET /nodegroups/{id} until ok accepts it.
func waitGroup(t *testing.T, gw *gateway, id string, ok func(restapi.Group) bool) restapi.Group {
	t.Helper()
	var g restapi.Group
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		g = restapi.Group{}
		if code := readJSON(t, gw, "/api/v1/nodegroups/"+id, &g); code == http.StatusOK && ok(g) {
			return g
		}
		if time.Now().After(deadline) {
			t.Fatalf("group %s never reached the expected view; last: %+v", id, g)
		}
	}
}

// A group's offerings and the marks cloud adapters write reach REST
// through the KV buckets: the group view lists the offerings in order with
// their capacity resolved, the marked one unavailable until when and why;
// GET /offerings/unavailable lists the live marks (read-only tokens may);
// a deleted mark, or one whose until has passed, is not shown.
func TestOfferingsThroughKV(t *testing.T) {
	gw := startGateway(t, nil)
	until := seedOfferings(t, gw)

	g := waitGroup(t, gw, "spot", func(restapi.Group) bool { return true })
	want := &restapi.GroupOfferings{Strategy: "balanced", Items: []restapi.OfferingStatus{
		{Zone: "ap-guangzhou-3", InstanceType: "S5.LARGE8", CapacityType: "spot", UnavailableUntil: until.Format(time.RFC3339Nano),
			Reason: &restapi.OfferingReason{Code: soldOut, Message: "sold out in ap-guangzhou-3"}},
		{Zone: "ap-guangzhou-4", SubnetID: "subnet-4", InstanceType: "S5.LARGE8", CapacityType: "spot", Available: true},
		{Zone: "ap-guangzhou-6", InstanceType: "S5.LARGE8", CapacityType: "on-demand", Available: true},
	}}
	if got, _ := json.Marshal(g.Offerings); string(got) != string(must(json.Marshal(want))) {
		t.Errorf("offerings:\n got %s\nwant %s", got, must(json.Marshal(want)))
	}
	var list restapi.GroupList
	if code := readJSON(t, gw, "/api/v1/nodegroups", &list); code != http.StatusOK {
		t.Fatalf("list: %d", code)
	}
	for _, it := range list.Items {
		if (it.Offerings != nil) != (it.ID == "spot") {
			t.Errorf("group %s offerings = %+v", it.ID, it.Offerings)
		}
	}

	// A mark of another account, and an expired one: only the live one
	// of this account matches; the expired one is listed nowhere.
	putMark(t, gw, messaging.OfferingKey("tencentcloud", "other", "ap-guangzhou", "ap-guangzhou-4", "S5.LARGE8", "spot"), &cloudv1.OfferingUnavailable{
		Target:   &cloudv1.Target{Provider: "tencentcloud", Account: "other", Region: "ap-guangzhou"},
		Offering: &cloudv1.Offering{Zone: "ap-guangzhou-4", InstanceType: "S5.LARGE8", CapacityType: "spot"},
		Until:    timestamppb.New(until.Add(time.Hour)), Reason: &cloudv1.CloudError{Code: "ZoneSoldOut"},
	})
	putMark(t, gw, messaging.OfferingKey("tencentcloud", "prod", "ap-guangzhou", "ap-guangzhou-6", "S5.LARGE8", "on-demand"), &cloudv1.OfferingUnavailable{
		Target:   &cloudv1.Target{Provider: "tencentcloud", Account: "prod", Region: "ap-guangzhou"},
		Offering: &cloudv1.Offering{Zone: "ap-guangzhou-6", InstanceType: "S5.LARGE8", CapacityType: "on-demand"},
		Until:    timestamppb.New(time.Now().Add(-time.Second)), Reason: &cloudv1.CloudError{Code: "Expired"},
	})
	var marks restapi.UnavailableOfferingList
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		marks = restapi.UnavailableOfferingList{}
		if code := readJSON(t, gw, "/api/v1/offerings/unavailable", &marks); code == http.StatusOK && len(marks.Items) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("unavailable offerings never listed two marks: %+v", marks)
		}
	}
	wantMarks := []restapi.UnavailableOffering{
		{Provider: "tencentcloud", Account: "prod", Region: "ap-guangzhou", Zone: "ap-guangzhou-3", InstanceType: "S5.LARGE8", CapacityType: "spot",
			At: until.Add(-time.Hour).Format(time.RFC3339Nano), Until: until.Format(time.RFC3339Nano), Reason: restapi.OfferingReason{Code: soldOut, Message: "sold out in ap-guangzhou-3"}},
		{Provider: "tencentcloud", Account: "other", Region: "ap-guangzhou", Zone: "ap-guangzhou-4", InstanceType: "S5.LARGE8", CapacityType: "spot",
			Until: until.Add(time.Hour).Format(time.RFC3339Nano), Reason: restapi.OfferingReason{Code: "ZoneSoldOut"}},
	}
	if got := string(must(json.Marshal(marks.Items))); got != string(must(json.Marshal(wantMarks))) {
		t.Errorf("unavailable offerings:\n got %s\nwant %s", got, must(json.Marshal(wantMarks)))
	}
	g = waitGroup(t, gw, "spot", func(restapi.Group) bool { return true })
	if !g.Offerings.Items[1].Available || !g.Offerings.Items[2].Available {
		t.Errorf("another account's or an expired mark shows on the group: %+v", g.Offerings.Items)
	}

	// Anonymous callers get 401, as on every route.
	resp, err := http.Get("http://" + gw.addrs.REST + "/api/v1/offerings/unavailable")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("anonymous: %d, want 401", resp.StatusCode)
	}

	// The adapter (or the bucket's MaxAge) deletes the mark: available.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	kv, err := gw.env.JS.KeyValue(ctx, messaging.BucketOfferings)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Delete(ctx, markKey); err != nil {
		t.Fatal(err)
	}
	waitGroup(t, gw, "spot", func(g restapi.Group) bool {
		return g.Offerings.Items[0].Available && g.Offerings.Items[0].Reason == nil
	})
}

func must(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}
