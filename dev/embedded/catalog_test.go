package embedded

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common"
	"github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/common/profile"
	cvm "github.com/tencentcloud/tencentcloud-sdk-go/tencentcloud/cvm/v20170312"

	pb "github.com/nodesmith/nodesmith/proto/externalgrpc"
)

const (
	teamSecretID  = "AKIDteamcatalog00000000000000000"
	teamSecretKey = "team-catalog-secret-key-0123456789"
)

type restClient struct {
	t     *testing.T
	base  string
	token string
}

type restResponse struct {
	status int
	header http.Header
	body   []byte
}

func (c restClient) do(method, path, body string, header ...string) restResponse {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return restResponse{status: resp.StatusCode, header: resp.Header, body: b}
}

func (c restClient) must(want int, method, path, body string, header ...string) restResponse {
	c.t.Helper()
	r := c.do(method, path, body, header...)
	if r.status != want {
		c.t.Fatalf("%s %s = %d, want %d: %s", method, path, r.status, want, r.body)
	}
	return r
}

// describe lists the VMs the emulator account of the given key owns.
func describe(t *testing.T, endpoint, secretID, secretKey string) map[string]*cvm.Instance {
	t.Helper()
	cpf := profile.NewClientProfile()
	cpf.HttpProfile.Endpoint = endpoint
	cpf.HttpProfile.Scheme = "HTTP"
	cl, err := cvm.NewClient(common.NewCredential(secretID, secretKey), "ap-guangzhou", cpf)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := cl.DescribeInstances(cvm.NewDescribeInstancesRequest())
	if err != nil {
		t.Fatalf("DescribeInstances as %s: %v", secretID, err)
	}
	out := map[string]*cvm.Instance{}
	for _, in := range resp.Response.InstanceSet {
		out[*in.InstanceId] = in
	}
	return out
}

type instanceJSON struct {
	ID             string `json:"id"`
	CloudID        string `json:"cloudID"`
	HookOutputTail string `json:"hookOutputTail"`
}

