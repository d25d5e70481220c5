package embedded

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/nodesmith/nodesmith/libs/logging/logtest"
	"github.com/nodesmith/nodesmith/libs/natsauth"
	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
	"github.com/nodesmith/nodesmith/tools/cvmemu"
)

// encodings are the forms a secret is looked for in: plaintext, and its
// base64 (standard and URL alphabets) at each of the three alignments it
// can have inside a longer base64 text (only the characters that depend on
// the secret alone).
func encodings(secret string) []string {
	out := []string{secret}
	for k := range 3 {
		b := append(make([]byte, k), secret...)
		enc := base64.StdEncoding.EncodeToString(b)
		start := 0
		if k > 0 {
			start = 4
		}
		end := len(b) / 3 * 4
		s := enc[start:end]
		out = append(out, s, strings.NewReplacer("+", "-", "/", "_").Replace(s))
	}
	return out
}

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// checkEnvScript prints "<name>-ok" when $name holds the value whose hash
// is given (the script never holds the value itself), else "<name>-bad".
func checkEnvScript(vars map[string]string) string {
	var b strings.Builder
	for name, value := range vars {
		fmt.Fprintf(&b, "if [ \"$(printf %%s \"$%s\" | sha256sum | cut -c1-64)\" = %s ]; then echo %s-ok; else echo %s-bad; fi\n", name, sha(value), name, name)
	}
	return b.String()
}

