package cvmemu_test

import (
	"log"
	"path/filepath"

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
