// Package ctle2e drives nodesmithctl, in-process, against the embedded
// stack of `make run`: the acceptance test of issue 17's CLI.
package ctle2e

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nodesmith/nodesmith/cmd/nodesmithctl/cli"

	"github.com/nodesmith/nodesmith/dev/embedded"
)

// startStack runs the embedded system on free ports until the test ends.
func startStack(t *testing.T) embedded.Addrs {
	t.Helper()
	cfg := embedded.DefaultConfig()
	cfg.DataDir = t.TempDir()
	cfg.GRPCAddr, cfg.RESTAddr, cfg.OpsAddr, cfg.EmulatorAddr = "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0", "127.0.0.1:0"
	cfg.NATSPort = -1
	cfg.SSHPort = 20000 + rand.IntN(20000)
	cfg.BootDelay = 200 * time.Millisecond
	cfg.ReadyDelay = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ready := make(chan embedded.Addrs, 1)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	go func() { done <- embedded.Run(ctx, cfg, log, func(a embedded.Addrs) { ready <- a }) }()
	var addrs embedded.Addrs
	select {
	case addrs = <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("stack did not start: %v", err)
	case <-time.After(2 * time.Minute):
		cancel()
		t.Fatal("stack not ready after 2m")
	}
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("stack stopped with an error: %v", err)
			}
		case <-time.After(60 * time.Second):
			t.Error("stack did not stop within 60s")
		}
	})
	return addrs
}

type result struct {
	code        int
	out, errOut string
}

func (r result) String() string {
	return "exit " + string(rune('0'+r.code)) + "\nstdout:\n" + r.out + "stderr:\n" + r.errOut
}

// ctl runs nodesmithctl with the test's config file.
type ctl struct {
	t      *testing.T
	config string
}

func (c ctl) run(stdin string, args ...string) result {
	c.t.Helper()
	var out, errOut bytes.Buffer
	code := cli.Run(context.Background(), append([]string{"--config", c.config}, args...), strings.NewReader(stdin), &out, &errOut)
	return result{code: code, out: out.String(), errOut: errOut.String()}
}

func (c ctl) must(stdin string, args ...string) result {
	c.t.Helper()
	r := c.run(stdin, args...)
	if r.code != 0 {
		c.t.Fatalf("nodesmithctl %s: %s", strings.Join(args, " "), r)
	}
	return r
}

// The hooks, template and group the test applies: the embedded default
// configuration's, through the catalog.
const manifests = `kind: Hook
name: e2e-join
spec:
  timeout: 2m
  script: |
    set -eu
    echo "e2e-join on $NODE_NAME as $PROVIDER_ID"
    hostnamectl set-hostname "$NODE_NAME"
    etc="${SIMVM_SANDBOX:-}/etc"
    echo "KUBELET_EXTRA_ARGS=--provider-id=$PROVIDER_ID" > "$etc/default/kubelet"
    kubeadm join "$API_SERVER" --node-name "$NODE_NAME" \
      --token "$(cat "$etc/kubeadm/token")" \
      --discovery-token-ca-cert-hash "$(cat "$etc/kubeadm/ca-cert-hash")"
---
kind: Hook
name: e2e-drain
spec:
  onFailure: CONTINUE
  script: |
    set -eu
    echo "e2e-drain of $NODE_NAME"
    kubectl drain "$NODE_NAME" --ignore-daemonsets --delete-emptydir-data
    kubeadm reset -f
---
kind: InstanceTemplate
name: e2e-small
spec:
  account: dev
  zone: ap-guangzhou-3
  instanceType: S5.MEDIUM4
  arch: amd64
  os: linux
  hookEnv: {API_SERVER: "10.0.0.1:6443"}
  parameters:
    ImageId: img-nodesmith
    InstanceChargeType: POSTPAID_BY_HOUR
    InstanceName: e2e-worker
---
kind: NodeGroup
name: e2e
spec:
  minSize: 0
  maxSize: 10
  instanceTemplate: {name: e2e-small}
  hooks:
    afterCreated: {name: e2e-join}
    beforeDelete: {name: e2e-drain}
  nodeTemplate:
    labels: {nodesmith.io/pool: e2e}
    capacity: {cpu: "2", memory: 4Gi, pods: "110"}
`

type instance struct {
	Status struct {
		ID      string `json:"id"`
		State   string `json:"state"`
		CloudID string `json:"cloudID"`
	} `json:"status"`
}

