package embedded

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common"
	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common/profile"
	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"
	"golang.org/x/crypto/ssh"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"

	"github.com/nodesmith/nodesmith/cmd/nodesmithctl/cli"
	"github.com/nodesmith/nodesmith/cmd/nodesmithctl/migrate"
	"github.com/nodesmith/nodesmith/services/lifecycle/service"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// The prototype's configuration on the emulator's dev account, in seed
// 000's format.
const prototypeConfig = `cloudProviderOption:
  tencentcloud:
    dev:
      secretId: "unused-in-this-test"
      secretKey: "unused-in-this-test"
  instanceParameter:
    proto-small:
      providerIdTemplate: "externalgrpc://tencentcloud/dev/ap-guangzhou/{{InstanceID}}"
      parameter:
        InstanceChargeType: "POSTPAID_BY_HOUR"
        Placement:
          Zone: "ap-guangzhou-3"
        InstanceType: "S5.MEDIUM4"
        ImageId: "img-nodesmith"
nodeGroups:
  - id: "proto-workers"
    minSize: 0
    maxSize: 5
    targetSize: 2
    instanceParameter: "proto-small"
    nodeTemplate:
      labels:
        node-role.kubernetes.io/worker: ""
`

// The prototype's hooks, as they work on the simulated VMs (the join
// records --provider-id, as docs/migration.md requires).
const (
	protoJoin = `set -eu
etc="${SIMVM_SANDBOX:-}/etc"
hostnamectl set-hostname "$NODE_NAME"
echo "KUBELET_EXTRA_ARGS=--provider-id=$PROVIDER_ID" > "$etc/default/kubelet"
kubeadm join "$API_SERVER" --node-name "$NODE_NAME" \
  --token "$(cat "$etc/kubeadm/token")" \
  --discovery-token-ca-cert-hash "$(cat "$etc/kubeadm/ca-cert-hash")"
`
	protoDrain = `set -eu
kubectl drain "$NODE_NAME" --ignore-daemonsets --delete-emptydir-data
kubeadm reset -f
`
)

