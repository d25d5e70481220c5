package cvmemu

import (
	"net/http"
	"testing"
	"time"

	ecs "github.com/alibabacloud-go/ecs-20140526/v7/client"
	"github.com/alibabacloud-go/tea/dara"
)

func TestECSSpotValidationReclaimAndMetadata(t *testing.T) {
	s := startECS(t, testConfig())
	c := ecsClient(t, s, testSecretID, testKey)
	run := func(mod func(*ecs.RunInstancesRequest)) ([]string, error) {
		req := &ecs.RunInstancesRequest{RegionId: dara.String(ecsRegion), ZoneId: dara.String(ecsZone),
			InstanceType: dara.String(ecsType), ImageId: dara.String(ecsImage)}
		mod(req)
		resp, err := c.RunInstances(req)
		if err != nil {
			return nil, err
		}
		return dara.StringSliceValue(resp.Body.InstanceIdSets.InstanceIdSet), nil
	}
	withLimit := func(r *ecs.RunInstancesRequest) {
		r.SpotStrategy, r.SpotPriceLimit = dara.String("SpotWithPriceLimit"), dara.Float32(0.5)
	}
	_, err := run(func(r *ecs.RunInstancesRequest) { r.SpotStrategy = dara.String("SpotWithPriceLimit") })
	wantECSErr(t, err, ecsCodeMissingParameter, http.StatusBadRequest)
	_, err = run(func(r *ecs.RunInstancesRequest) { withLimit(r); r.SpotPriceLimit = dara.Float32(-1) })
	wantECSErr(t, err, ecsCodeInvalidParameter, http.StatusBadRequest)
	_, err = run(func(r *ecs.RunInstancesRequest) { withLimit(r); r.InstanceChargeType = dara.String("PrePaid") })
	wantECSErr(t, err, ecsCodeChargeTypeNotSupported, http.StatusBadRequest)
	_, err = run(func(r *ecs.RunInstancesRequest) { r.SpotPriceLimit = dara.Float32(0.5) })
	wantECSErr(t, err, ecsCodeInvalidParameter, http.StatusBadRequest)
	if s.Stats().VMsCreated != 0 {
		t.Fatal("refused calls created VMs")
	}

	ids, err := run(withLimit)
	if err != nil {
		t.Fatal(err)
	}
	ecsWaitStatus(t, c, ids, ECSStatusRunning)
	meta, err := s.ServeMetadata("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	id := ids[0]
	url := meta + "/" + id + "/latest/meta-data/instance/spot/termination-time"
	if code, _ := httpGet(t, url); code != http.StatusNotFound {
		t.Fatalf("termination-time before a reclaim: %d", code)
	}
	if code, body := httpGet(t, meta+"/"+id+"/latest/meta-data/instance-id"); code != 200 || body != id {
		t.Fatalf("instance-id: %d %q", code, body)
	}
	at, err := s.ScheduleReclaim(id, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	code, body := httpGet(t, url)
	if want := at.UTC().Format("2006-01-02T15:04:05Z"); code != 200 || body != want {
		t.Fatalf("termination-time: %d %q, want %q", code, body, want)
	}
	if _, err := s.ScheduleReclaim(id, 0); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(testTimeout)
	for {
		got, err := ecsDescribe(c, ids)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the reclaimed ECS VM is still listed")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