// TestNodesmithctlAgainstTheEmbeddedStack is issue 17's acceptance test:
// apply a template and a group, scale to 5 and watch until Running,
// describe an instance, delete one (through its before_delete hook), and a
// concurrent apply refused with a clear message.
func TestNodesmithctlAgainstTheEmbeddedStack(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	addrs := startStack(t)
	dir := t.TempDir()
	token := filepath.Join(dir, "admin.token")
	if err := os.WriteFile(token, []byte(addrs.AdminToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c := ctl{t: t, config: filepath.Join(dir, "config.yaml")}
	c.must("", "config", "set-context", "e2e", "--server", "http://"+addrs.REST, "--token-file", token, "--current")

	// Apply the hooks, the template and the group.
	r := c.must(manifests, "apply", "-f", "-")
	for _, want := range []string{"hook/e2e-join created", "hook/e2e-drain created", "instancetemplate/e2e-small created", "nodegroup/e2e created"} {
		if !strings.Contains(r.out, want) {
			t.Fatalf("apply output lacks %q:\n%s", want, r)
		}
	}
	if r := c.must("", "get", "templates", "e2e-small"); !strings.Contains(r.out, "S5.MEDIUM4") || !strings.Contains(r.out, "e2e") {
		t.Fatalf("get templates:\n%s", r)
	}

	// Scale to 5 and watch until the five are Running.
	c.must("", "scale", "e2e", "--to", "5")
	r = c.must("", "watch", "--group", "e2e", "--until-stable", "--timeout", "3m")
	if !strings.Contains(r.out, "stable: e2e 5/5 running") || !strings.Contains(r.out, "group/e2e [####################] 5/5 running") {
		t.Fatalf("watch did not end stable at 5/5:\n%s", r)
	}
	t.Logf("nodesmithctl watch --group e2e --until-stable:\n%s", r.out)
	// Every instance not Running at the first snapshot was seen becoming
	// Running (the watch starts before the VMs boot: all five, in practice).
	first := regexp.MustCompile(`group/e2e \[[#+-]+\] (\d)/5 running`).FindStringSubmatch(r.out)
	if first == nil {
		t.Fatalf("watch printed no progress line for e2e:\n%s", r)
	}
	toRunning := len(regexp.MustCompile(`(?m)instance/\S+ \(e2e\): JOINED -> RUNNING: `).FindAllString(r.out, -1))
	if runningAtStart := int(first[1][0] - '0'); toRunning != 5-runningAtStart {
		t.Fatalf("watch started with %d Running and showed %d transitions to RUNNING, want %d:\n%s", runningAtStart, toRunning, 5-runningAtStart, r)
	}
	if !strings.Contains(r.out, "group/e2e [") || strings.Count(r.out, "group/e2e [") < 2 {
		t.Fatalf("watch printed no progress:\n%s", r)
	}

	// The five instances, and one in detail.
	r = c.must("", "get", "instances", "--group", "e2e", "-o", "json")
	var list struct {
		Items []instance `json:"items"`
	}
	if err := json.Unmarshal([]byte(r.out), &list); err != nil {
		t.Fatalf("get instances -o json: %v\n%s", err, r)
	}
	var running []instance
	for _, in := range list.Items {
		if in.Status.State == "RUNNING" {
			running = append(running, in)
		}
	}
	if len(running) != 5 {
		t.Fatalf("%d instances Running, want 5:\n%s", len(running), r.out)
	}
	victim := running[0].Status
	r = c.must("", "describe", "instance", victim.ID)
	for _, want := range []string{"Cloud ID:", victim.CloudID, "Node:", "History:", "after_created hook succeeded", "e2e-join on ", "Trace ID:"} {
		if !strings.Contains(r.out, want) {
			t.Errorf("describe instance lacks %q:\n%s", want, r.out)
		}
	}
	if !regexp.MustCompile(`JOINED\s+RUNNING`).MatchString(r.out) {
		t.Errorf("describe instance's history lacks JOINED -> RUNNING:\n%s", r.out)
	}

	// Delete one: through the before_delete hook, the target drops to 4.
	r = c.must("", "delete", victim.ID)
	if !strings.Contains(r.out, "before_delete") {
		t.Fatalf("delete:\n%s", r)
	}
	r = c.must("", "watch", "--group", "e2e", "--until-stable", "--timeout", "3m")
	if !strings.Contains(r.out, "stable: e2e 4/4 running") {
		t.Fatalf("after delete, watch did not end at 4/4:\n%s", r)
	}
	r = c.must("", "describe", "instance", victim.ID)
	if !strings.Contains(r.out, "PENDING_DELETION") || !strings.Contains(r.out, "e2e-drain of ") {
		t.Fatalf("the deleted instance did not go through its before_delete hook:\n%s", r.out)
	}

	// Two operators apply the group they read at the same version: one
	// wins, the other is refused with the message and exit code 4.
	read := c.must("", "get", "groups", "e2e", "-o", "yaml").out
	if !strings.Contains(read, "resourceVersion:") || !strings.Contains(read, "maxSize: 10") {
		t.Fatalf("get -o yaml:\n%s", read)
	}
	var wg sync.WaitGroup
	results := make([]result, 2)
	for i, max := range []string{"maxSize: 12", "maxSize: 14"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var out, errOut bytes.Buffer
			code := cli.Run(context.Background(), []string{"--config", c.config, "apply", "-f", "-"}, strings.NewReader(strings.Replace(read, "maxSize: 10", max, 1)), &out, &errOut)
			results[i] = result{code: code, out: out.String(), errOut: errOut.String()}
		}()
	}
	wg.Wait()
	won, lost := results[0], results[1]
	if won.code != 0 {
		won, lost = lost, won
	}
	if won.code != 0 || won.out != "nodegroup/e2e configured\n" {
		t.Fatalf("neither concurrent apply succeeded:\n%s\n%s", results[0], results[1])
	}
	if lost.code != cli.ExitConflict || !regexp.MustCompile(`NodeGroup "e2e" was changed since you read it \(resourceVersion \d+, now \d+\): get it again and re-apply`).MatchString(lost.errOut) {
		t.Fatalf("the concurrent apply was not refused clearly:\n%s", lost)
	}
	// And the stale file stays refused afterwards.
	if r := c.run(read, "apply", "-f", "-"); r.code != cli.ExitConflict || !strings.Contains(r.errOut, "was changed since you read it") {
		t.Fatalf("stale apply:\n%s", r)
	}
	if r := c.must("", "get", "groups", "e2e"); !strings.Contains(r.out, "e2e") {
		t.Fatalf("get groups:\n%s", r)
	}
}
