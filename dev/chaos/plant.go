package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	ecs "github.com/alibabacloud-go/ecs-20140526/v7/client"
	"github.com/alibabacloud-go/tea/dara"
	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common"
	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"

	"github.com/nodesmith/nodesmith/dev/bench/harness"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// plantOrphans creates a VM behind nodesmith's back (no record, no tag the
// reconciler would act on) on each cloud right before the checks, so
// `-plant-orphan` proves the orphan check fails when it should, for CVM
// and ECS VMs alike.
func (r *run) plantOrphans() ([]string, error) {
	r.w.Emulator.ClearFaults()
	cvmID, err := r.plantCVMOrphan()
	if err != nil {
		return nil, fmt.Errorf("planting an orphan CVM VM: %w", err)
	}
	ecsID, err := r.plantECSOrphan()
	if err != nil {
		return nil, fmt.Errorf("planting an orphan ECS VM: %w", err)
	}
	return []string{cvmID, ecsID}, nil
}

// credentials reads an account's key pair from the cloud-adapter's
// credentials directory.
func (r *run) credentials(account string) (id, key string, err error) {
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(r.w.CredentialsDir, account, name))
		return strings.TrimSpace(string(b)), err
	}
	if id, err = read("secretId"); err != nil {
		return "", "", err
	}
	key, err = read("secretKey")
	return id, key, err
}

func (r *run) plantCVMOrphan() (string, error) {
	id, key, err := r.credentials(harness.Account)
	if err != nil {
		return "", err
	}
	c, err := cvmemu.NewClient(r.w.Emulator.Endpoint(), id, key, harness.Region)
	if err != nil {
		return "", err
	}
	req := cvm.NewRunInstancesRequest()
	req.Placement = &cvm.Placement{Zone: common.StringPtr("ap-guangzhou-3")}
	req.ImageId = common.StringPtr("img-nodesmith")
	req.InstanceCount = common.Int64Ptr(1)
	req.ClientToken = common.StringPtr("chaos-planted-orphan")
	res, err := c.RunInstances(req)
	if err != nil {
		return "", err
	}
	if len(res.Response.InstanceIdSet) != 1 {
		return "", fmt.Errorf("got %d ids", len(res.Response.InstanceIdSet))
	}
	return *res.Response.InstanceIdSet[0], nil
}

func (r *run) plantECSOrphan() (string, error) {
	id, key, err := r.credentials(harness.ECSAccount)
	if err != nil {
		return "", err
	}
	c, err := cvmemu.NewECSClient(r.w.ECSEndpoint, id, key, harness.ECSRegion)
	if err != nil {
		return "", err
	}
	res, err := c.RunInstances(&ecs.RunInstancesRequest{
		RegionId:        dara.String(harness.ECSRegion),
		ZoneId:          dara.String(harness.ECSZone),
		InstanceType:    dara.String("ecs.g7.large"),
		ImageId:         dara.String("aliyun_3_x64_20G_alibase_20240819.vhd"),
		VSwitchId:       dara.String("vsw-planted"),
		SecurityGroupId: dara.String("sg-planted"),
		Amount:          dara.Int32(1),
		ClientToken:     dara.String("chaos-planted-orphan"),
	})
	if err != nil {
		return "", err
	}
	ids := dara.StringSliceValue(res.Body.InstanceIdSets.InstanceIdSet)
	if len(ids) != 1 {
		return "", fmt.Errorf("got %d ids", len(ids))
	}
	return ids[0], nil
}
