package service_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nodesmith/nodesmith/libs/health"
	"github.com/nodesmith/nodesmith/libs/messaging"
	"github.com/nodesmith/nodesmith/libs/natstest"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/adapters/memory"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/domain"
	"github.com/nodesmith/nodesmith/services/lifecycle/internal/fakeworkers"
	"github.com/nodesmith/nodesmith/services/lifecycle/service"
)

func TestBadConfigFailsStartUpNamingFileAndField(t *testing.T) {
	env := natstest.Start(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "groups.yaml")
	bad := strings.Replace(testConfig, "maxSize: 20", "maxSize: 20\n    targetSize: 30", 1)
	bad = strings.Replace(bad, "instanceTemplate: small", "instanceTemplate: large", 1)
	if err := os.WriteFile(path, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig("")
	cfg.ConfigData = nil
	cfg.ConfigFile = path
	err := service.Run(context.Background(), cfg, service.Deps{Conn: env.Conn, Logger: testLogger(t)})
	if err == nil {
		t.Fatal("started with a bad configuration file")
	}
	for _, want := range []string{path, "nodeGroups[0].targetSize", "nodeGroups[0].instanceTemplate", `unknown instance template "large"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error lacks %q:\n%v", want, err)
		}
	}
	if err := service.ValidateConfigData("inline", []byte(testConfig), ""); err != nil {
		t.Errorf("ValidateConfigData(valid) = %v", err)
	}
	if err := service.ValidateConfigData("inline", []byte(bad), ""); err == nil || !strings.Contains(err.Error(), "inline") {
		t.Errorf("ValidateConfigData(bad) = %v", err)
	}
	cfg = service.DefaultConfig()
	cfg.CreateParallelism = 0
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "create-parallelism") {
		t.Errorf("Validate = %v", err)
	}
}

// The file is re-read when it changes, including through the atomic
// symlink swap kubelet does for ConfigMap volumes; the runtime target is
// kept; an invalid new version is ignored.
func TestConfigHotReload(t *testing.T) {
	dir := t.TempDir()
	write := func(version int, content string) {
		// kubelet layout: groups.yaml -> ..data/groups.yaml, ..data -> ..v<n>
		vdir := filepath.Join(dir, fmt.Sprintf("..v%d", version))
		if err := os.MkdirAll(vdir, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(vdir, "groups.yaml"), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		_ = os.Remove(tmp)
		if err := os.Symlink(filepath.Base(vdir), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	write(1, testConfig)
	link := filepath.Join(dir, "groups.yaml")
	if err := os.Symlink(filepath.Join("..data", "groups.yaml"), link); err != nil {
		t.Fatal(err)
	}
	cfg := fastConfig("")
	cfg.ConfigData = nil
	cfg.ConfigFile = link
	cfg.ConfigReloadInterval = 50 * time.Millisecond
	s := newStack(t, cfg, service.Deps{})
	mustOK(t, s.increase("workers", 2))

	write(2, strings.Replace(testConfig, "maxSize: 20", "maxSize: 7", 1))
	eventually(t, "the new max size applied", func() bool { return s.group("workers").MaxSize == 7 })
	if g := s.group("workers"); g.TargetSize != 2 {
		t.Errorf("target %d after reload, want the runtime 2", g.TargetSize)
	}

	write(3, "nodeGroups: [\n")
	write(4, strings.Replace(testConfig, "maxSize: 20", "maxSize: 9", 1))
	eventually(t, "a later valid version applied", func() bool { return s.group("workers").MaxSize == 9 })
}

func TestReconcilerThroughJetStream(t *testing.T) {
	cfg := fastConfig(testConfig)
	cfg.ReconcileInterval = 100 * time.Millisecond
	cfg.OrphanGrace = 50 * time.Millisecond
	s := newStack(t, cfg, service.Deps{})
	mustOK(t, s.increase("workers", 2))
	eventually(t, "2 Running", func() bool { return countIn(s.instances("workers"), domain.StateRunning) == 2 })

	// An orphan (a VM whose record is gone, created after lifecycle
	// started: the start-up hold does not cover it) and a VM deleted
	// behind our back.
	s.workers.Cloud.AddVM(fakeworkers.VM{CloudID: "ins-orphan", InstanceID: "workers-orphan0000", Group: "workers",
		Cluster: "nodesmith", State: 2, CreatedAt: time.Now()})
	gone := s.instances("workers")[0]
	time.Sleep(60 * time.Millisecond) // past the grace since it became Running
	s.workers.Cloud.RemoveVM(gone.CloudID)

	eventually(t, "orphan terminated", func() bool {
		for _, vm := range s.workers.Cloud.Running() {
			if vm.CloudID == "ins-orphan" {
				return false
			}
		}
		return true
	})
	eventually(t, "vanished instance closed and replaced", func() bool {
		is := s.instances("workers")
		for _, in := range is {
			if in.ID == gone.ID && in.State != domain.StateDeleted {
				return false
			}
		}
		return countIn(is, domain.StateRunning) == 2
	})
}

func TestMetricsAndHealth(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cfg := fastConfig(testConfig)
	cfg.HealthAddr = addr
	reg := prometheus.NewRegistry()
	s := newStack(t, cfg, service.Deps{Registry: reg, Health: &health.Checks{}})
	mustOK(t, s.increase("workers", 1))
	eventually(t, "Running", func() bool { return countIn(s.instances("workers"), domain.StateRunning) == 1 })

	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, _ := get("/readyz"); code != http.StatusOK {
		t.Errorf("/readyz = %d", code)
	}
	_, body := get("/metrics")
	for _, want := range []string{
		`nodesmith_lifecycle_instances{group="workers",state="Running"} 1`,
		`nodesmith_lifecycle_group_target_size{group="workers"} 1`,
		`nodesmith_lifecycle_transitions_total{from="Joined",reason="hook_finished",to="Running"} 1`,
		`nodesmith_lifecycle_operations_total{code="OK",op="IncreaseSize"}`,
		`nodesmith_lifecycle_commands_published_total{kind="create",result="ok"}`,
		`nodesmith_lifecycle_state_duration_seconds_bucket`,
		`nodesmith_worker_messages_total{consumer="lifecycle",outcome="ack"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	// A restart on the same registry (in-process host) works.
	s.stop()
	s.start()
	mustOK(t, s.increase("workers", 1))

	// Readiness covers the event consumer: without it a takeover could not
	// consume results.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, admin := s.env.ConnectAdmin(t) // no service may delete a consumer
	if err := admin.DeleteConsumer(ctx, messaging.EventStream, messaging.ConsumerLifecycle); err != nil {
		t.Fatal(err)
	}
	eventually(t, "/readyz failing without the consumer", func() bool {
		code, body := get("/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "lifecycle-consumer")
	})
}

// The configuration the embedded launcher ships (see the README) is valid.
func TestLauncherDefaultConfigIsValid(t *testing.T) {
	const def = `
accounts:
  dev:
    region: ap-guangzhou
instanceTemplates:
  default:
    account: dev
    zone: ap-guangzhou-3
    instanceType: S5.MEDIUM4
    hookEnv: {API_SERVER: "10.0.0.1:6443"}
    parameters:
      ImageId: img-nodesmith
nodeGroups:
  - id: workers
    minSize: 0
    maxSize: 20
    instanceTemplate: default
    nodeTemplate:
      labels: {node-role.kubernetes.io/worker: ""}
      capacity: {cpu: "2", memory: 4Gi, pods: "110"}
      allocatable: {cpu: 1900m, memory: 3584Mi, pods: "110"}
    hooks:
      afterCreated:
        script: |
          set -eu
          etc="${SIMVM_SANDBOX:-}/etc"
          echo "KUBELET_EXTRA_ARGS=--provider-id=$PROVIDER_ID" > "$etc/default/kubelet"
          kubeadm join "$API_SERVER" --node-name "$NODE_NAME" \
            --token "$(cat "$etc/kubeadm/token")" \
            --discovery-token-ca-cert-hash "$(cat "$etc/kubeadm/ca-cert-hash")"
`
	if err := service.ValidateConfigData("default.yaml", []byte(def), ""); err != nil {
		t.Fatal(err)
	}
}

// Without a cluster (not in a pod, no kubeconfig), the default refuses to
// start: no-cluster mode must be chosen explicitly; an injected cluster
// needs no Kubernetes client.
func TestClusterModeMustBeExplicit(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	env := natstest.Start(t)
	cfg := fastConfig(testConfig)
	cfg.Cluster = ""
	err := service.Run(context.Background(), cfg, service.Deps{Conn: env.Conn, Logger: testLogger(t)})
	if err == nil || !strings.Contains(err.Error(), "--cluster=none") || !strings.Contains(err.Error(), "--kubeconfig") {
		t.Fatalf("auto mode without a cluster: %v", err)
	}

	cfg.Cluster = "minikube"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "cluster") {
		t.Errorf("Validate accepted cluster %q: %v", cfg.Cluster, err)
	}
	cfg.Cluster = service.ClusterKubernetes
	cfg.LeaderElectRenewDeadline = cfg.LeaderElectLeaseDuration
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "renew deadline") {
		t.Errorf("Validate accepted a renew deadline equal to the lease duration: %v", err)
	}

	// An injected cluster: auto mode uses it, without Kubernetes.
	cfg = fastConfig(testConfig)
	cfg.Cluster = ""
	s := newStackOn(t, env, cfg, service.Deps{Cluster: memory.NewCluster()})
	mustOK(t, s.increase("workers", 1))
}