// TestCatalogThroughTheAdminAPI is the acceptance path of the catalog: an
// account with its own credentials, a template on it, a hook and a group
// naming both, all created through the REST API; CA scales the group up;
// the VM is created in the emulator under that account's key and runs the
// hook; a changed template is used by the next VM; a template in use cannot
// be deleted.
func TestCatalogThroughTheAdminAPI(t *testing.T) {
	if testing.Short() {
		t.Skip("starts the whole stack")
	}
	dataDir := t.TempDir()
	cfg := testConfig(t, dataDir, 20000+rand.IntN(20000))
	cfg.EmulatorKeys = []EmulatorKey{{SecretID: teamSecretID, SecretKey: teamSecretKey, Account: "team"}}
	s := start(t, cfg)
	defer s.stop(t)
	c := s.client(t)
	api := restClient{t: t, base: "http://" + s.addrs.REST + "/api/v1", token: s.addrs.AdminToken}

	r := api.must(201, "PUT", "/accounts/team", `{"regions":["ap-guangzhou"],"credentials":{"secretId":"`+teamSecretID+`","secretKey":"`+teamSecretKey+`"}}`)
	if bytes.Contains(r.body, []byte(teamSecretKey)) {
		t.Fatal("the account's secret key was returned")
	}
	var acct struct {
		Credentials struct {
			Stored bool   `json:"stored"`
			Source string `json:"source"`
		} `json:"credentials"`
	}
	if err := json.Unmarshal(api.must(200, "GET", "/accounts/team", "").body, &acct); err != nil || !acct.Credentials.Stored || acct.Credentials.Source != "catalog" {
		t.Fatalf("GET account: %+v, %v", acct, err)
	}
	tmpl := func(instanceType string) string {
		return `{"account":"team","zone":"ap-guangzhou-3","instanceType":"` + instanceType + `","arch":"amd64","os":"linux",
			"hookEnv":{"API_SERVER":"10.0.0.1:6443"},
			"parameters":{"ImageId":"img-nodesmith","InstanceChargeType":"POSTPAID_BY_HOUR","InstanceName":"team-worker"}}`
	}
	r = api.must(201, "PUT", "/templates/team-small", tmpl("S5.MEDIUM4"))
	tmplTag := r.header.Get("ETag")
	joinHook, err := json.Marshal(map[string]string{"timeout": "2m", "script": `set -eu
echo "team-join ran on $NODE_NAME"
hostnamectl set-hostname "$NODE_NAME"
etc="${SIMVM_SANDBOX:-}/etc"
echo "KUBELET_EXTRA_ARGS=--provider-id=$PROVIDER_ID" > "$etc/default/kubelet"
kubeadm join "$API_SERVER" --node-name "$NODE_NAME" \
  --token "$(cat "$etc/kubeadm/token")" \
  --discovery-token-ca-cert-hash "$(cat "$etc/kubeadm/ca-cert-hash")"
`})
	if err != nil {
		t.Fatal(err)
	}
	api.must(201, "PUT", "/hooks/team-join", string(joinHook))
	api.must(201, "PUT", "/nodegroups/team-workers", `{"minSize":0,"maxSize":5,"instanceTemplate":{"name":"team-small"},"hooks":{"afterCreated":{"name":"team-join"}},
		"nodeTemplate":{"labels":{"nodesmith.io/pool":"team"},"capacity":{"cpu":"2","memory":"4Gi","pods":"110"}}}`)

	call(t, func(ctx context.Context) (*pb.NodeGroupIncreaseSizeResponse, error) {
		return c.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: "team-workers", Delta: 1})
	})
	waitRunning(t, c, "team-workers", 1)
	first := instancesOf(t, api, "team-workers")
	if len(first) != 1 || first[0].CloudID == "" {
		t.Fatalf("instances: %+v", first)
	}
	if !strings.Contains(first[0].HookOutputTail, "team-join ran on") {
		t.Errorf("hook output tail = %q, want the catalog hook's output", first[0].HookOutputTail)
	}
	// The VM belongs to the emulator account of the team's key, not dev's.
	teamVMs := describe(t, s.addrs.Emulator, teamSecretID, teamSecretKey)
	if vm := teamVMs[first[0].CloudID]; vm == nil || *vm.InstanceType != "S5.MEDIUM4" {
		t.Fatalf("VM %s not found under the team account (team has %d VMs)", first[0].CloudID, len(teamVMs))
	}
	devKey, err := os.ReadFile(filepath.Join(dataDir, "keys", "emulator-secret-key"))
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := describe(t, s.addrs.Emulator, emulatorSecretID, strings.TrimSpace(string(devKey)))[first[0].CloudID]; ok {
		t.Fatal("the VM was created under the dev account")
	}

	// A new template version: the next VM uses it, the first is untouched.
	api.must(200, "PUT", "/templates/team-small", tmpl("S5.LARGE8"), "If-Match", tmplTag)
	var grp struct {
		InstanceTemplate struct {
			InstanceType string `json:"instanceType"`
		} `json:"instanceTemplate"`
	}
	if err := json.Unmarshal(api.must(200, "GET", "/nodegroups/team-workers", "").body, &grp); err != nil || grp.InstanceTemplate.InstanceType != "S5.LARGE8" {
		t.Fatalf("the group did not follow the template: %+v, %v", grp, err)
	}
	call(t, func(ctx context.Context) (*pb.NodeGroupIncreaseSizeResponse, error) {
		return c.NodeGroupIncreaseSize(ctx, &pb.NodeGroupIncreaseSizeRequest{Id: "team-workers", Delta: 1})
	})
	waitRunning(t, c, "team-workers", 2)
	teamVMs = describe(t, s.addrs.Emulator, teamSecretID, teamSecretKey)
	var newVM string
	for _, in := range instancesOf(t, api, "team-workers") {
		if in.ID != first[0].ID {
			newVM = in.CloudID
		}
	}
	if vm := teamVMs[newVM]; vm == nil || *vm.InstanceType != "S5.LARGE8" {
		t.Fatalf("the second VM %q does not use the new template version", newVM)
	}
	if vm := teamVMs[first[0].CloudID]; vm == nil || *vm.InstanceType != "S5.MEDIUM4" {
		t.Fatal("the first VM changed")
	}

	// A template in use cannot be deleted.
	r = api.must(409, "DELETE", "/templates/team-small", "")
	if !strings.Contains(string(r.body), "team-workers") {
		t.Errorf("409 does not name the group: %s", r.body)
	}
}

func instancesOf(t *testing.T, api restClient, group string) []instanceJSON {
	t.Helper()
	var list struct {
		Items []instanceJSON `json:"items"`
	}
	if err := json.Unmarshal(api.must(200, "GET", "/instances?group="+group, "").body, &list); err != nil {
		t.Fatal(err)
	}
	for i, in := range list.Items {
		var full instanceJSON
		if err := json.Unmarshal(api.must(200, "GET", "/instances/"+in.ID, "").body, &full); err != nil {
			t.Fatal(err)
		}
		list.Items[i] = full
	}
	return list.Items
}
