package cvmemu_test

import (
	"fmt"
	"log"
	"path/filepath"
	"time"

	ecs "github.com/alibabacloud-go/ecs-20140526/v7/client"
	"github.com/alibabacloud-go/tea/dara"

	"golang.org/x/crypto/ssh"

	"github.com/nodesmith/nodesmith/tools/cvmemu"
	"github.com/nodesmith/nodesmith/tools/simcluster"
	"github.com/nodesmith/nodesmith/tools/simvm"
)

// Example composes the three simulators the way a launcher does: a CVM API
// whose VMs accept SSH, and whose kubeadm joins register nodes in a cluster.
// Everything under dir survives a restart: the same code run again finds
// the VMs where they were, on the same addresses with the same host keys,
// and their nodes register again.
func Example() {
	dir := "/tmp/nodesmith-sim" // VM state, sandboxes and known_hosts

	// Keys: the hook runner's client key, and a host CA all VMs present
	// certificates from. (A launcher that restarts keeps these in dir
	// too; each VM's own host key is kept in its sandbox.)
	clientKey, err := simvm.GenerateSigner()
	if err != nil {
		log.Fatal(err)
	}
	hostCA, err := simvm.GenerateHostCA()
	if err != nil {
		log.Fatal(err)
	}
	vmCfg := simvm.DefaultConfig() // SSH on <private IP>:2222, user root
	vmCfg.Root = filepath.Join(dir, "vms")
	vmCfg.Persistent = true // sandboxes and host keys outlive the process
	vmCfg.AuthorizedKeys = []ssh.PublicKey{clientKey.PublicKey()}
	vmCfg.HostCA = hostCA
	vms, err := simvm.NewFactory(vmCfg)
	if err != nil {
		log.Fatal(err)
	}
	defer vms.Close()
	// The hook runner trusts every VM through this one line.
	if err := simvm.WriteKnownHostsCA(filepath.Join(dir, "known_hosts"), hostCA.PublicKey(), vmCfg.Port); err != nil {
		log.Fatal(err)
	}

	cluster := simcluster.New(simcluster.DefaultOptions()) // nodes Ready 1s after joining
	defer cluster.Close()

	cfg := cvmemu.DefaultConfig() // 2s boot, real-looking rate limits
	cfg.Credentials = map[string]string{"AKIDdev": "dev-secret"}
	cfg.StateFile = filepath.Join(dir, "cvm-state.json") // VMs outlive the process
	srv, err := cvmemu.Start("127.0.0.1:0", cfg, cvmemu.WithSSH(vms), cvmemu.WithCluster(cluster))
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	// The cloud adapter talks to srv.Endpoint() with the official SDK.
	client, err := cvmemu.NewClient(srv.Endpoint(), "AKIDdev", "dev-secret", "ap-guangzhou")
	if err != nil {
		log.Fatal(err)
	}
	_ = client
}

// ExampleStartECS drives the ECS front end with the official Alibaba Cloud
// SDK, the way an ECS cloud adapter does: the emulator's endpoint replaces
// ecs.<region>.aliyuncs.com, requests are signed as for the real API. The
// same options (WithSSH, WithCluster, Config.StateFile) give its VMs SSH,
// cluster joins and persistence.
func ExampleStartECS() {
	cfg := cvmemu.DefaultConfig()
	cfg.Credentials = map[string]string{"LTAIdev": "dev-secret"}
	cfg.BootDelay = 10 * time.Millisecond
	srv, err := cvmemu.StartECS("127.0.0.1:0", cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close()

	client, err := cvmemu.NewECSClient(srv.Endpoint(), "LTAIdev", "dev-secret", "cn-hangzhou")
	if err != nil {
		log.Fatal(err)
	}
	run, err := client.RunInstances(&ecs.RunInstancesRequest{
		RegionId:     dara.String("cn-hangzhou"),
		ZoneId:       dara.String("cn-hangzhou-h"),
		InstanceType: dara.String("ecs.g6.large"),
		ImageId:      dara.String("aliyun_3_x64_20G_alibase_20240819.vhd"),
		Amount:       dara.Int32(2),
		ClientToken:  dara.String("scale-up-1"), // a retry with it creates nothing new
		Tag:          []*ecs.RunInstancesRequestTag{{Key: dara.String("nodesmith/group"), Value: dara.String("workers")}},
	})
	if err != nil {
		log.Fatal(err)
	}
	ids := dara.StringSliceValue(run.Body.InstanceIdSets.InstanceIdSet)
	fmt.Println("created", len(ids), "instances")

	for { // VMs boot asynchronously: Pending, Starting, Running
		desc, err := client.DescribeInstances(&ecs.DescribeInstancesRequest{
			RegionId: dara.String("cn-hangzhou"),
			Tag:      []*ecs.DescribeInstancesRequestTag{{Key: dara.String("nodesmith/group"), Value: dara.String("workers")}},
		})
		if err != nil {
			log.Fatal(err)
		}
		running := 0
		for _, in := range desc.Body.Instances.Instance {
			if dara.StringValue(in.Status) == "Running" {
				running++
			}
		}
		if running == len(ids) {
			fmt.Println(running, "running")
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	// Running instances are deleted with Force, as on the real API.
	if _, err := client.DeleteInstances(&ecs.DeleteInstancesRequest{
		RegionId: dara.String("cn-hangzhou"), InstanceId: dara.StringSlice(ids), Force: dara.Bool(true),
	}); err != nil {
		log.Fatal(err)
	}
	fmt.Println("deleted")
	// Output:
	// created 2 instances
	// 2 running
	// deleted
}