// TestNoSecretOnTheBus plants distinctive secrets everywhere one can be
// given (account credentials, hook env of the REST API and of the
// configuration file, secretParameters of both), runs a scale-up and a
// scale-down of a file group and of an API group, and then looks for each
// secret, in plaintext and in base64, in every message published on the
// bus, every stored message of every stream (KV buckets included), every
// file of the NATS store, the logs of the whole stack and the REST
// answers. The hooks check (by hash) that they got the opened values, and
// the cloud emulator that it got the opened secret parameters.
func TestNoSecretOnTheBus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	secrets := map[string]string{
		"credentials":       "nsx-cred-key-5b1e0c7d9a2f4e6b8c3d",
		"api-hook-env":      "nsx-api-hook-env-8d2c4f6a1e3b5d7c",
		"api-template-env":  "nsx-api-tmpl-env-2f7a9c1e4b6d8a0c",
		"config-template":   "nsx-cfg-tmpl-env-6c4e2a0b8d1f3e5a",
		"config-inline":     "nsx-cfg-inline-env-9e1a3c5b7d2f4a6c",
		"config-delete":     "nsx-cfg-delete-env-3a5c7e9b1d4f6a8c",
		"api-secret-param":  "nsx-api-param-pw-4d6f8a0c2e5b7d9f",
		"config-secret-prm": "nsx-cfg-param-pw-7b9d1f3a5c8e0a2d",
	}
	const teamID = "AKIDsecrettest000000000000000000"

	dataDir := t.TempDir()
	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	cfgScript := checkEnvScript(map[string]string{"CFG_TEMPLATE_SECRET": secrets["config-template"], "CFG_INLINE_SECRET": secrets["config-inline"]})
	cfgYAML := `accounts:
  dev:
    region: ap-guangzhou
instanceTemplates:
  default:
    account: dev
    zone: ap-guangzhou-3
    instanceType: S5.MEDIUM4
    hookEnv: {API_SERVER: "10.0.0.1:6443", CFG_TEMPLATE_SECRET: "` + secrets["config-template"] + `"}
    parameters:
      ImageId: img-nodesmith
      InstanceChargeType: POSTPAID_BY_HOUR
    secretParameters:
      LoginSettings: {Password: "` + secrets["config-secret-prm"] + `"}
nodeGroups:
  - id: workers
    minSize: 0
    maxSize: 5
    instanceTemplate: default
    nodeTemplate:
      capacity: {cpu: "2", memory: 4Gi, pods: "110"}
    hooks:
      afterCreated:
        env: {CFG_INLINE_SECRET: "` + secrets["config-inline"] + `"}
        script: |
` + indent(cfgScript+joinScript, "          ") + `
      beforeDelete:
        env: {CFG_DELETE_SECRET: "` + secrets["config-delete"] + `"}
        script: |
` + indent(checkEnvScript(map[string]string{"CFG_DELETE_SECRET": secrets["config-delete"]})+"kubeadm reset -f\n", "          ") + `
`
	if err := os.WriteFile(cfgFile, []byte(cfgYAML), 0o600); err != nil {
		t.Fatal(err)
	}

	cfg := testConfig(t, dataDir, 20000+rand.IntN(20000))
	cfg.ConfigFile = cfgFile
	cfg.EmulatorKeys = []EmulatorKey{{SecretID: teamID, SecretKey: secrets["credentials"], Account: "team"}}
	var runMu sync.Mutex
	var runBodies []string
	emulatorHook = func(e *cvmemu.Server) {
		e.ObserveRunInstances(func(_ string, body []byte) {
			runMu.Lock()
			defer runMu.Unlock()
			runBodies = append(runBodies, string(body))
		})
	}
	t.Cleanup(func() { emulatorHook = nil })
	// The test reads the whole bus as its own unrestricted NATS user: no
	// service identity may.
	observer, err := natsauth.NewAdmin()
	if err != nil {
		t.Fatal(err)
	}
	natsUsersHook = func(u []*server.NkeyUser) []*server.NkeyUser { return append(u, observer.User) }
	t.Cleanup(func() { natsUsersHook = nil })

	// The stack, with every log line of every service kept.
	logs := &logtest.Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, cancel := context.WithCancel(context.Background())
	s := &stack{cancel: cancel, done: make(chan error, 1)}
	ready := make(chan Addrs, 1)
	go func() { s.done <- Run(ctx, cfg, log, func(a Addrs) { ready <- a }) }()
	select {
	case s.addrs = <-ready:
	case err := <-s.done:
		cancel()
		t.Fatalf("stack did not start: %v", err)
	case <-time.After(90 * time.Second):
		cancel()
		t.Fatal("stack not ready")
	}
	stopped := false
	defer func() {
		if !stopped {
			s.stop(t)
		}
	}()

	// Everything published from now on.
	observerOpts, err := observer.NATSOptions()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(s.addrs.NATS, observerOpts...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var busMu sync.Mutex
	var bus [][]byte
	sub, err := nc.Subscribe(">", func(m *nats.Msg) {
		rec := []byte(m.Subject + " " + m.Reply + " ")
		for k, vs := range m.Header {
			rec = append(rec, k+"="+strings.Join(vs, ",")+" "...)
		}
		busMu.Lock()
		bus = append(bus, append(rec, m.Data...))
		busMu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	c := s.client(t)
	api := restClient{t: t, base: "http://" + s.addrs.REST + "/api/v1", token: s.addrs.AdminToken}
	api.must(201, "PUT", "/accounts/team", `{"regions":["ap-guangzhou"],"credentials":{"secretId":"`+teamID+`","secretKey":"`+secrets["credentials"]+`"}}`)
	api.must(201, "PUT", "/templates/team-small", `{"account":"team","zone":"ap-guangzhou-3","instanceType":"S5.MEDIUM4",
		"hookEnv":{"API_SERVER":"10.0.0.1:6443","API_TEMPLATE_SECRET":"`+secrets["api-template-env"]+`"},
		"parameters":{"ImageId":"img-nodesmith","InstanceChargeType":"POSTPAID_BY_HOUR"},
		"secretParameters":{"LoginSettings":{"Password":"`+secrets["api-secret-param"]+`"}}}`)
	hook, _ := json.Marshal(map[string]any{
		"script": checkEnvScript(map[string]string{"API_HOOK_SECRET": secrets["api-hook-env"], "API_TEMPLATE_SECRET": secrets["api-template-env"]}) + joinScript,
		"env":    map[string]string{"API_HOOK_SECRET": secrets["api-hook-env"]},
	})
	api.must(201, "PUT", "/hooks/team-join", string(hook))
	api.must(201, "PUT", "/nodegroups/team-workers", `{"minSize":0,"maxSize":5,"instanceTemplate":{"name":"team-small"},"hooks":{"afterCreated":{"name":"team-join"}},
		"nodeTemplate":{"capacity":{"cpu":"2","memory":"4Gi","pods":"110"}}}`)

	// Scale up both groups.
	for deadline := time.Now().Add(30 * time.Second); ; {
		groups := call(t, func(ctx context.Context) (*pb.NodeGroupsResponse, error) {
			return c.NodeGroups(ctx, &pb.NodeGroupsRequest{})
		})
		if len(groups.GetNodeGroups()) == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("groups: %v", groups.GetNodeGroups())
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, g := range []string{"workers", "team-workers"} {
		call(t, func(ctx context.Context) (*pb.NodeGroupIncreaseSizeResponse, error) {
			return c.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: g, Delta: 1})
		})
	}
	running := map[string][]*pb.Instance{}
	for _, g := range []string{"workers", "team-workers"} {
		running[g] = waitRunning(t, c, g, 1)
	}
	// The hooks got the opened values.
	for g, vars := range map[string][]string{"workers": {"CFG_TEMPLATE_SECRET", "CFG_INLINE_SECRET"}, "team-workers": {"API_HOOK_SECRET", "API_TEMPLATE_SECRET"}} {
		ins := instancesOf(t, api, g)
		if len(ins) != 1 {
			t.Fatalf("%s: %+v", g, ins)
		}
		for _, v := range vars {
			if !strings.Contains(ins[0].HookOutputTail, v+"-ok") {
				t.Errorf("%s: the hook did not get %s opened: %q", g, v, ins[0].HookOutputTail)
			}
		}
	}
	// The cloud got the opened secret parameters.
	runMu.Lock()
	bodies := strings.Join(runBodies, "\n")
	runMu.Unlock()
	for _, p := range []string{"config-secret-prm", "api-secret-param"} {
		if !strings.Contains(bodies, `"Password":"`+secrets[p]+`"`) {
			t.Errorf("no RunInstances request carried the %s secret parameter opened", p)
		}
	}

	// Scale down both.
	for g, ins := range running {
		call(t, func(ctx context.Context) (*pb.NodeGroupDeleteNodesResponse, error) {
			return c.NodeGroupDeleteNodes(ctx, &pb.NodeGroupDeleteNodesRequest{Id: g,
				Nodes: []*pb.ExternalGrpcNode{{ProviderID: ins[0].GetId(), Name: nodeName(ins[0].GetId())}}})
		})
	}
	for g := range running {
		waitRunning(t, c, g, 0)
	}

	// What the read API answers.
	var answers []byte
	for _, path := range []string{"/accounts", "/accounts/team", "/templates", "/templates/team-small", "/templates/default",
		"/hooks", "/hooks/team-join", "/nodegroups", "/nodegroups/workers", "/nodegroups/team-workers",
		"/instances?group=workers", "/instances?group=team-workers", "/transitions"} {
		answers = append(answers, api.must(200, "GET", path, "").body...)
	}
	for _, g := range []string{"workers", "team-workers"} {
		for _, in := range instancesOf(t, api, g) {
			answers = append(answers, api.must(200, "GET", "/instances/"+in.ID, "").body...)
		}
	}

	// Every stored message of every stream, KV buckets included.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var stored [][]byte
	sctx, scancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer scancel()
	streams := js.ListStreams(sctx)
	nStreams := 0
	for info := range streams.Info() {
		nStreams++
		st, err := js.Stream(sctx, info.Config.Name)
		if err != nil {
			t.Fatal(err)
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := st.GetMsg(sctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				t.Fatalf("stream %s seq %d: %v", info.Config.Name, seq, err)
			}
			rec := []byte(info.Config.Name + " " + m.Subject + " ")
			for k, vs := range m.Header {
				rec = append(rec, k+"="+strings.Join(vs, ",")+" "...)
			}
			stored = append(stored, append(rec, m.Data...))
		}
	}
	if err := streams.Err(); err != nil {
		t.Fatal(err)
	}
	if nStreams < 3 || len(stored) == 0 {
		t.Fatalf("read %d messages of %d streams: not the whole store", len(stored), nStreams)
	}
	if err := sub.Unsubscribe(); err != nil {
		t.Fatal(err)
	}
	busMu.Lock()
	busMsgs := bus
	busMu.Unlock()
	if len(busMsgs) < 20 {
		t.Fatalf("recorded only %d bus messages", len(busMsgs))
	}

	// Stop the stack so the NATS store is flushed, then read its files.
	nc.Close()
	s.stop(t)
	stopped = true
	storeFiles := map[string][]byte{}
	if err := filepath.WalkDir(filepath.Join(dataDir, "nats"), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		storeFiles[p] = b
		return err
	}); err != nil {
		t.Fatal(err)
	}
	if len(storeFiles) == 0 {
		t.Fatal("no NATS store files")
	}

	places := map[string][][]byte{
		"a bus message":     busMsgs,
		"a stream message":  stored,
		"the logs":          {[]byte(logs.String())},
		"a REST API answer": {answers},
		"a NATS store file": nil,
	}
	for _, b := range storeFiles {
		places["a NATS store file"] = append(places["a NATS store file"], b)
	}
	for what, secret := range secrets {
		for i, form := range encodings(secret) {
			for place, blobs := range places {
				for _, b := range blobs {
					if bytes.Contains(b, []byte(form)) {
						kind := "in plaintext"
						if i > 0 {
							kind = "base64-encoded"
						}
						t.Errorf("the %s secret is %s in %s: %.300q", what, kind, place, excerpt(b, form))
						break
					}
				}
			}
		}
	}
}

// joinScript is the end of the after_created hooks: the simulated join.
const joinScript = `set -eu
etc="${SIMVM_SANDBOX:-}/etc"
echo "KUBELET_EXTRA_ARGS=--provider-id=$PROVIDER_ID" > "$etc/default/kubelet"
kubeadm join "$API_SERVER" --node-name "$NODE_NAME" \
  --token "$(cat "$etc/kubeadm/token")" \
  --discovery-token-ca-cert-hash "$(cat "$etc/kubeadm/ca-cert-hash")"
`

func indent(s, prefix string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i, l := range lines {
		lines[i] = prefix + l
	}
	return strings.Join(lines, "\n")
}

func excerpt(b []byte, form string) string {
	i := bytes.Index(b, []byte(form))
	lo, hi := max(0, i-120), min(len(b), i+len(form)+60)
	return string(b[lo:hi])
}
