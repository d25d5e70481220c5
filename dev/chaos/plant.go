package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common"
	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"

	"github.com/nodesmith/nodesmith/dev/bench/harness"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// plantOrphan creates a VM behind nodesmith's back (no record, no tag the
// reconciler would act on) right before the checks, so `-plant-orphan`
// proves the orphan check fails when it should.
func (r *run) plantOrphan() (string, error) {
	read := func(name string) (string, error) {
		b, err := os.ReadFile(filepath.Join(r.w.CredentialsDir, harness.Account, name))
		return strings.TrimSpace(string(b)), err
	}
	id, err := read("secretId")
	if err != nil {
		return "", err
	}
	key, err := read("secretKey")
	if err != nil {
		return "", err
	}
	r.w.Emulator.ClearFaults()
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
		return "", fmt.Errorf("planting an orphan VM: %w", err)
	}
	if len(res.Response.InstanceIdSet) != 1 {
		return "", fmt.Errorf("planting an orphan VM: got %d ids", len(res.Response.InstanceIdSet))
	}
	return *res.Response.InstanceIdSet[0], nil
}