// TestMigrateFromPrototype is issue 17's acceptance path: VMs made by the
// prototype (no nodesmith tag) with their Nodes, the converted
// configuration (which passes the checker), `migrate state --apply`: no VM
// created or terminated, every prototype Node in its group, Running; then
// a scale-down deletes one cleanly (before_delete hook, VM terminated).
func TestMigrateFromPrototype(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	dataDir := t.TempDir()
	work := t.TempDir()

	// 1. Convert the prototype's configuration; it passes the checker.
	res, err := migrate.ConvertConfig([]byte(prototypeConfig), migrate.Options{})
	if err != nil {
		t.Fatal(err)
	}
	protoFile := filepath.Join(work, "nodegroup-config.yaml")
	cfgFile := filepath.Join(work, "nodesmith.yaml")
	must(t, os.MkdirAll(filepath.Join(work, "hooks"), 0o755))
	must(t, os.WriteFile(protoFile, []byte(prototypeConfig), 0o600))
	must(t, os.WriteFile(cfgFile, res.YAML, 0o600))
	must(t, os.WriteFile(filepath.Join(work, "hooks", migrate.AfterCreatedHook), []byte(protoJoin), 0o644))
	must(t, os.WriteFile(filepath.Join(work, "hooks", migrate.BeforeDeleteHook), []byte(protoDrain), 0o644))
	if err := service.ValidateConfigFile(cfgFile); err != nil {
		t.Fatalf("the converted configuration fails the checker: %v\n%s", err, res.YAML)
	}

	// 2. The stack, on the converted configuration.
	cfg := testConfig(t, dataDir, 20000+rand.IntN(20000))
	cfg.ConfigFile = cfgFile
	var runMu sync.Mutex
	runs := 0
	s, emu := startWithEmulator(t, cfg, func(e *cvmemu.Server) {
		e.ObserveRunInstances(func(string, []byte) { runMu.Lock(); runs++; runMu.Unlock() })
	})
	defer s.stop(t)

	// 3. The prototype's VMs: created without nodesmith's tags, joined by
	// the prototype's hook over SSH.
	devKey, err := os.ReadFile(filepath.Join(dataDir, "keys", "emulator-secret-key"))
	must(t, err)
	cvmc := cvmClient(t, s.addrs.Emulator, strings.TrimSpace(string(devKey)))
	req := cvm.NewRunInstancesRequest()
	req.InstanceChargeType = common.StringPtr("POSTPAID_BY_HOUR")
	req.Placement = &cvm.Placement{Zone: common.StringPtr("ap-guangzhou-3")}
	req.InstanceType = common.StringPtr("S5.MEDIUM4")
	req.ImageId = common.StringPtr("img-nodesmith")
	req.InstanceCount = common.Int64Ptr(2)
	resp, err := cvmc.RunInstances(req)
	must(t, err)
	var ids []string
	for _, id := range resp.Response.InstanceIdSet {
		ids = append(ids, *id)
	}
	signer, err := loadOrCreateSigner(filepath.Join(dataDir, "keys", "hook-runner_ed25519"))
	must(t, err)
	var status strings.Builder
	status.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: nodegroup-status, namespace: kube-system}\ndata:\n  status: |\n    nodeGroups:\n      - id: proto-workers\n        instances:\n")
	for i, id := range ids {
		var info cvmemu.VMInfo
		waitFor(t, "VM "+id+" running with its guest", func() bool {
			var ok bool
			info, ok = emu.VM(id)
			_, guest := emu.Guest(id)
			return ok && info.State == cvmemu.StateRunning && guest
		})
		node := fmt.Sprintf("proto-node-%d", i+1)
		guest, _ := emu.Guest(id)
		runOnGuest(t, guest.Addr(), signer, map[string]string{
			"NODE_NAME": node, "PROVIDER_ID": "externalgrpc://tencentcloud/dev/ap-guangzhou/" + id, "API_SERVER": "10.0.0.1:6443",
		}, protoJoin)
		fmt.Fprintf(&status, "          - {instanceID: %s, nodeName: %s, ip: %s, status: Running}\n", id, node, guest.IP())
	}
	// A VM the prototype was still creating: not adopted.
	status.WriteString("          - {instanceID: ins-notyet, nodeName: proto-node-9, status: Creating}\n")
	statusFile := filepath.Join(work, "status.yaml")
	must(t, os.WriteFile(statusFile, []byte(status.String()), 0o600))
	runMu.Lock()
	runsBefore := runs
	runMu.Unlock()

	// 4. migrate state --apply, through nodesmithctl in-process.
	tokenFile := filepath.Join(work, "token")
	must(t, os.WriteFile(tokenFile, []byte(s.addrs.AdminToken), 0o600))
	ctl := func(args ...string) (string, error) {
		var out, errOut bytes.Buffer
		root := cli.NewRootCommand(strings.NewReader(""), &out, &errOut)
		root.SetArgs(append(args, "--server", "http://"+s.addrs.REST, "--token-file", tokenFile, "--config", filepath.Join(work, "ctl.yaml")))
		err := root.ExecuteContext(context.Background())
		return out.String() + errOut.String(), err
	}
	var out string
	// The Nodes register when the simulated kubelet starts: until then the
	// route refuses them ("no Node"), and running it again is harmless.
	waitFor(t, "both VMs adopted", func() bool {
		out, err = ctl("migrate", "state", "--from", statusFile, "--config-file", protoFile, "--apply")
		return err == nil
	})
	if !strings.Contains(out, "group proto-workers: 2 adopted") && !strings.Contains(out, "already adopted") {
		t.Fatalf("migrate state output:\n%s", out)
	}
	out, err = ctl("migrate", "state", "--from", statusFile, "--config-file", protoFile, "--apply")
	if err != nil || !strings.Contains(out, "0 adopted, 2 already adopted, 0 refused") {
		t.Fatalf("second run: %v\n%s", err, out)
	}

	// Every prototype Node in its group, Running; nothing created or
	// terminated.
	c := s.client(t)
	nodes := call(t, func(ctx context.Context) (*pb.NodeGroupNodesResponse, error) {
		return c.NodeGroupNodes(ctx, &pb.NodeGroupNodesRequest{Id: "proto-workers"})
	})
	if len(nodes.GetInstances()) != 2 {
		t.Fatalf("group nodes %v", nodes.GetInstances())
	}
	for _, in := range nodes.GetInstances() {
		if in.GetStatus().GetInstanceState() != pb.InstanceStatus_instanceRunning {
			t.Errorf("instance %v not running", in)
		}
		g := call(t, func(ctx context.Context) (*pb.NodeGroupForNodeResponse, error) {
			return c.NodeGroupForNode(ctx, &pb.NodeGroupForNodeRequest{Node: &pb.ExternalGrpcNode{ProviderID: in.GetId()}})
		})
		if g.GetNodeGroup().GetId() != "proto-workers" {
			t.Errorf("node %s in group %q", in.GetId(), g.GetNodeGroup().GetId())
		}
	}
	runMu.Lock()
	created := runs - runsBefore
	runMu.Unlock()
	for _, id := range ids {
		if info, _ := emu.VM(id); info.State != cvmemu.StateRunning {
			t.Errorf("VM %s is %s after the adoption", id, info.State)
		}
	}
	if created != 0 {
		t.Fatalf("%d RunInstances calls after the adoption", created)
	}
	// Tagged with nodesmith's cluster, group and instance tags (the Tag
	// service's AttachResourcesTag), so the reconciler's inventory sees
	// them with their records.
	for _, id := range ids {
		info, _ := emu.VM(id)
		if info.Tags["nodesmith:cluster"] == "" || info.Tags["nodesmith:group"] != "proto-workers" || info.Tags["nodesmith:instance"] == "" {
			t.Errorf("VM %s tags %v", id, info.Tags)
		}
	}

	// 5. Scale down: CA deletes one Node; the before_delete hook runs and
	// the VM is terminated.
	victim := "externalgrpc://tencentcloud/dev/ap-guangzhou/" + ids[0]
	call(t, func(ctx context.Context) (*pb.NodeGroupDeleteNodesResponse, error) {
		return c.NodeGroupDeleteNodes(ctx, &pb.NodeGroupDeleteNodesRequest{Id: "proto-workers",
			Nodes: []*pb.ExternalGrpcNode{{ProviderID: victim, Name: "proto-node-1"}}})
	})
	waitFor(t, "VM "+ids[0]+" terminated", func() bool {
		info, ok := emu.VM(ids[0])
		return !ok || info.State == cvmemu.StateTerminating
	})
	api := restClient{t: t, base: "http://" + s.addrs.REST, token: s.addrs.AdminToken}
	var list struct {
		Items []struct {
			ID         string `json:"id"`
			ProviderID string `json:"providerID"`
			State      string `json:"state"`
			History    []struct {
				From, To, Reason string
			} `json:"history"`
		} `json:"items"`
	}
	waitFor(t, "the deleted instance closed", func() bool {
		must(t, json.Unmarshal(api.must(200, "GET", "/api/v1/instances?group=proto-workers&limit=100", "").body, &list))
		for _, in := range list.Items {
			if in.ProviderID == victim {
				return in.State == "DELETED"
			}
		}
		return false
	})
	for _, in := range list.Items {
		if in.ProviderID != victim {
			continue
		}
		var detail struct {
			History []struct {
				From   string `json:"from"`
				To     string `json:"to"`
				Reason string `json:"reason"`
			} `json:"history"`
			HookOutputTail string `json:"hookOutputTail"`
		}
		must(t, json.Unmarshal(api.must(200, "GET", "/api/v1/instances/"+in.ID, "").body, &detail))
		hooked := false
		for _, tr := range detail.History {
			hooked = hooked || (tr.From == "PENDING_DELETION" && tr.To == "DELETING" && tr.Reason == "before_delete hook succeeded")
		}
		if !hooked {
			t.Errorf("no PENDING_DELETION -> DELETING after the before_delete hook in %+v (hook output %q)", detail.History, detail.HookOutputTail)
		}
		t.Logf("deleted instance history %+v, hook output %q", detail.History, detail.HookOutputTail)
	}
	if info, _ := emu.VM(ids[1]); info.State != cvmemu.StateRunning {
		t.Errorf("the other VM is %s", info.State)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func cvmClient(t *testing.T, endpoint, secretKey string) *cvm.Client {
	t.Helper()
	cpf := profile.NewClientProfile()
	cpf.HttpProfile.Endpoint = endpoint
	cpf.HttpProfile.Scheme = "HTTP"
	cl, err := cvm.NewClient(common.NewCredential(emulatorSecretID, secretKey), "ap-guangzhou", cpf)
	must(t, err)
	return cl
}

// runOnGuest runs script on a simulated VM over SSH, as the prototype's
// hook engine did.
func runOnGuest(t *testing.T, addr string, signer ssh.Signer, env map[string]string, script string) {
	t.Helper()
	conn, err := ssh.Dial("tcp", addr, &ssh.ClientConfig{
		User: "root", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		HostKeyCallback: ssh.InsecureIgnoreHostKey(), // a test VM on loopback
		Timeout:         10 * time.Second,
	})
	must(t, err)
	defer conn.Close()
	sess, err := conn.NewSession()
	must(t, err)
	defer sess.Close()
	var prefix strings.Builder
	for k, v := range env {
		fmt.Fprintf(&prefix, "export %s=%q\n", k, v)
	}
	if out, err := sess.CombinedOutput(prefix.String() + script); err != nil {
		t.Fatalf("running the prototype's join on %s: %v\n%s", addr, err, out)
	}
}
