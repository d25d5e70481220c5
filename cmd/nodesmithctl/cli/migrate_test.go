package cli_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/nodesmith/nodesmith/cmd/nodesmithctl/cli"
)

const fixtures = "../migrate/testdata"

func run(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	root := cli.NewRootCommand(strings.NewReader(""), &out, &errOut)
	root.SetArgs(append(args, "--config", filepath.Join(t.TempDir(), "none.yaml")))
	err := root.Execute()
	return out.String(), errOut.String(), err
}

func TestMigrateConfigKeepsKeysInSecretFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "credentials")
	out, errOut, err := run(t, "migrate", "config", filepath.Join(fixtures, "prototype-config.yaml"), "--secrets-dir", dir)
	if err != nil {
		t.Fatal(err)
	}
	golden, _ := os.ReadFile(filepath.Join(fixtures, "nodesmith.golden.yaml"))
	if out != string(golden) {
		t.Errorf("stdout is not the converted file:\n%s", out)
	}
	for _, secret := range []string{"fake-secret-id-for-tests", "fake-secret-key-for-tests"} {
		if strings.Contains(out+errOut, secret) {
			t.Errorf("a key was printed")
		}
	}
	if !strings.Contains(errOut, "warning: ") || !strings.Contains(errOut, "line 58: nodeGroups[0].priority") || !strings.Contains(errOut, "kubectl -n nodesmith create secret generic cloud-credentials-prod-account") {
		t.Errorf("stderr:\n%s", errOut)
	}
	for name, want := range map[string]string{"secretId": "fake-secret-id-for-tests", "secretKey": "fake-secret-key-for-tests"} {
		p := filepath.Join(dir, "prod-account", name)
		b, err := os.ReadFile(p)
		if err != nil || string(b) != want {
			t.Errorf("%s: %q, %v", p, b, err)
		}
		if st, err := os.Stat(p); err != nil || st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v", p, st.Mode())
		}
	}
	// A second run does not overwrite credentials.
	if _, _, err := run(t, "migrate", "config", filepath.Join(fixtures, "prototype-config.yaml"), "--secrets-dir", dir); err == nil || !strings.Contains(err.Error(), "not overwriting") {
		t.Errorf("second run: %v", err)
	}
}

func TestMigrateStatePlansThenApplies(t *testing.T) {
	status := filepath.Join(fixtures, "nodegroup-status.yaml")
	proto := filepath.Join(fixtures, "prototype-config.yaml")
	var bodies []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/api/v1/nodegroups/worker-group/adopt" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, `{"code":"not_found","message":"unexpected `+r.URL.Path+`"}`, http.StatusNotFound)
			return
		}
		var b map[string]any
		_ = json.NewDecoder(r.Body).Decode(&b)
		bodies = append(bodies, b)
		_, _ = w.Write([]byte(`{"group":"worker-group","results":[` +
			`{"cloudID":"ins-proto001","nodeName":"proto-node-1","result":"adopted","instanceID":"worker-group-a"},` +
			`{"cloudID":"ins-proto002","nodeName":"proto-node-2","result":"refused","message":"no VM ins-proto002"}],"adopted":1,"refused":1}`))
	}))
	defer srv.Close()
	token := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(token, []byte("tok\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	out, _, err := run(t, "migrate", "state", "--from", status, "--config-file", proto)
	if err != nil || !strings.Contains(out, "ins-proto002  proto-node-2  externalgrpc://tencentcloud/prod-account/ap-beijing/ins-proto002  adopt") ||
		!strings.Contains(out, "skip (Creating") || !strings.Contains(out, "Dry run: nothing changed") || len(bodies) != 0 {
		t.Fatalf("plan: %v\n%s", err, out)
	}

	out, _, err = run(t, "migrate", "state", "--from", status, "--config-file", proto, "--apply", "--server", srv.URL, "--token-file", token)
	if err == nil || !strings.Contains(err.Error(), "1 VMs refused") {
		t.Errorf("err %v, want the refusal counted", err)
	}
	if !strings.Contains(out, "group worker-group: 1 adopted, 0 already adopted, 1 refused") || !strings.Contains(out, "no VM ins-proto002") {
		t.Errorf("output:\n%s", out)
	}
	if len(bodies) != 1 || bodies[0]["dryRun"] != false || len(bodies[0]["instances"].([]any)) != 2 {
		t.Fatalf("requests %v", bodies)
	}
	first := bodies[0]["instances"].([]any)[0].(map[string]any)
	if first["cloudID"] != "ins-proto001" || first["nodeName"] != "proto-node-1" || first["privateIP"] != "10.0.1.11" {
		t.Errorf("first VM %v", first)
	}

	if _, _, err := run(t, "migrate", "state", "--from", status, "--apply", "--check"); err == nil || cli.ExitCode(err) != cli.ExitUsage {
		t.Errorf("--apply with --check: %v", err)
	}
}
